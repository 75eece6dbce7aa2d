"""The builtins of the tile language, compiled: each `tl.<name>` call becomes compile-time values
and, for memory, statements of the loop IR (through the Emitter). One idea a module, each a layer
of the Builtins class:

    calls.py        a call bound with the builtin's signature, methods of values, indexing
    blocks.py       program ids, blocks made (tl.arange, tl.full) and reshaped (tl.trans, tl.cat)
    elementwise.py  tl.cast, tl.where, tl.maximum, the math functions
    reductions.py   tl.sum, tl.max, tl.argmax, tl.cumsum, tl.softmax
    dot.py          tl.dot
    block_ptr.py    tl.make_block_ptr, tl.advance
    memory.py       tl.load, tl.store, the atomics
    checks.py       hints, tl.static_assert, tl.device_assert, bounds checks, tl.device_print
"""

from .dot import Dot
from .elementwise import Elementwise
from .memory import Memory
from .reductions import Reductions


class Builtins(Memory, Reductions, Elementwise, Dot):
    """Every builtin the compiler knows, `b_<name>` for `tl.<name>` (calls.py dispatches)."""


__all__ = ["Builtins"]

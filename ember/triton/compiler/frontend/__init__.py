"""The kernel's Python AST walked into loop IR, one program's worth (the grid loop is launch's).

Python values are evaluated in Python as the walk meets them (constexpr parameters, `if` on
constexpr conditions, `tl.static_range` loops unrolled, calls of plain Python functions on
constants); run-time values are the compile-time values of values.py. Anything the walk does not
support is a TileError naming the kernel's file and line. One idea a module, each a layer of the
Frontend class:

    walker.py       the functions walked (nested @jit functions inlined), error lines, flush
    statements.py   assignments, `if` (run-time branches merged through local buffers), returns
    loops.py        `for` and `while`, loop-carried names kept in local buffers
    expressions.py  expressions, calls (builtins, @jit functions, Python functions on constants)
"""

from .expressions import Expressions
from .loops import Loops


class Frontend(Loops, Expressions):
    """The walk of a kernel (the package doc): `Frontend(emitter, builtins).run(fn, args)`."""


__all__ = ["Frontend"]

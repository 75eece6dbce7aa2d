"""What a GPU kernel's launch is, read from its loop IR: the extent along each block and thread
index (`launch_dims`), the threads of a block, the blocks a multiprocessor must hold
(`__launch_bounds__`' second number: MIN_BLOCKS) and whether its shared arrays live in dynamic
shared memory (DYNAMIC). The renderer (ember.cuda.codegen), the limits' checks, the barriers'
pass and the interpreter read them alike.
"""

from __future__ import annotations

import functools
import operator

from ..tir.expr import as_int
from ..tir.functor import collect, visit_stmt
from ..tir.stmt import BLOCK_TAGS, THREAD_BINDING, For, PrimFunc


def launch_dims(func: PrimFunc) -> dict[str, int]:
    """The launch's extent along each GPU index ("blockIdx.x": 64, "threadIdx.x": 256): the
    largest extent of a loop bound to it (absent indices are 1). A loop over blocks whose extent
    is not a constant (a tile kernel's grid) takes the grid the launch gives: it is not counted."""
    dims: dict[str, int] = {}

    def visit(s):
        if isinstance(s, For) and s.kind == THREAD_BINDING and as_int(s.extent) is not None:
            dims[s.thread_tag] = max(dims.get(s.thread_tag, 1), as_int(s.extent))

    visit_stmt(func.body, visit)
    return dims


DYNAMIC = "pragma_dynamic_shared"  # a loop's annotation: the kernel's shared arrays in dynamic shared memory
DYNAMIC_SHARED = "ember_dynamic_shared"  # the kernel's dynamic shared memory


MIN_BLOCKS = "pragma_min_blocks"  # a loop's annotation: the blocks a multiprocessor must hold at once


def min_blocks(func: PrimFunc) -> int | None:
    """The blocks a multiprocessor must hold (`__launch_bounds__`' second number) that a loop of
    the kernel asks for (MIN_BLOCKS), the most where several do; None where none does."""
    loops = collect(func.body, lambda s: isinstance(s, For) and s.annotation(MIN_BLOCKS))
    return max((s.annotation(MIN_BLOCKS) for s in loops), default=None)


def dynamic_shared(func: PrimFunc) -> bool:
    """Whether the kernel asks for its shared arrays in dynamic shared memory (DYNAMIC)."""
    return bool(collect(func.body, lambda s: isinstance(s, For) and s.annotation(DYNAMIC)))


def threads_per_block(dims: dict[str, int]) -> int:
    return functools.reduce(operator.mul, (n for tag, n in dims.items() if tag not in BLOCK_TAGS), 1)

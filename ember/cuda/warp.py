"""Cross-thread reductions through warp shuffles: which loops reduce a shared array of partials
in every thread of the block, so that each warp can share the work instead.

A reduction across a block's threads (`rfactor`, ember.cuda.schedules.row_block) leaves each
thread's partial in a shared array, then every thread of the block folds all of them into its
own register: a loop `for r in range(E): acc[c] = op(acc[c], rf[f(r)])` at block scope.
Run as written, that is E shared loads and a chain of E dependent operations in every thread.
The same total comes from each of a warp's 32 lanes folding every 32nd partial (E/32 loads),
then the lanes combining theirs in five `__shfl_xor_sync` steps, after which every lane holds
the total (a butterfly). This applies to a sum, max or min of a 4- or 8-byte scalar type, where
E is a multiple of 32 and every thread of the block reaches the loop (threadIdx.x a multiple
of 32, so that each warp is 32 consecutive threadIdx.x of one threadIdx.y and z; outside any
branch): the shuffles need the whole warp. The operands
are those of the loop; only their association differs, as it does in every parallel reduction
(a float sum may differ from the serial one in its last bits). The interpreter runs the loop
as written.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..target import WARP
from ..tir.arith import Analyzer
from ..tir.expr import Binary, BufferLoad, as_int
from ..tir.expr_functor import uses_var
from ..tir.stmt import BufferStore, For

OPS = ("+", "max", "min")
TYPES = ("float32", "float64", "int32", "int64")


@dataclass(frozen=True)
class WarpReduction:
    """`acc[index] = op(acc[index], partials[...r...])` over r in [0, extent)."""

    loop: For
    store: BufferStore
    op: str
    partial: BufferLoad  # the load of a partial, at an index of the loop's variable

    @property
    def extent(self) -> int:
        return as_int(self.loop.extent)


def warp_reduction(loop: For, threads: dict[str, int]) -> WarpReduction | None:
    """The reduction of `loop` through shuffles (see the module doc), or None where it stays a
    loop. `threads`: the block's extent along each threadIdx (the caller knows the loop is at
    block scope, outside any branch)."""
    store, r = loop.body, loop.loop_var
    x = threads.get("threadIdx.x", 1)
    if (loop.kind not in ("serial", "unrolled") or as_int(loop.min) != 0 or as_int(loop.extent) is None
            or as_int(loop.extent) % WARP or x % WARP
            or not isinstance(store, BufferStore) or len(store.indices) != 1 or store.buffer.dtype not in TYPES
            or uses_var(store.indices[0], [r])):
        return None
    value = store.value
    if not isinstance(value, Binary) or value.op not in OPS:
        return None
    ana = Analyzer()
    for acc, partial in ((value.a, value.b), (value.b, value.a)):
        if (isinstance(acc, BufferLoad) and acc.buffer is store.buffer and len(acc.indices) == 1
                and ana.can_prove_equal(acc.indices[0], store.indices[0])
                and isinstance(partial, BufferLoad) and partial.buffer is not store.buffer):
            return WarpReduction(loop, store, value.op, partial)
    return None

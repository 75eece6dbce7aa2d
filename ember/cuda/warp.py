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
as written; the CUDA renderer writes the shuffles (`WarpRendering`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..target import WARP
from ..tir.arith import Analyzer
from ..tir.expr import Binary, BufferLoad, Var, as_int, binary
from ..tir.expr_functor import substitute, uses_var
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


class WarpRendering:
    """The CUDA renderer's warp reductions (a part of ember.cuda.codegen.CUDARenderer)."""

    def _warp_for(self, red: WarpReduction, depth: int, out: list[str]) -> None:
        """A block-scope fold of partials as a strided fold per lane and a butterfly of shuffles."""
        pad, r, store = "  " * depth, red.loop.loop_var, red.store
        lane = Var("lane", r.dtype)
        total, other = Var(f"{store.buffer.name}_warp", store.buffer.dtype), Var("other", store.buffer.dtype)
        scalar = self.SCALAR_TYPES[store.buffer.dtype]
        out.append(f"{pad}{{")
        out.append(f"{pad}  const {self._index_type(lane)} {self._name(lane)} = threadIdx.x % {WARP};")
        self._vars.update((lane, r, total, other))
        self._nonnegative_vars.update((lane, r))
        out.append(f"{pad}  {scalar} {self._name(total)} = {self._e(substitute(red.partial, {r: lane}))};")
        rv = self._name(r)
        out.append(f"{pad}  for ({self._index_type(r)} {rv} = {WARP}; {rv} < {red.extent}; {rv} += {WARP}) {{")
        step = binary(red.op, total, substitute(red.partial, {r: binary("+", r, lane)}))
        out.append(f"{pad}    {self._name(total)} = {self._e(step)};")
        out.append(f"{pad}  }}")
        offset = WARP // 2
        while offset:
            out.append(f"{pad}  {{")
            out.append(f"{pad}    const {scalar} {self._name(other)} = "
                       f"__shfl_xor_sync(0xffffffffu, {self._name(total)}, {offset});")
            out.append(f"{pad}    {self._name(total)} = {self._e(binary(red.op, total, other))};")
            out.append(f"{pad}  }}")
            offset //= 2
        acc = next(x for x in (store.value.a, store.value.b) if x is not red.partial)
        folded = binary(red.op, acc, total) if acc is store.value.a else binary(red.op, total, acc)
        out.append(f"{pad}  {self._store(store.buffer, store.indices[0], folded)};")
        self._vars.difference_update((lane, r, total, other))
        self._nonnegative_vars.difference_update((lane, r))
        out.append(f"{pad}}}")

"""Apply storage_align requests (ember.tir.schedule.storage_align): each scratch buffer named in
the function's "storage_align" attribute gets its row stride padded, by reallocating it with a
longer last dimension. Loads and stores keep their indices (flatten then walks the longer rows);
a tensorized call on it is moved onto the padded buffer with its walked strides recomputed
(ember.tir.intrin_regions.rebased). Runs after lower_blocks, when every scratch buffer is an
Allocate of its final shape."""

from __future__ import annotations

from ..arith import Analyzer
from ..expr import Buffer, BufferLoad, as_int, const
from ..functor import collect, mutate_stmt
from ..intrin_regions import is_tensorized, rebased
from ..schedule.storage_align import ATTR
from ..stmt import Allocate, BufferStore, CallRoutine, For, PrimFunc


def padded(row: int, factor: int, offset: int) -> int:
    """The least stride >= row that is `offset` modulo `factor`."""
    return row + (offset - row) % factor


def storage_align(func: PrimFunc) -> PrimFunc:
    requests = {name: (factor, offset) for name, factor, offset in dict(func.attrs).get(ATTR, ())}
    if not requests:
        return func
    ana = Analyzer()
    for f in collect(func.body, lambda x: isinstance(x, For)):  # a call's address splits back into indices
        ana.bind_range(f.loop_var, f.min, f.extent)

    def on_stmt(s):
        if not (isinstance(s, Allocate) and s.buffer.name in requests):
            return None
        old = s.buffer
        *outer, row = old.shape
        if as_int(row) is None:
            return None  # (compact_buffers gives scratch constant shapes; a symbolic one stays as it is)
        new = Buffer(old.name, (*outer, const(padded(as_int(row), *requests[old.name]))), old.dtype, old.scope)
        return Allocate(new, _moved(s.body, old, new, ana))

    return func.with_body(mutate_stmt(func.body, f_stmt=on_stmt))  # (a request on a buffer inlined since: none)


def _moved(body, old: Buffer, new: Buffer, ana: Analyzer):
    def on_expr(e):
        return BufferLoad(new, e.indices, e.dtype) if isinstance(e, BufferLoad) and e.buffer is old else None

    def on_stmt(s):
        if isinstance(s, BufferStore) and s.buffer is old:
            return BufferStore(new, s.value, s.indices)
        if isinstance(s, CallRoutine) and is_tensorized(s) and any(p.buffer is old for p in s.reads + s.writes):
            return rebased(s, old, new, [const(0)] * old.ndim, ana)
        return None

    return mutate_stmt(body, f_stmt=on_stmt, f_expr=on_expr)

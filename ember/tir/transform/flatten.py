"""Flatten multi-dimensional buffer accesses to one row-major element offset."""

from __future__ import annotations

from ..expr import BufferLoad, const
from ..functor import mutate_stmt
from ..stmt import BufferStore, PrimFunc


def flat_index(buffer, indices):
    if len(indices) == 1:
        return indices[0]
    off = const(0)
    for ext, i in zip(buffer.shape, indices):
        off = off * ext + i
    return off


def flatten(func: PrimFunc) -> PrimFunc:
    def on_expr(e):
        if isinstance(e, BufferLoad) and len(e.indices) != 1:
            return BufferLoad(e.buffer, (flat_index(e.buffer, e.indices),), e.dtype)
        return None

    def on_stmt(s):
        if isinstance(s, BufferStore) and len(s.indices) != 1:
            return BufferStore(s.buffer, s.value, (flat_index(s.buffer, s.indices),))
        return None

    return func.with_body(mutate_stmt(func.body, f_stmt=on_stmt, f_expr=on_expr))

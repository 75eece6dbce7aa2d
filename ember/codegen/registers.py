"""Register promotion of small local buffers.

An accumulator tile (cache_write "local" under an unrolled, vectorized register tile) is
accessed only at constant offsets once unrolling has run: whole vectors at multiples of their
width, or single elements. Such a buffer is rendered as separate vector variables instead of an
array, so the C compiler keeps it in registers; an array accessed through vector pointer casts
would live in memory. Anything else (a variable offset, a gather, mixed widths) keeps the array.
"""

from __future__ import annotations

from ..tir import dtype as dt
from ..tir.expr import Buffer, BufferLoad, Ramp, as_int
from ..tir.functor import stmt_exprs, visit_expr, visit_stmt
from ..tir.stmt import BufferStore, Stmt

MAX_REGISTERS = 32  # vector variables; more would spill anyway


def register_lanes(buf: Buffer, body: Stmt) -> int | None:
    """The vector width to promote `buf` with, or None if it must stay an array."""
    if buf.scope != "local":
        return None
    dims = [as_int(d) for d in buf.shape]
    if None in dims:
        return None
    count = 1
    for d in dims:
        count *= d
    indices = []

    def on_expr(e):
        if isinstance(e, BufferLoad) and e.buffer is buf:
            indices.append(e.indices[0])

    def on_stmt(s):
        if isinstance(s, BufferStore) and s.buffer is buf:
            indices.append(s.indices[0])
        for e in stmt_exprs(s):
            visit_expr(e, on_expr)

    visit_stmt(body, on_stmt)
    lanes = {dt.lanes_of(i.dtype) for i in indices if dt.lanes_of(i.dtype) > 1}
    if len(lanes) != 1:
        return None
    (width,) = lanes
    if count % width or count // width > MAX_REGISTERS:
        return None
    for i in indices:
        if isinstance(i, Ramp):
            base = as_int(i.base)
            if base is None or as_int(i.stride) != 1 or base % width or i.lanes != width:
                return None
        elif as_int(i) is None:
            return None
    return width

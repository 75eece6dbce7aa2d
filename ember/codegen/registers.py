"""Register promotion of small local buffers.

An accumulator tile (cache_write "local" under an unrolled, vectorized register tile) is
accessed only at constant offsets once unrolling has run: whole vectors at multiples of their
width, or single elements. Such a buffer is rendered as separate vector variables instead of an
array, so the C compiler keeps it in registers; an array accessed through vector pointer casts
would live in memory. A load may also take lanes of several registers (a ramp of constants of
any stride: a fused conv epilogue reads its tile of channel vectors along the output columns,
to write them with vector stores; code generation transposes the tile in registers). Anything
else (a variable offset, a strided store, stores of mixed widths) keeps the array.
"""

from __future__ import annotations

from ..tir import dtype as dt
from ..tir.expr import Buffer, BufferLoad, PrimExpr, Ramp, as_int
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
    loads, stores = [], []

    def on_expr(e):
        if isinstance(e, BufferLoad) and e.buffer is buf:
            loads.append(e.indices[0])

    def on_stmt(s):
        if isinstance(s, BufferStore) and s.buffer is buf:
            stores.append(s.indices[0])
        for e in stmt_exprs(s):
            visit_expr(e, on_expr)

    visit_stmt(body, on_stmt)
    # the width: that of the unit-stride vectors stored (else loaded); other loads may gather
    lanes = {dt.lanes_of(i.dtype) for i in stores if _unit_stride(i)} \
        or {dt.lanes_of(i.dtype) for i in loads if _unit_stride(i)}
    if len(lanes) != 1:
        return None
    (width,) = lanes
    if count % width or count // width > MAX_REGISTERS:
        return None
    if not all(whole_register(i, width) or as_int(i) is not None for i in stores):
        return None
    if not all(whole_register(i, width) or register_gather(i, count) is not None or as_int(i) is not None
               for i in loads):
        return None
    return width


def register_gather(index: PrimExpr, count: int | None = None) -> list[int] | None:
    """The constant element offsets (each below `count`, when given) that a vector index reads
    lane by lane, or None if it is not a ramp of constants."""
    if not isinstance(index, Ramp):
        return None
    base, stride = as_int(index.base), as_int(index.stride)
    if base is None or stride is None:
        return None
    offsets = [base + k * stride for k in range(index.lanes)]
    return offsets if count is None or all(0 <= o < count for o in offsets) else None


def _unit_stride(index: PrimExpr) -> bool:
    return isinstance(index, Ramp) and as_int(index.stride) == 1


def whole_register(index: PrimExpr, width: int) -> bool:
    """Whether the index is one whole register of `width` lanes."""
    if not isinstance(index, Ramp):
        return False
    base = as_int(index.base)
    return base is not None and as_int(index.stride) == 1 and base % width == 0 and index.lanes == width

"""Swizzled shared tiles: every shared buffer that a swizzling Tensor Core call reads
(ember.intrinsics.mma: ldmatrix swizzles each lane's row address) is laid out the same way, so that
the copies into it put each 16-byte chunk where those calls look for it.

The layout is mma_lanes.swizzle on the byte offset in the buffer, with the row length the call
passes (its row stride, a constant power of two bytes): a chunk's index XORed with its row's (its
128-byte line's, for rows shorter than 128 bytes), a permutation of the chunks within each group of
8, conflict-free for ldmatrix without padding. Keyed by the offset, not by the address in shared
memory, which depends on where the block's shared data starts (mma_lanes' module doc): so each
call is told where its pointers lie in their buffers, their offsets passed after the call's row
strides (`_told`), from which its lanes find the buffer's start. The pass rewrites the index of
each store into such a buffer (a scalar element, or a vector of 16 bytes starting on a multiple of
its lanes, a Ramp or a vectorized loop's lanes: a 16-byte copy, cp.async, moves as one chunk, its
lanes still consecutive for ember.cuda.vectors) and records its alignment (mma_lanes.ALIGNMENT,
ALIGN: the renderer's `__align__`). It runs after the pipeline (ember.cuda.pipeline), on flat
indices: the stages are parts of one buffer, laid out as one. A buffer such a call reads that is
read any other way, read with two row lengths, or stored into in another shape is a LowerError.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import LowerError
from ..intrinsics import mma, mma_lanes
from ..tir import dtype as dt
from ..tir.arith import Analyzer
from ..tir.expr import Buffer, BufferLoad, PrimExpr, Ramp, as_int, binary, const
from ..tir.expr_functor import substitute, uses_var
from ..tir.functor import collect, mutate_stmt, stmt_exprs, visit_expr
from ..tir.stmt import BufferStore, CallRoutine, For, PrimFunc

ALIGN = "shared_alignment"  # func attribute: ((buffer name, bytes), ...)


def swizzle_tiles(func: PrimFunc) -> PrimFunc:
    """func with the shared tiles of its swizzling calls laid out swizzled (the module doc)."""
    rows = _row_bytes(func)
    if not rows:
        return func
    ana = Analyzer()
    for f in collect(func.body, lambda x: isinstance(x, For)):
        ana.bind_range(f.loop_var, f.min, f.extent)
    for s in collect(func.body, lambda x: not isinstance(x, CallRoutine)):
        for e in stmt_exprs(s):
            visit_expr(e, lambda x: _refuse_load(x, rows))

    lanes_of = {f.loop_var: as_int(f.extent)
                for f in collect(func.body, lambda x: isinstance(x, For) and x.kind == "vectorized")}

    def on_stmt(s):
        if isinstance(s, BufferStore) and s.buffer in rows:
            return replace(s, indices=(_swizzled(s, rows[s.buffer], ana, lanes_of),))
        if isinstance(s, CallRoutine) and _swizzling(s):
            return _told(s, rows, ana)
        return None

    body = mutate_stmt(func.body, f_stmt=on_stmt)
    align = tuple((b.name, mma_lanes.ALIGNMENT) for b in rows)
    return replace(func.with_body(body), attrs=(*func.attrs, (ALIGN, align)))


def _row_bytes(func: PrimFunc) -> dict[Buffer, int]:
    """{shared buffer: its rows' bytes} of the tiles swizzling calls read."""
    rows: dict[Buffer, int] = {}
    for call in collect(func.body, lambda x: isinstance(x, CallRoutine) and _swizzling(x)):
        name = dict(call.params)["intrin"]
        for p, stride in zip(call.reads, call.scalars):
            n = as_int(stride)
            if p.buffer.scope != "shared" or n is None:
                raise LowerError(f"{name} reads swizzled tiles of shared memory at a constant row stride; "
                                 f"{p.buffer.name} is {p.buffer.scope}, its stride {stride}")
            n *= dt.bits(p.buffer.dtype) // 8
            mma_lanes.row_shift(n)  # (a row of a power of two bytes)
            if rows.setdefault(p.buffer, n) != n:
                raise LowerError(f"{p.buffer.name} is read as swizzled tiles of rows of {rows[p.buffer]} and of "
                                 f"{n} bytes")
    return rows


def _swizzling(call: CallRoutine) -> bool:
    """Whether call reads swizzled tiles: a swizzling intrinsic's, other than its reset (which reads nothing)."""
    params = dict(call.params)
    return mma.is_swizzled(params.get("intrin", "")) and params.get("role") != "reset"


def _told(call: CallRoutine, rows: dict[Buffer, int], ana: Analyzer) -> CallRoutine:
    """call passed the element offsets of the pointers it reads in their buffers, after its C
    scalars (the row strides; ember.tir.tensor_intrin: the scalars that follow are the interpreter's).
    An offset is passed modulo the swizzle's period (8 rows, or 128-byte lines: mma_lanes.row_shift),
    where that simplifies: the lanes' addresses are the same (moving a pointer and its offset by
    whole periods moves every lane's by as much), and a stage's or a warp's start (`k % S * tile`)
    drops out of the lanes' arithmetic, which is then the same at every step of a loop."""
    n = dict(call.params)["c_scalars"]
    offsets = tuple(_in_period(p.offset, (8 << mma_lanes.row_shift(rows[p.buffer])) // (dt.bits(p.buffer.dtype) // 8),
                               ana) for p in call.reads)
    params = tuple((k, n + len(offsets) if k == "c_scalars" else v) for k, v in call.params)
    return replace(call, params=params, scalars=(*call.scalars[:n], *offsets, *call.scalars[n:]))


def _in_period(offset: PrimExpr, period: int, ana: Analyzer) -> PrimExpr:
    """offset % period where the analyzer folds the `%` into it (drops its terms of whole periods:
    no more divisions than offset had), else offset."""
    reduced = ana.simplify(binary("%", offset, const(period, offset.dtype)))
    return reduced if _divisions(reduced) <= _divisions(offset) else offset


def _divisions(e: PrimExpr) -> int:
    found: list = []
    visit_expr(e, lambda x: found.append(x) if getattr(x, "op", None) in ("%", "//") else None)
    return len(found)


def _refuse_load(e, rows: dict[Buffer, int]) -> None:
    if isinstance(e, BufferLoad) and e.buffer in rows:
        raise LowerError(f"{e.buffer.name} is laid out swizzled for Tensor Core calls, which alone may read it")


def _swizzled(store: BufferStore, row_bytes: int, ana: Analyzer, lanes_of: dict) -> PrimExpr:
    """The store's flat index swizzled: the element's, or a vector's first within its chunk (a
    Ramp, or the index base + v of the lane v of a vectorized loop: `lanes_of` {v: its extent})."""
    (index,) = store.indices
    size = dt.bits(store.buffer.dtype) // 8
    if isinstance(index, Ramp) and as_int(index.stride) == 1:
        base, lanes, lane = index.base, index.lanes, None
    else:
        lane = next((v for v in lanes_of if uses_var(index, [v])), None)
        if lane is None:
            return _xor(index, row_bytes, size)
        base, lanes = ana.simplify(substitute(index, {lane: const(0, lane.dtype)})), lanes_of[lane]
    whole = ana.can_prove(binary("==", binary("%", base, const(lanes, base.dtype)), const(0, base.dtype)))
    if (lanes * size != 16 or not whole or isinstance(index, Ramp) and lane is not None
            or lane is not None and not ana.can_prove_equal(index, binary("+", base, lane))):
        raise LowerError(f"a store into the swizzled tile {store.buffer.name} moves one element or one aligned "
                         f"vector of 16 bytes, not {lanes} lanes at {index}")
    if lane is None:
        return Ramp(_xor(base, row_bytes, size, chunk=True), index.stride, lanes, index.dtype)
    return binary("+", _xor(base, row_bytes, size, chunk=True), lane)


def _xor(e: PrimExpr, row_bytes: int, size: int, chunk: bool = False) -> PrimExpr:
    """e ^ (((e * size >> s) & 7) << 4) / size, in elements (e >= 0: floor division is the shift);
    `chunk`: e the first element of a 16-byte chunk, swizzled as the chunk's index (so that the
    result reads as a multiple of the chunk: ember.cuda.vectors' alignment)."""
    c = lambda v: const(v, e.dtype)  # noqa: E731
    line, lanes = (1 << mma_lanes.row_shift(row_bytes)) // size, 16 // size  # elements per row (line), per chunk
    key = binary("%", binary("//", e, c(line)), c(8))
    if chunk:
        return binary("*", binary("^", binary("//", e, c(lanes)), key), c(lanes))
    return binary("^", e, binary("*", key, c(lanes)))

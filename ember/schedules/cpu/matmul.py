"""CPU schedules of matmul and gemm (ember.ops.matmul): an mr x nr register tile of the output
(nr the panel width when b comes in panels: the tile then reads one contiguous panel), a GEMV's
tiles one panel wide, or over b's rows as they are in wide blocks (at least GEMV_TILES tiles of
columns, for the threads to share), and few-row products with b transposed as vectors of
partial dot products along k."""

from __future__ import annotations

from ...ops.hints import lanes_dividing
from ...ops.matmul import ANCHOR, GEMV_COLS, GEMV_MIN_COLS, GEMV_TILES
from ...tir.expr import as_int
from . import schedules
from .tiling import find_anchor, prepare, register_tile, tile_rows_cols


@schedules("matmul", "gemm")
def schedule_matmul(s, outputs, target):
    anchor = find_anchor(outputs, ANCHOR)
    if anchor is None or len(outputs) != 1 or outputs[0].ndim != len(anchor.axis) or not anchor.attrs["cols"]:
        return False
    out = outputs[0]
    rows = anchor.attrs["rows"]
    m = as_int(anchor.output(0).shape[-2]) if rows else 1
    n = as_int(anchor.output(0).shape[-1])
    if anchor.attrs["dot_lanes"]:
        prepare(s, outputs, anchor, target.lanes())
        mr = 1 if m == 1 else 2 if m < 8 else 4
        _tile_dot(s, out, anchor, mr, 8 if mr < 4 else 4, anchor.attrs["dot_lanes"])
        return None
    row_axis = out.ndim - 2 if rows else None
    if m == 1 and n is not None:  # a GEMV: b streamed, in panels one tile wide or in wide rows (accumulators in L1)
        # else the widest tile that leaves at least GEMV_TILES tiles to share among the threads
        widths = (GEMV_COLS, 256, 128, 64, 32, 16, 8)
        nr = anchor.attrs["panels"] or \
            next((w for w in widths if n % w == 0 and (n // w >= GEMV_TILES or w == GEMV_MIN_COLS)),
                 next((w for w in widths if n % w == 0), min(GEMV_COLS, -(-n // 8) * 8)))  # else guarded
        prepare(s, outputs, anchor, target.lanes())
        tile_rows_cols(s, out, anchor, row_axis, out.ndim - 1, 1, nr, block=min(nr, 64))
        return None
    lanes = target.lanes()
    if lanes_dividing(n, (2 * lanes, lanes, lanes // 2)) is None:
        return False
    prepare(s, outputs, anchor, target.lanes())
    panels = anchor.attrs.get("panels")
    mr, nr = register_tile(m, panels or n, lanes)  # a tile of b in panels: one panel wide
    row_block = row_block_of(m, mr, as_int(anchor.reduce_axis[0].dom.extent), target.caches[1]) if panels else None
    packed = next((t.buffer.name for t in anchor.input_tensors if panels and t.ndim == 3), None)
    tile_rows_cols(s, out, anchor, row_axis, out.ndim - 1, mr, nr, row_block=row_block, prefetch=packed)
    return None


def _tile_dot(s, out, anchor, mr: int, nr: int, lanes: int) -> None:
    """out[i, j] = sum_k a[i, k] * b[j, k] for a few rows: an mr x nr tile of vectors of partial
    sums along k (rfactor: lane l sums k = l, l + lanes, ...), added up lane by lane at the end."""
    acc = anchor.output(0)
    _, ki = s[acc].split(s[acc].op.reduce_axis[0], factor=lanes)
    rf = s.rfactor(acc, ki, factor_axis=len(anchor.axis))
    partial = s.cache_write(rf, "local")
    s[rf].compute_inline()
    if out.op is not anchor:
        acc = s.cache_write(acc, "local")
        s[anchor.output(0)].compute_inline()
    i, j = s[out].op.axis
    io, jo, _, _ = s[out].tile(i, j, mr, nr)
    tile = s[out].fuse(io, jo)
    s[out].parallel(tile)
    if out.op is not anchor:
        s[acc].compute_at(s[out], tile)
    s[partial].compute_at(s[out], tile)
    stage = s[partial]
    spatial = list(stage.op.axis)
    stage.reorder(*stage.op.reduce_axis, *spatial)
    for a in spatial[:-1]:
        stage.unroll(a)
    stage.vectorize(spatial[-1])


def row_block_of(m: int | None, mr: int, k: int | None, l2: int) -> int | None:
    """The rows of a block of a whose k columns fit the target's L2 of `l2` bytes (with the panel
    of b it meets beside it, the block at least half of it stays), when fewer than m: a 128 x 3072
    a (1.5 MiB) next to a 3072 x 32 panel (384 KiB) overflows a 1 MiB L2, and was read again from
    L3 for every panel (the down-projection at 60% of the speed of K = 768; Zen 4). The blocks are
    of even size (as many as blocks of that size would make, each of whole tiles of mr rows), since
    each block streams every panel of b once: 257 rows in blocks of 256 and 1 streamed b's 7 MiB
    again for the one row (ViT's QKV product at 257 tokens 16% slower than at 256, one thread, AMD
    EPYC Zen 5), in blocks of 136 and 121 as fast."""
    if m is None or k is None:
        return None
    rows = mr
    while 2 * rows * k * 4 <= l2:
        rows *= 2
    if rows >= m:
        return None
    tiles = -(-m // mr)
    blocks = -(-tiles // (rows // mr))
    return -(-tiles // blocks) * mr

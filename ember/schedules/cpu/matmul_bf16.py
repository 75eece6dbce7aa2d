"""CPU schedule of gemm_bf16 (ember.ops.matmul_bf16): the tile product on the best bf16 unit the
target's flags enable, chosen at compile time: AMX (`tdpbf16ps`, tiles of 16 or 32 rows) ahead of
AVX512-BF16 (`vdpbf16ps`, register tiles of up to 8 rows), each where its tiles cover the shape;
elsewhere (no unit, the interpreter, a shape no tile covers) the same bf16 products summed in fp32
on fp32 vectors. The rows of a in bf16 and the result (with its fused epilogue) are parallel,
vectorized loops of their own."""

from __future__ import annotations

from ...intrinsics import amx, avx512
from ...intrinsics.tiles import LANES
from ...intrinsics.tiles import schedule as tile_schedule
from ...ops.matmul_bf16 import ANCHOR, CAST, GROUP
from ...tir.expr import as_int
from ..rules import inline_intermediates
from . import schedules
from .default import parallel_vectorize
from .tiling import find_anchor

UNITS = (amx.BF16, avx512.BF16)  # the first the target has and whose tiles fit


def unit_for(target, m: int | None, n: int, k: int):
    """(unit, (MR, NV)) for an m x n x k product on `target`, or None."""
    if m is None:
        return None
    return next(((u, fit) for u in UNITS if u.feature in target.features and (fit := u.fits(m, n, k))), None)


@schedules("gemm_bf16")
def schedule_bf16_product(s, outputs, target):
    anchor = find_anchor(outputs, ANCHOR)
    cast = find_anchor(outputs, CAST)
    if anchor is None or cast is None or len(outputs) != 1:
        return False
    acc = anchor.output(0)
    inline_intermediates(s.sch, where=lambda block: block.name != cast.name)
    lanes = target.lanes()
    parallel_vectorize(s, cast.output(0), lanes)
    m, blocks, _ = (as_int(d) for d in acc.shape)
    k = as_int(cast.output(0).shape[1]) * GROUP
    chosen = unit_for(target, m, blocks * LANES, k)
    if chosen is not None:
        tile_schedule(s, acc, chosen[0], *chosen[1])
    else:
        _fp32_vectors(s, acc)
    parallel_vectorize(s, outputs[0], lanes)
    return None


def _fp32_vectors(s, acc) -> None:
    """The product without a unit: each row's 16 columns of a block one vector, summed along k."""
    stage = s[acc]
    i, jo, ji = stage.op.axis
    stage.reorder(i, jo, *stage.op.reduce_axis, ji)
    stage.parallel(stage.fuse(i, jo))
    stage.vectorize(ji)

"""The CPU schedule of qgemm (ember.ops.quantized): a register tile of `rows` x `vectors` panels
of 16 int32 accumulators, the reduction over K-groups of 4 outside it, and the epilogue
(requantization and whatever elementwise work fused after it) vectorized over the tile's columns
as it leaves the registers.

Where the target has AVX512-VNNI (`avx512vnni` among its features) the tile's inner product is
tensorized onto `vpdpbusd` (ember.intrinsics.vnni: one instruction per panel and K-group, the
accumulators loaded once per tile since their reset is a block of its own); elsewhere it is
portable C, the 4 products of a group unrolled and the 16 lanes of a panel vectorized, which
the compiler turns into the vector unit's own widening multiply-adds.
"""

from __future__ import annotations

from ...intrinsics import vnni
from ...ops.quantized import ANCHOR, LANES
from ...tir.expr import as_int
from . import schedules
from .tiling import find_anchor, prepare

FEATURE = "avx512vnni"  # the compiler's name of the feature (ember.target.FEATURES)


def tile(m: int, n: int) -> tuple[int, int]:
    """(rows, panels) of the register tile: 4 x 4 panels of 16 accumulators (16 of the 32 vector
    registers), fewer where they do not divide the product."""
    panels = next(p for p in (4, 2, 1) if (n // LANES) % p == 0)
    return next(r for r in (4, 2, 1) if m % r == 0), panels


@schedules("qgemm")
def schedule_qgemm(s, outputs, target):
    anchor = find_anchor(outputs, ANCHOR)
    if anchor is None or len(outputs) != 1 or outputs[0].ndim != 2:
        return False
    out = outputs[0]
    m, n = (as_int(d) for d in out.shape)
    if m is None or n is None or n != as_int(anchor.output(0).shape[1]) * LANES:
        return False
    rows, panels = tile(m, n)
    prepare(s, outputs, anchor, target.lanes())
    acc = s.cache_write(anchor.output(0), "local")
    s[anchor.output(0)].compute_inline()
    stage = s[out]
    i, j = stage.op.axis
    io, jo, ii, ji = stage.tile(i, j, rows, panels * LANES)
    fused = stage.fuse(io, jo)
    stage.parallel(fused)
    stage.unroll(ii)
    stage.vectorize(ji)
    s[acc].compute_at(stage, fused)
    inner = s[acc]
    ai, ap, al = inner.op.axis
    ko, ki = inner.op.reduce_axis
    if FEATURE in target.features:
        inner.reorder(ko, ai, ap, al, ki)
        inner.unroll(ai)
        inner.unroll(ap)
        inner.decompose_reduction(ko)
        inner.tensorize(al, vnni.INTRIN)
    else:
        inner.reorder(ko, ai, ap, ki, al)
        inner.unroll(ai)
        inner.unroll(ap)
        inner.unroll(ki)
        inner.vectorize(al)
    return None

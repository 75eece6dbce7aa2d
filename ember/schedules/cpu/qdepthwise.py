"""The CPU schedule of qdepthwise (ember.ops.qdepthwise): a register tile of output rows x panels
of 16 channels of int32 sums (the tile of qgemm's schedule, `quantized.tile`), the taps outside
it, each a widening multiply-add of 16 uint8 activations by 16 int8 weights per panel; the padded
copy of the input a stage of its own, before; the epilogue (the scale and whatever fused after it:
ReLU6, the next product's quantization) vectorized over the tile's channels as it leaves the
registers."""

from __future__ import annotations

from ...ops.qdepthwise import ANCHOR
from ...ops.quantized import LANES
from ...tir.expr import as_int
from . import schedules
from .quantized import tile
from .tiling import find_anchor, prepare


@schedules("qdepthwise")
def schedule_qdepthwise(s, outputs, target):
    anchor = find_anchor(outputs, ANCHOR)
    if anchor is None or len(outputs) != 1 or outputs[0].ndim != 2:
        return False
    out = outputs[0]
    m, c = (as_int(d) for d in out.shape)
    if m is None or c is None or c % LANES:
        return False
    rows, panels = tile(m, c)
    prepare(s, outputs, anchor, target.lanes())
    acc = s.cache_write(anchor.output(0), "local")
    s[anchor.output(0)].compute_inline()
    stage = s[out]
    i, j = stage.op.axis
    io, jo, ii, ji = stage.tile(i, j, rows, panels * LANES)
    fused = stage.fuse(io, jo)
    stage.parallel(fused)
    stage.unroll(ii)
    panel, lanes = stage.split(ji, factor=LANES)
    stage.unroll(panel)
    stage.vectorize(lanes)
    s[acc].compute_at(stage, fused)
    inner = s[acc]
    ai, aj = inner.op.axis
    kh, kw = inner.op.reduce_axis
    ap, al = inner.split(aj, factor=LANES)
    inner.reorder(kh, kw, ai, ap, al)
    inner.unroll(ai)
    inner.unroll(ap)
    inner.vectorize(al)
    return None

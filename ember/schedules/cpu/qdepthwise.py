"""The CPU schedule of qdepthwise (ember.ops.qdepthwise): a register tile of output columns of one
output row x panels of 16 channels of int32 sums (qgemm's tile, up to 7 x 4), the taps
outside it, each a multiply-add of 16 activations widened as they load by 16 widened weights
per panel; the padded input per tile, a local array of the bytes of the rows and columns the tile
reads (a tile within one output row, so that its window is a box); the epilogue (the scale and whatever
fused after it: ReLU6, the next product's quantization) vectorized over the tile's channels as it
leaves the registers."""

from __future__ import annotations

from ...ops.qdepthwise import ANCHOR, PADDED
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
    ow = anchor.attrs["ow"]
    cols, panels = tile(ow, c)  # (qgemm's tile over the columns of one output row)
    pad = next(t.op for t in anchor.input_tensors if t.op.name == PADDED)
    prepare(s, outputs, anchor, target.lanes(), keep=(pad,))
    window = s.cache_read(pad.output(0), "local", [anchor.output(0)])
    s[pad.output(0)].compute_inline()
    acc = s.cache_write(anchor.output(0), "local")
    s[anchor.output(0)].compute_inline()
    stage = s[out]
    i, j = stage.op.axis
    line, col = stage.split(i, factor=ow)
    co, ii = stage.split(col, factor=cols)
    jo, ji = stage.split(j, factor=panels * LANES)
    stage.reorder(line, co, jo, ii, ji)
    fused = stage.fuse(line, co, jo)
    stage.parallel(fused)
    stage.unroll(ii)
    panel, lanes = stage.split(ji, factor=LANES)
    stage.unroll(panel)
    stage.vectorize(lanes)
    s[acc].compute_at(stage, fused)
    s[window].compute_at(stage, fused)
    s[window].vectorize(s[window].op.axis[-1])
    inner = s[acc]
    ai, aj = inner.op.axis
    kh, kw = inner.op.reduce_axis
    ap, al = inner.split(aj, factor=LANES)
    inner.reorder(kh, kw, ai, ap, al)
    inner.unroll(ai)
    inner.unroll(ap)
    inner.vectorize(al)
    return None

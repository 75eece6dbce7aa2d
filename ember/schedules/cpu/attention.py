"""CPU schedule of scaled_dot_product_attention (ember.ops.attention)."""

from __future__ import annotations

from ...ops.attention import SDPA
from ...ops.hints import PACK, lanes_dividing
from ...te.tensor import ComputeOp, ExternOp, input_tensors_of
from ...tir.expr import as_int
from . import schedules
from .tiling import register_tile, schedule_pack, tile_rows_cols


@schedules(SDPA)
def schedule_attention(s, outputs, target):
    """The fused kernel (an extern: its loops are its own): nothing. The staged compute: the two
    products (scores = q k^T, weighted = p v) in register tiles where their
    columns fill vectors; the other stages parallel over (batch, query row), vectorized along
    the row."""
    (out,) = outputs
    if isinstance(out.op, ExternOp):
        return
    lanes = target.lanes()
    widths = (2 * lanes, lanes, lanes // 2)
    for op in input_tensors_of(outputs):
        if not isinstance(op, ComputeOp):
            continue
        t = op.output(0)
        if op.tag == PACK:
            schedule_pack(s, t, lanes)
            continue
        cols = as_int(t.shape[-1]) if op.name in ("scores", "weighted") else None
        if cols is not None and lanes_dividing(cols, widths) is not None:
            mr, nr = register_tile(as_int(t.shape[-2]), cols, lanes)
            tile_rows_cols(s, t, op, t.ndim - 2, t.ndim - 1, mr, nr)
            continue
        stage = s[t]
        axes = list(stage.op.axis)
        rows = axes[:out.ndim - 1]
        stage.parallel(stage.fuse(*rows) if len(rows) > 1 else rows[0])
        if len(axes) == len(rows) + 1 and lanes_dividing(as_int(t.shape[-1]), widths) and not op.reduce_axis:
            stage.vectorize(axes[-1])

"""CPU schedules of max and average pooling (ember.ops.pool): a row of output columns in vectors,
the window's reduction inside, when the columns fill vectors; else parallel over the outer loops."""

from __future__ import annotations

from ...ops.hints import lanes_dividing
from ...ops.pool import ANCHOR, RANKS
from ...tir.expr import as_int
from . import schedules
from .tiling import find_anchor, prepare, tile_rows_cols, untiled


@schedules(*(f"{kind}_pool{n}d" for kind in ("max", "avg") for n in RANKS))
def schedule_pool(s, outputs, target):
    anchor = find_anchor(outputs, ANCHOR)
    if anchor is None or len(outputs) != 1 or outputs[0].ndim < 3:
        return False
    vector = target.lanes()
    lanes = lanes_dividing(as_int(outputs[0].shape[-1]), (vector, vector // 2, vector // 4))
    if lanes is None:
        untiled(s, outputs, anchor, vector)
    else:
        prepare(s, outputs, anchor, target.lanes())
        tile_rows_cols(s, outputs[0], anchor, None, outputs[0].ndim - 1, 1, lanes)
    return None

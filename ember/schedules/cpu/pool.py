"""CPU schedules of max and average pooling (ember.ops.pool): a row of output columns in vectors,
the window's reduction inside, when the columns fill vectors; else parallel over the outer loops."""

from __future__ import annotations

from ...ops.hints import VECTOR_LANES, lanes_dividing
from ...ops.pool import ANCHOR, RANKS
from ...tir.expr import as_int
from . import schedules
from .tiling import find_anchor, prepare, tile_rows_cols, untiled


@schedules(*(f"{kind}_pool{n}d" for kind in ("max", "avg") for n in RANKS))
def schedule_pool(s, outputs):
    anchor = find_anchor(outputs, ANCHOR)
    if anchor is None or len(outputs) != 1 or outputs[0].ndim < 3:
        return False
    lanes = lanes_dividing(as_int(outputs[0].shape[-1]), (VECTOR_LANES, VECTOR_LANES // 2, VECTOR_LANES // 4))
    if lanes is None:
        untiled(s, outputs, anchor)
    else:
        prepare(s, outputs, anchor)
        tile_rows_cols(s, outputs[0], anchor, None, outputs[0].ndim - 1, 1, lanes)
    return None

"""CPU schedule of grouped_matmul (ember.ops.moe): a matmul's register tile of rows x columns,
each row reading its own expert's weight along the columns (the rows of a tile mostly share one:
they come sorted by expert); the reduction outside the tile, as schedules/cpu/matmul.py does.
With the weights in panels (w_panels), the tile is one panel wide: it reads its expert's panel as
one contiguous stream."""

from __future__ import annotations

from ...ops.hints import lanes_dividing
from ...ops.moe import ANCHOR
from ...tir.expr import as_int
from . import schedules
from .tiling import find_anchor, prepare, register_tile, tile_rows_cols


@schedules("grouped_matmul")
def schedule_grouped_matmul(s, outputs, target):
    anchor = find_anchor(outputs, ANCHOR)
    lanes = target.lanes()
    if anchor is None or len(outputs) != 1:
        return False
    m, n = (as_int(d) for d in anchor.output(0).shape)
    if lanes_dividing(n, (2 * lanes, lanes, lanes // 2)) is None:
        return False
    prepare(s, outputs, anchor, lanes)
    mr, nr = register_tile(m, anchor.attrs.get("panels") or n, lanes)
    tile_rows_cols(s, outputs[0], anchor, 0, 1, mr, nr)
    return None

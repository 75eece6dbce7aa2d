"""CPU schedule of resize (ember.ops.resize) when it resizes one axis after the other
(antialias): the per-axis stages stay stages (inlined, each tap of one axis would recompute
every tap of the axis before, weights included). A stage summing the taps of an axis other than
the last is tiled as pooling is, a vector of output columns accumulated in registers with the
taps outside; the others parallel and vectorized as the default schedules make them; every
other intermediate is inlined. Other resizes take the default."""

from __future__ import annotations

import contextlib

from ...errors import ScheduleError
from ...ops.hints import lanes_dividing
from ...ops.resize import AXIS_STAGE
from ...te.tensor import ComputeOp, input_tensors_of
from ...tir.expr import as_int
from ..rules import inline_intermediates
from . import schedules
from .default import parallel_vectorize
from .tiling import tile_rows_cols


@schedules("resize")
def schedule_resize(s, outputs, target):
    vector = target.lanes()
    stages = [op for op in input_tensors_of(outputs) if isinstance(op, ComputeOp)]
    kept = [op for op in stages if op.tag == AXIS_STAGE]
    if not kept:
        return False
    inline_intermediates(s.sch, among={op.name for op in stages if op.tag != AXIS_STAGE})
    for op in kept:
        t = op.output(0)
        lanes = lanes_dividing(as_int(t.shape[-1]), (vector, vector // 2, vector // 4))
        if op.name.startswith("resize_axis") and lanes is not None and t.ndim - 1 != _resized_axis(op):
            tile_rows_cols(s, t, op, None, t.ndim - 1, 1, lanes)
            continue
        with contextlib.suppress(ScheduleError):
            parallel_vectorize(s, t, vector)
    for t in outputs:
        with contextlib.suppress(ScheduleError):
            parallel_vectorize(s, t, vector)
    return None


def _resized_axis(op: ComputeOp) -> int:
    """The axis a per-axis stage (resize_axis<k>) resizes: spatial axis k."""
    return int(op.name.rsplit("axis", 1)[1]) + 2

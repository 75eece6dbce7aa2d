"""CPU schedule of resize (ember.ops.resize) when it resizes one axis after the other
(antialias): the per-axis stages stay stages (inlined, each tap of one axis would recompute
every tap of the axis before, weights included), each parallel and vectorized as the default
schedules make them; every other intermediate is inlined. Other resizes take the default."""

from __future__ import annotations

import contextlib

from ...errors import ScheduleError
from ...ops.resize import AXIS_STAGE
from ...te.tensor import ComputeOp, input_tensors_of
from ..rules import inline_intermediates
from . import schedules
from .default import parallel_vectorize


@schedules("resize")
def schedule_resize(s, outputs):
    stages = [op for op in input_tensors_of(outputs) if isinstance(op, ComputeOp)]
    kept = [op for op in stages if op.tag == AXIS_STAGE]
    if not kept:
        return False
    inline_intermediates(s.sch, among={op.name for op in stages if op.tag != AXIS_STAGE})
    for t in [op.output(0) for op in kept] + list(outputs):
        with contextlib.suppress(ScheduleError):
            parallel_vectorize(s, t)
    return None

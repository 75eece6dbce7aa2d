"""CPU schedule of grid_sample (ember.ops.grid_sample): the source-coordinate stages stay stages
(inlined, their large reflection expressions would be copied into every tap), then each stage
parallel and vectorized as the default schedules make them."""

from __future__ import annotations

import contextlib

from ...errors import ScheduleError
from . import schedules
from .default import parallel_vectorize


@schedules("grid_sample")
def schedule_grid_sample(s, outputs, target) -> None:
    for t in outputs:
        with contextlib.suppress(ScheduleError):
            parallel_vectorize(s, t, target.lanes())

"""CPU schedules of operator kernels, kept apart from the operators (ember.ops).

`schedule_for(op)` is the schedule of an operator's kernel, `schedule(s, outputs, target)`: the
one a module of this package declares for it with `@schedules("conv2d", ...)`, else the default
for its pattern kind (`default.default_schedule`; ember.schedules.family). The target
(ember.target) says how wide the vectors are (`target.lanes(dtype)`). The operators of
ember/ops/<family>.py are scheduled in ember/schedules/cpu/<family>.py. Helpers the schedules
share: `default` (parallel and vector loops), `tiling` (register tiles), `rows` (row-by-row
kernels).
"""

from __future__ import annotations

from ..family import Family
from .default import default_schedule

FAMILY = Family(__name__, __path__, default_schedule)
schedules, declared, schedule_for = FAMILY.schedules, FAMILY.declared, FAMILY.schedule_for
computes, compute_for = FAMILY.computes, FAMILY.compute_for

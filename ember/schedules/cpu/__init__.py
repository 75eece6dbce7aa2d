"""CPU schedules of operator kernels, kept apart from the operators (ember.ops).

`schedule_for(op)` is the schedule of an operator's kernel, `schedule(s, outputs, target)`: the
one a module of this package declares for it with `@schedules("conv2d", ...)`, else the default
for its pattern kind (`default.default_schedule`). The target (ember.target) says how wide the
vectors are (`target.lanes(dtype)`). The operators of ember/ops/<family>.py are scheduled in
ember/schedules/cpu/<family>.py. A declared schedule may decline a kernel by returning False
before changing anything (a shape its tile does not fit): the default then runs. Every module
of the package is imported the first time a schedule is asked for, so a new one is found
without being listed anywhere. Helpers the schedules share: `default` (parallel and vector
loops), `tiling` (register tiles), `rows` (row-by-row kernels).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from .default import default_schedule

_SCHEDULES: dict[str, Callable] = {}


def schedules(*ops: str) -> Callable[[Callable], Callable]:
    """Declare `schedule(s, outputs, target)` the CPU schedule of the operators named `ops`."""

    def declare(schedule: Callable) -> Callable:
        for name in ops:
            if name in _SCHEDULES:
                raise ValueError(f"operator {name!r} has two CPU schedules")
            _SCHEDULES[name] = schedule
        return schedule

    return declare


def declared() -> dict[str, Callable]:
    """Every declared schedule by operator name."""
    _load_all()
    return dict(_SCHEDULES)


def schedule_for(op) -> Callable:
    """`schedule(s, outputs, target)` for a kernel of the OpDef `op` (see the module's docstring)."""
    own = declared().get(op.name)

    def schedule(s, outputs, target) -> None:
        if own is None or own(s, outputs, target) is False:
            default_schedule(s, outputs, op.pattern, target)

    return schedule


def _load_all() -> None:
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")

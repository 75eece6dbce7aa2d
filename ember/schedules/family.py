"""A family of schedules (ember.schedules.cpu, ember.schedules.gpu): the schedules its modules
declare per operator with `@schedules("conv2d", ...)`, and the default for a pattern kind.

`schedule_for(op)` is `schedule(s, outputs, target)`: the operator's declared schedule, else the
family's default for the operator's pattern kind; a declared schedule may decline a kernel by
returning False before changing anything (a shape its tile does not fit), and the default then
runs. Every module of the family's package is imported the first time a schedule is asked for,
so a new one is found without being listed anywhere.

A family may also replace an operator's compute for its targets (`@computes("cumsum", ...)`):
where the operator's tensor expression cannot take the shape the machine needs (a scan, which
te cannot write, as a loop over chunks carrying a running total), the family writes the kernel
itself (a te.extern of its loop IR), and `compute_for(op)` gives it in place of `op.compute`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable


class Family:
    def __init__(self, package: str, path: Iterable[str], default_schedule: Callable):
        self.package, self.path, self.default_schedule = package, list(path), default_schedule
        self._schedules: dict[str, Callable] = {}
        self._computes: dict[str, Callable] = {}
        self._imported = False

    def schedules(self, *ops: str) -> Callable[[Callable], Callable]:
        """Declare `schedule(s, outputs, target)` the schedule of the operators named `ops`."""
        return self._declare(self._schedules, "schedules", ops)

    def computes(self, *ops: str) -> Callable[[Callable], Callable]:
        """Declare `compute(inputs, attrs, out_types)` the kernel of the operators named `ops` on this
        family's targets, in place of theirs (see the module doc)."""
        return self._declare(self._computes, "computes", ops)

    def _declare(self, table: dict[str, Callable], what: str, ops: tuple[str, ...]) -> Callable[[Callable], Callable]:
        """A decorator entering its function in `table` under each of `ops`, once each."""

        def declare(fn: Callable) -> Callable:
            for name in ops:
                if name in table:
                    raise ValueError(f"operator {name!r} has two {what} in {self.package}")
                table[name] = fn
            return fn

        return declare

    def declared(self) -> dict[str, Callable]:
        """Every declared schedule by operator name."""
        self._import_all()
        return dict(self._schedules)

    def compute_for(self, op) -> Callable:
        """The compute of a kernel of the OpDef `op` on this family's targets: the family's own, else the
        operator's."""
        self._import_all()
        return self._computes.get(op.name, op.compute)

    def _import_all(self) -> None:
        """Every module of the family's package, imported once (each declares as it is imported)."""
        if self._imported:
            return
        for info in pkgutil.iter_modules(self.path):
            importlib.import_module(f"{self.package}.{info.name}")
        self._imported = True

    def schedule_for(self, op) -> Callable:
        """`schedule(s, outputs, target)` for a kernel of the OpDef `op` (see the module doc)."""
        own = self.declared().get(op.name)

        def schedule(s, outputs, target) -> None:
            if own is None or own(s, outputs, target) is False:
                self.default_schedule(s, outputs, op.pattern, target)

        return schedule

"""Tuning a whole model: its tasks (ember.tune.extract), trials spread over them by the task
scheduler, every measurement in the database, and a report of where the time went.

    db = ember.tune.Database("tuning.db")
    report = ember.tune.tune_model(model, example_inputs=(x,), database=db, trials=2000)
    cm = ember.compile(model, example_inputs=(x,), database=db)

Each task's own schedule (the operator library's) is measured first: it is the baseline the
scheduler starts from, and a record like any other, so compiling with the database never picks a
schedule slower than the untuned one. At the end it is re-measured next to each task's winner,
and the report compares those two measurements.

A task of which every measurement failed (its own schedule included) keeps its own schedule when
the model is compiled; the report lists it with the most frequent errors and leaves it out of the
estimated latencies. When every task failed, tune_model raises TuneError.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field

from ..errors import TuneError
from ..target import Target
from .extract import extract_tasks
from .scheduler import GradientScheduler
from .tuner import BATCH, REPORTED_FAILURES, TaskTuner, TimeSpent, TuneResult, tuner_rules


@dataclass
class ModelTuneReport:
    results: list[TuneResult]  # one per task, heaviest first
    weights: list[int]
    baseline_s: list[float]  # each task's own schedule, measured
    trials: int
    elapsed_s: float
    time: TimeSpent = field(default_factory=TimeSpent)

    @property
    def failed(self) -> list[TuneResult]:
        """The tasks of which every measurement failed (each keeps its own schedule; see `error`)."""
        return [r for r in self.results if r.error is not None]

    @property
    def estimated_latency_s(self) -> float:
        """Sum of weight x best latency over the tasks that did not fail (what the scheduler minimizes)."""
        return sum(w * min(r.latency_s, b) for w, r, b in zip(self.weights, self.results, self.baseline_s)
                   if r.error is None)

    @property
    def estimated_baseline_s(self) -> float:
        """Sum of weight x own schedule's latency over the tasks that did not fail."""
        return sum(w * b for w, r, b in zip(self.weights, self.results, self.baseline_s) if r.error is None)

    def __str__(self):
        lines = [f"{'task':32s} {'weight':>6s} {'trials':>6s} {'untuned ms':>11s} {'tuned ms':>9s} {'GFLOP/s':>8s}"]
        for r, w, b in zip(self.results, self.weights, self.baseline_s):
            if r.error is not None:
                lines.append(f"{r.task.name[:32]:32s} {w:6d} {r.trials:6d} failed, keeps its own schedule: {r.error}")
                continue
            best = min(r.latency_s, b)
            gflops = r.task.flops / best / 1e9 if best < float("inf") else 0.0
            unit = " (GOP/s: integer)" if r.task.integer else ""
            lines.append(f"{r.task.name[:32]:32s} {w:6d} {r.trials:6d} {b * 1e3:11.3f} {best * 1e3:9.3f} {gflops:8.1f}"
                         f"{unit}")
        lines.append(f"estimated model latency: {self.estimated_baseline_s * 1e3:.3f} ms untuned -> "
                     f"{self.estimated_latency_s * 1e3:.3f} ms tuned, {self.trials} trials in {self.elapsed_s:.0f} s"
                     + (f" ({len(self.failed)} failed task(s) left out)" if self.failed else ""))
        lines.append(f"time: {self.time}")
        return "\n".join(lines)


def tune_model(model, example_inputs=None, *, database, trials: int = 2000, time_budget_s: float | None = None,
               runner=None, seed: int = 0, opt_level: int = 2, batch: int = BATCH, progress: bool = True,
               max_tasks: int | None = None, precision: str = "fp32") -> ModelTuneReport:
    """Tune the kernels of a model (a Graph, a torch.nn.Module with example_inputs, an ONNX model,
    a CompiledModel: ember.quantize's int8 products are tasks as any other) until `trials`
    measurements or `time_budget_s` seconds are spent; `max_tasks` keeps only the
    heaviest tasks; `precision` is the one the model will be compiled at. Records go to
    `database`; compile with `database=` (and the same precision) to use them. Raises
    TuneError when every measurement of every task failed (see the module doc)."""

    start = time.perf_counter()
    tasks = extract_tasks(model, example_inputs, opt_level=opt_level, precision=precision)[:max_tasks]
    if progress:
        print(f"{len(tasks)} tasks; tuning with {trials} trials"
              + (f" or {time_budget_s:.0f} s" if time_budget_s else ""), file=sys.stderr)
    own_runner = runner is None
    runner = runner if runner is not None else tuner_rules(Target()).runner(workers=os.cpu_count() or 1)
    try:
        tuners = [TaskTuner(t, runner=runner, database=database, seed=seed + k, progress=progress)
                  for k, t in enumerate(tasks)]
        for tuner in tuners:
            tuner.measure_default()
        scheduler = GradientScheduler([t.weight for t in tasks], seed=seed)
        deadline = None if time_budget_s is None else start + time_budget_s
        used = 0
        exhausted: set[int] = set()
        while used < trials and (deadline is None or time.perf_counter() < deadline) and len(exhausted) < len(tuners):
            k = scheduler.next_task(exclude=exhausted)
            measured = tuners[k].step(min(batch, trials - used))
            if measured == 0:
                exhausted.add(k)
            used += measured
            scheduler.record(k, tuners[k].trials, tuners[k].best_latency_s)
            if progress:
                left = "" if deadline is None else f", {max(0.0, deadline - time.perf_counter()):.0f} s left"
                print(f"  model: {used}/{trials} trials, {_estimate(tuners)}{left}", file=sys.stderr, flush=True)
        results = [_result(tuner) for tuner in tuners]
        baseline = [tuner.baseline_s for tuner in tuners]  # re-measured next to the winners
    finally:
        if own_runner:
            runner.close()
    if results and all(r.error is not None for r in results):
        raise TuneError(f"tuning the model: every one of its {len(results)} task(s) failed: "
                        + "; ".join(r.error for r in results[:REPORTED_FAILURES])
                        + ("; ..." if len(results) > REPORTED_FAILURES else ""))
    spent = TimeSpent()
    for r in results:
        for name in vars(spent):
            setattr(spent, name, getattr(spent, name) + getattr(r.time, name))
    return ModelTuneReport(results, [t.weight for t in tasks], baseline, used, time.perf_counter() - start, spent)


def _result(tuner: TaskTuner) -> TuneResult:
    """The tuner's winner, or a result that says why it has none."""
    try:
        return tuner.result()
    except TuneError as e:
        return TuneResult(tuner.task, float("inf"), None, float("nan"), tuner.trials, tuner.history, tuner.time,
                          error=str(e))


def _estimate(tuners: list[TaskTuner]) -> str:
    """The model's latency as the tasks' best latencies so far add up, over the tasks that have one."""
    known = [t.task.weight * t.best_latency_s for t in tuners if math.isfinite(t.best_latency_s)]
    if not known:
        return "no valid measurement yet"
    missing = len(tuners) - len(known)
    return f"estimated {sum(known) * 1e3:.3f} ms" + (f" ({missing} task(s) without a valid measurement)"
                                                     if missing else "")

"""Tuning one task: rounds of search, measurement and model training, recorded in a database.

    best = ember.tune.tune([A, B, C], trials=500, database=db, seed=0)
    best.latency_s, best.trace, best.build()

A run in which no candidate was measured successfully raises TuneError naming the most frequent
failures (a compiler that does not work, a crashing kernel): it never returns an infinite
latency. A `TaskTuner` runs the rounds of one task (`step()`: propose a batch with the evolutionary
search, measure it in worker processes, store every result in the database, retrain the cost
model), resuming from the task's records when the database has some. `tune` drives one tuner
to its budget; `ember.tune.tune_model` drives several through the task scheduler.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import ArgumentTypeError, ConfigError, ScheduleError, TuneError
from ..target import Target, as_target
from ..tir.schedule import Trace
from .search import Candidate, EvolutionarySearch
from .space import sketch_of
from .task import Task, task_from_tensors

BATCH = 32
REPORTED_FAILURES = 3  # the most frequent failures a TuneError names
REMEASURE_REPEATS = 15
CUTOFF = 2.0  # a candidate whose first call is slower than CUTOFF x the best is timed by that call alone


@dataclass
class TimeSpent:
    """Where tuning time went, in seconds."""

    search: float = 0.0  # sampling, mutation, feature extraction and prediction
    measure: float = 0.0  # building and running candidates (the runner's wall time)
    build: float = 0.0  # of which compiling (summed over workers)
    run: float = 0.0  # of which running (summed over workers)
    model: float = 0.0  # training the cost model

    def __str__(self):
        return (f"search {self.search:.1f} s, measurement {self.measure:.1f} s (build {self.build:.1f} s, "
                f"run {self.run:.1f} s), cost model {self.model:.1f} s")


@dataclass
class TuneResult:
    task: Task
    latency_s: float  # the winner's re-measured median (inf: nothing valid was found)
    trace: Trace | None
    cv: float  # the spread of the winner's repeats (coefficient of variation)
    trials: int  # measured this run
    history: list[tuple[int, float, float]] = field(default_factory=list)  # (trials, best s, elapsed s)
    time: TimeSpent = field(default_factory=TimeSpent)
    error: str | None = None  # in tune_model's report: why the task found nothing (it keeps its own schedule)

    @property
    def gflops(self) -> float:
        return self.task.flops / self.latency_s / 1e9 if np.isfinite(self.latency_s) else 0.0

    def build(self, target: str = "c"):
        """The winner, compiled."""
        return self.task.build(self.trace, target=target)


def candidate_features(sch, target: Target) -> np.ndarray:
    """What the cost model sees of a candidate: the features of its (partly lowered) function, by
    the rules of the target's backend."""
    return tuner_rules(target).features(sch.mod, target)


def tuner_rules(target: Target):
    """The tuner's rules for `target` (its backend's: design space, features, runner)."""
    rules = target.backend.tuner
    if rules is None:
        raise ConfigError(f"target {target.kind!r} is not tuned (its backend has no tuner rules)")
    return rules


class TaskTuner:
    def __init__(self, task: Task, *, runner, database=None, cost_model=None, seed: int = 0,
                 target: Target | None = None, progress: bool = False):
        from .cost_model import XGBCostModel

        target = target or Target()
        self.task, self.runner, self.database = task, runner, database
        self.cost_model = cost_model if cost_model is not None else XGBCostModel(seed=seed)
        self.target = target.key  # the database's name of the target
        self.search = EvolutionarySearch(task, self.cost_model, functools.partial(candidate_features, target=target),
                                         seed=seed, space=functools.partial(tuner_rules(target).space, target=target))
        self.progress = progress
        self.time = TimeSpent()
        self.trials = 0  # measured by this tuner
        self.history: list[tuple[int, float, float]] = []
        self.started = time.perf_counter()
        self.baseline_s = float("inf")  # the task's own schedule (measure_default)
        self.failures: Counter[str] = Counter()  # the error of each failed measurement, counted
        if database is not None:
            database.commit_workload(task, self.target)
            self._resume()

    @property
    def trials_since_improvement(self) -> int:
        """Trials measured since the best latency last fell (all of them, when it never did)."""
        best, improved_at = float("inf"), 0
        for trials, latency, _ in self.history:
            if latency < best:
                best, improved_at = latency, trials
        return self.trials - improved_at

    @property
    def best_latency_s(self) -> float:
        """The fastest measured so far, the task's own schedule included."""
        return min(self.search.best[0][0] if self.search.best else float("inf"), self.baseline_s)

    def measure_default(self) -> float:
        """Measure (and record) the task's own schedule, when it has one: the baseline. A schedule
        that is a candidate of the search's sketches (its trace samples: ember.tune.gpu_space's
        gemm_candidate) is told to the search, whose first mutations start from it."""
        from .measure import MeasureInput

        if self.task.default_trace is None:
            return self.baseline_s
        result = self.runner.measure([MeasureInput(self.task, self.task.default_trace)])[0]
        self._count_failures([result])
        if self.database is not None:
            self.database.add(self.task.key, self.target, self.task.default_trace, result)
        self.baseline_s = result.median_s
        if self.task.default_trace.decisions():
            sch = self.task.schedule(self.task.default_trace)
            self._learn([Candidate(sketch_of(self.search.sketches, sch.trace), sch)], [result.median_s])
        return self.baseline_s

    def _resume(self) -> None:
        """Learn from the task's records: the model trains on them, the best seed the search."""
        records = self.database.records(self.task.key, self.target)
        cands, lats = [], []
        for rec in records:
            try:
                sch = self.task.schedule(rec.trace)
            except ScheduleError:
                continue
            cands.append(Candidate(sketch_of(self.search.sketches, rec.trace), sch))
            lats.append(rec.median_s)
        if cands:
            self._learn(cands, lats)

    def step(self, n: int = BATCH) -> int:
        """One round: propose n candidates, measure them, learn. Returns how many were measured."""
        from .measure import MeasureInput

        t = time.perf_counter()
        batch = self.search.propose(n)
        self.search.featurize(batch)
        self.time.search += time.perf_counter() - t
        if not batch:
            return 0
        t = time.perf_counter()
        cutoff = CUTOFF * self.best_latency_s if np.isfinite(self.best_latency_s) else None
        results = self.runner.measure([MeasureInput(self.task, c.sch.trace) for c in batch], cutoff_s=cutoff)
        self.time.measure += time.perf_counter() - t
        self.time.build += sum(r.build_s for r in results)
        self.time.run += sum(r.run_s for r in results)
        self._count_failures(results)
        if self.database is not None:
            for c, r in zip(batch, results):
                self.database.add(self.task.key, self.target, c.sch.trace, r)
        self.trials += len(batch)
        self._learn(batch, [r.median_s for r in results])
        self.history.append((self.trials, self.best_latency_s, time.perf_counter() - self.started))
        if self.progress:
            failed = sum(not r.ok for r in results)
            latency = self.best_latency_s
            best = (f"best {latency * 1e3:9.3f} ms ({self.task.flops / latency / 1e9:7.1f} {self.task.rate_unit})"
                    if np.isfinite(latency) else "no valid candidate yet")
            print(f"[{self.task.name}] trials {self.trials:5d}  {best}  failed {failed}/{len(batch)}  "
                  f"elapsed {self.history[-1][2]:6.0f} s", file=sys.stderr, flush=True)
        return len(batch)

    def _count_failures(self, results) -> None:
        self.failures.update(r.error for r in results if not r.ok)

    def failure_summary(self) -> str:
        """Why nothing was found: the most frequent errors, first lines only, with their counts."""
        failed = sum(self.failures.values())
        if not failed:
            return (f"tuning {self.task.name}: nothing was measured (the budget allowed no trial, or the search "
                    f"proposed no candidate)")
        errors = "; ".join(f"{n} x {_first_line(e)}" for e, n in self.failures.most_common(REPORTED_FAILURES))
        more = len(self.failures) - REPORTED_FAILURES
        return (f"tuning {self.task.name}: all {failed} measurements failed: {errors}"
                + (f"; and {more} other error(s)" if more > 0 else ""))

    def _learn(self, cands: list[Candidate], latencies: list[float]) -> None:
        self.search.tell(cands, latencies)
        self.search.featurize(cands)
        t = time.perf_counter()  # the model keeps what it learned before: it gets the new ones only
        self.cost_model.update([c.features for c in cands], list(latencies), [self.task.key] * len(cands))
        self.time.model += time.perf_counter() - t

    def result(self) -> TuneResult:
        """The winner (TuneError when no candidate, own schedule included, was measured successfully):
        the best searched candidate and the task's own schedule, re-measured side by
        side with more repeats (a single timing may have been lucky) and stored again with their
        spread; the faster one wins, and `baseline_s` becomes the re-measured own schedule."""
        from .measure import MeasureInput, MeasureResult

        # (trace, latency first measured) of the best searched candidate and the task's own schedule
        contenders = [(self.search.best[0][1].sch.trace, self.search.best[0][0])] if self.search.best else []
        default = self.task.default_trace
        if default is not None and self.baseline_s < float("inf") and \
                default.to_json() not in [t.to_json() for t, _ in contenders]:
            contenders.append((default, self.baseline_s))
        if not contenders:
            raise TuneError(self.failure_summary())
        again = self.runner.measure([MeasureInput(self.task, t) for t, _ in contenders], repeats=REMEASURE_REPEATS)
        if self.database is not None:
            for (trace, _), result in zip(contenders, again):
                self.database.add(self.task.key, self.target, trace, result)
        if contenders[-1][0] is default and again[-1].ok:
            self.baseline_s = again[-1].median_s
        if any(r.ok for r in again):
            trace, result = min(((t, r) for (t, _), r in zip(contenders, again)), key=lambda c: c[1].median_s)
        else:  # every re-measurement failed: keep the first timings
            trace, first = min(contenders, key=lambda c: c[1])
            result = MeasureResult((first,))
        return TuneResult(self.task, result.median_s, trace, result.cv, self.trials, self.history, self.time)


def tune(computation, trials: int = 500, *, database=None, seed: int = 0, runner=None, cost_model=None,
         time_budget_s: float | None = None, early_stop: int | None = None, batch: int = BATCH,
         progress: bool = False, target: str | Target = "c") -> TuneResult:
    """Tune one kernel: `computation` is a Task or the te tensors of a kernel (arguments in call
    order), for `target` (its backend's design space, features and runner: "cuda" tunes GPU
    schedules). Stops after `trials` measurements, after `time_budget_s` seconds, or once
    `early_stop` trials in a row found nothing faster, whichever comes first. Raises TuneError
    when every measurement failed."""
    task = computation if isinstance(computation, Task) else task_from_tensors(_tensors(computation))
    target = as_target(target)
    own_runner = runner is None
    runner = runner if runner is not None else tuner_rules(target).runner(workers=os.cpu_count() or 1)
    try:
        tuner = TaskTuner(task, runner=runner, database=database, cost_model=cost_model, seed=seed,
                          target=target, progress=progress)
        deadline = None if time_budget_s is None else time.perf_counter() + time_budget_s
        while tuner.trials < trials and (deadline is None or time.perf_counter() < deadline) and \
                (early_stop is None or tuner.trials_since_improvement < early_stop or not tuner.history):
            if tuner.step(min(batch, trials - tuner.trials)) == 0:
                break  # the space is exhausted
        return tuner.result()
    finally:
        if own_runner:
            runner.close()


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else text
    return line if len(line) <= limit else line[:limit] + " ..."


def _tensors(computation) -> list:
    if not isinstance(computation, Sequence) or not computation:
        raise ArgumentTypeError("tune takes a Task or a non-empty list of te tensors (the kernel's arguments)")
    return list(computation)

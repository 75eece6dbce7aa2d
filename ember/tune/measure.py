"""Measuring candidate schedules in worker processes, each step under a time limit.

`LocalRunner.measure(inputs)` builds and times a batch of candidates (a task and a trace each)
and returns one `MeasureResult` per candidate, in order. A candidate that fails to replay, lower
or compile, that crashes its worker, that runs past the time limit, or that computes a wrong
answer gets a result with an `error` ("build failed: ...", "crashed: signal 11 (SIGSEGV) while
running", "timed out after 10.0 s while running", "wrong result: max abs error ..."); the dead or
killed worker is replaced and the batch goes on.

How a batch runs:
1. In parallel on all workers: the reference outputs of each new workload (once per workload for
   the life of the runner, under a longer limit, REFERENCE_TIMEOUT_S, since an unscheduled kernel
   is slow; when it fails, every candidate of the workload fails with "no reference ...") and the
   build of every candidate (replay, lower, compile, load; compiled libraries are cached on disk
   by ember.runtime.build). A worker keeps the kernels it built.
2. One candidate at a time, on the worker that built it: check against the reference (sent
   along), then time. Timings never overlap, so kernels do not compete for the cores. A worker
   that was replaced since it built a candidate builds it again first.
What a worker does is in ember.tune.worker (correctness tolerance, timing with rotated inputs).
`build_s` and `run_s` are wall times of the two steps, failed ones included.

Workers are processes of ember's own (ember.workers): fresh interpreters that import ember and
ember.tune.worker, never the caller's main module, so a runner works from a script without an
`if __name__ == "__main__":` guard, from `python -c`, stdin or a notebook, from a thread and from
a daemonic process. Starting one takes a few tenths of a second (the imports). A worker is also
replaced after building MAX_BUILDS_PER_WORKER kernels, since a loaded library is never unloaded.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass

from ..errors import ConfigError, WorkerError
from ..tir.schedule import Trace
from ..workers import Call, WorkerPool
from . import worker as worker_module
from .task import Task

REFERENCE_TIMEOUT_S = 120.0
MAX_BUILDS_PER_WORKER = 256
RUN_LIMIT_FLOOR_S = 1.0  # the least time a run under a cutoff may take (see run_limit_s)


@dataclass(frozen=True, eq=False)
class MeasureInput:
    task: Task
    trace: Trace


@dataclass(frozen=True)
class MeasureResult:
    latencies_s: tuple[float, ...]  # seconds per call, one per repeat; empty when it failed
    error: str | None = None
    build_s: float = 0.0  # replaying, lowering, compiling and loading
    run_s: float = 0.0  # checking and timing

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def median_s(self) -> float:
        return statistics.median(self.latencies_s) if self.ok and self.latencies_s else math.inf

    @property
    def cv(self) -> float:
        """The coefficient of variation of the repeats (stdev / mean; NaN when it failed)."""
        if not self.ok or not self.latencies_s:
            return math.nan
        if len(self.latencies_s) == 1:
            return 0.0
        return statistics.stdev(self.latencies_s) / statistics.fmean(self.latencies_s)


@dataclass(frozen=True)
class _Done:
    worker: int  # its index
    process: int  # the number of the process that took the job (replaced since, when it was lost)
    reply: tuple  # ("ok", ...), ("error", message), or ("lost", what befell the process)
    seconds: float  # from sending the job to its reply


class LocalRunner:
    """Builds and times candidates in `workers` processes on this machine (see the module doc).

    Each build and each run (check and timing) of a candidate may last `timeout_s`. A timing is
    `repeats` measurements of enough calls to last `min_repeat_s` each. `check`: compare every
    candidate's outputs with the reference. `flush_cache`: time with the data out of cache, by
    rotating through copies of the arguments larger than the last-level cache (False: time
    repeated calls on one set of arguments, which stays cached when it fits).
    """

    worker = f"{worker_module.__name__}:answer"  # the function that answers requests in a worker

    def __init__(self, workers: int = 1, timeout_s: float = 10.0, repeats: int = 5, min_repeat_s: float = 0.01,
                 check: bool = True, flush_cache: bool = True):
        if workers < 1 or repeats < 1 or timeout_s <= 0 or min_repeat_s < 0:
            raise ConfigError(f"LocalRunner needs workers >= 1, repeats >= 1, timeout_s > 0 and min_repeat_s >= 0; "
                             f"got workers={workers}, repeats={repeats}, timeout_s={timeout_s}, "
                             f"min_repeat_s={min_repeat_s}")
        self.timeout_s, self.repeats, self.min_repeat_s = timeout_s, repeats, min_repeat_s
        self.check, self.flush_cache = check, flush_cache
        self._pool: WorkerPool | None = WorkerPool(workers, preload=[self.worker.partition(":")[0]],
                                                   name="ember-measure")
        self._kernels: dict[int, set[int]] = {}  # process number -> the candidates it built and still holds
        self._builds: dict[int, int] = {}  # process number -> kernels it built
        self._references: dict[str, list | str] = {}  # workload key -> outputs, or why there are none
        self._batches = itertools.count()
        self._ids = itertools.count()

    def measure(self, inputs: list[MeasureInput], repeats: int | None = None,
                cutoff_s: float | None = None) -> list[MeasureResult]:
        """Build, check and time each input (`repeats`: this time, instead of the runner's).

        `cutoff_s`: a candidate whose first call takes longer is timed by that call alone, and
        its run may last only run_limit_s(cutoff_s) (a tuner passes a multiple of its best
        latency, so that hopeless candidates cost one call, not a full timing)."""
        if self._pool is None:
            raise WorkerError("this LocalRunner is closed")
        batch = next(self._batches)
        cids = [next(self._ids) for _ in inputs]
        new = {i.task.key: i.task for i in inputs if self.check and i.task.key not in self._references}
        jobs = [self._job(("reference", task), REFERENCE_TIMEOUT_S) for task in new.values()]
        jobs += [self._job(("build", batch, cid, i.task, i.trace.to_json()), self.timeout_s)
                 for cid, i in zip(cids, inputs)]
        done = self._dispatch(jobs)
        for key, d in zip(new, done):
            self._references[key] = d.reply[1] if d.reply[0] == "ok" else _during(d.reply[1], "computing it")
        built = done[len(new):]
        for cid, d in zip(cids, built):
            if d.reply[0] == "ok":
                self._built(d.process, cid)
        results = [self._run(d.worker, batch, cid, i, d.seconds, repeats or self.repeats, cutoff_s)
                   if d.reply[0] == "ok"
                   else MeasureResult((), _during(d.reply[1], "building"), d.seconds)
                   for cid, i, d in zip(cids, inputs, built)]
        self._recycle()
        return results

    def run_limit_s(self, cutoff_s: float | None, repeats: int | None = None) -> float:
        """How long checking and timing one candidate may last: the runner's timeout, or under a
        cutoff, RUN_LIMIT_FLOOR_S plus twice what a candidate at the cutoff would take."""
        if cutoff_s is None:
            return self.timeout_s
        calls = (repeats or self.repeats) + 2  # checking, choosing the calls per repeat, repeats
        return min(self.timeout_s, RUN_LIMIT_FLOOR_S + 2 * calls * (cutoff_s + self.min_repeat_s))

    def _run(self, w: int, batch: int, cid: int, inp: MeasureInput, build_s: float, repeats: int,
             cutoff_s: float | None) -> MeasureResult:
        """Check and time one built candidate on worker `w`, alone."""
        reference = self._references.get(inp.task.key) if self.check else None
        if isinstance(reference, str):
            return MeasureResult((), f"no reference to check against: {reference}", build_s)
        if cid not in self._kernels.get(self._pool.process(w), ()):  # the worker was replaced since it built this
            [d] = self._dispatch([self._job(("build", batch, cid, inp.task, inp.trace.to_json()), self.timeout_s, w)])
            build_s += d.seconds
            if d.reply[0] != "ok":
                return MeasureResult((), _during(d.reply[1], "building"), build_s)
            self._built(d.process, cid)
        request = ("run", cid, inp.task, reference, self.flush_cache, repeats, self.min_repeat_s, cutoff_s)
        [d] = self._dispatch([self._job(request, self.run_limit_s(cutoff_s, repeats), w)])
        self._kernels.get(d.process, set()).discard(cid)
        if d.reply[0] != "ok":
            return MeasureResult((), _during(d.reply[1], "running"), build_s, d.seconds)
        return MeasureResult(tuple(d.reply[1]), None, build_s, d.seconds)

    def _job(self, request: tuple, limit_s: float, worker: int | None = None) -> Call:
        """A request to the worker function, under a time limit, on `worker` (None: any)."""
        return Call(self.worker, request, limit_s, worker)

    def _dispatch(self, jobs: list[Call]) -> list[_Done]:
        """Run the jobs on the workers, each worker one job at a time, each job under its limit;
        a process that dies or runs past the limit is replaced (by the pool)."""
        done = []
        for o in self._pool.run(jobs):
            if o.status == "error":  # the worker's own code failed, not the candidate's
                reply = ("error", f"{o.value.__class__.__name__}: {o.value}")
            else:
                reply = o.value if o.status == "ok" else ("lost", o.value)
            if o.status == "lost":
                self._kernels.pop(o.process, None)
                self._builds.pop(o.process, None)
            done.append(_Done(o.worker, o.process, reply, o.seconds))
        return done

    def _built(self, process: int, cid: int) -> None:
        self._kernels.setdefault(process, set()).add(cid)
        self._builds[process] = self._builds.get(process, 0) + 1

    def _recycle(self) -> None:
        for w in range(len(self._pool)):
            process = self._pool.process(w)
            if self._builds.get(process, 0) >= MAX_BUILDS_PER_WORKER:
                self._pool.restart(w)
                self._kernels.pop(process, None)
                self._builds.pop(process, None)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _during(error: str, step: str) -> str:
    """A worker's error; what befell the worker itself (crash, time limit) says during which step."""
    return error if error.startswith(("build failed", "run failed", "reference failed", "wrong result")) \
        else f"{error} while {step}"

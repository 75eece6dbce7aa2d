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

Workers are started with multiprocessing's "forkserver" method: a server process that has run no
kernel (a fork of a parent whose OpenMP threads are running can deadlock in the child) imports
ember once, and every worker is forked from it: the first start takes about a second, replacing
a worker a few tens of milliseconds. As with any multiprocessing code, a script that creates a
runner must guard its entry point with `if __name__ == "__main__":`. A worker is also replaced
after building MAX_BUILDS_PER_WORKER kernels, since a loaded library is never unloaded.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import signal
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import wait

from ..tir.schedule import Trace
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
class _Job:
    request: tuple
    limit_s: float
    worker: int | None = None  # which worker must take it (None: the first idle one)


@dataclass
class _WorkerProcess:
    process: multiprocessing.Process
    conn: object
    kernels: set[int] = field(default_factory=set)  # candidates it built and still holds
    builds: int = 0


@dataclass(frozen=True)
class _Done:
    worker: int  # its index
    process: _WorkerProcess  # the process that took the job (replaced since, when it was lost)
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

    def __init__(self, workers: int = 1, timeout_s: float = 10.0, repeats: int = 5, min_repeat_s: float = 0.01,
                 check: bool = True, flush_cache: bool = True):
        if workers < 1 or repeats < 1 or timeout_s <= 0 or min_repeat_s < 0:
            raise ValueError(f"LocalRunner needs workers >= 1, repeats >= 1, timeout_s > 0 and min_repeat_s >= 0; "
                             f"got workers={workers}, repeats={repeats}, timeout_s={timeout_s}, "
                             f"min_repeat_s={min_repeat_s}")
        self.timeout_s, self.repeats, self.min_repeat_s = timeout_s, repeats, min_repeat_s
        self.check, self.flush_cache = check, flush_cache
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload([worker_module.__name__])
        self._workers = [self._start_worker() for _ in range(workers)]
        self._references: dict[str, list | str] = {}  # workload key -> outputs, or why there are none
        self._batches = itertools.count()
        self._ids = itertools.count()

    def measure(self, inputs: list[MeasureInput], repeats: int | None = None,
                cutoff_s: float | None = None) -> list[MeasureResult]:
        """Build, check and time each input (`repeats`: this time, instead of the runner's).

        `cutoff_s`: a candidate whose first call takes longer is timed by that call alone, and
        its run may last only run_limit_s(cutoff_s) (a tuner passes a multiple of its best
        latency, so that hopeless candidates cost one call, not a full timing)."""
        if not self._workers:
            raise RuntimeError("this LocalRunner is closed")
        batch = next(self._batches)
        cids = [next(self._ids) for _ in inputs]
        new = {i.task.key: i.task for i in inputs if self.check and i.task.key not in self._references}
        jobs = [_Job(("reference", task), REFERENCE_TIMEOUT_S) for task in new.values()]
        jobs += [_Job(("build", batch, cid, i.task, i.trace.to_json()), self.timeout_s) for cid, i in zip(cids, inputs)]
        done = self._dispatch(jobs)
        for key, d in zip(new, done):
            self._references[key] = d.reply[1] if d.reply[0] == "ok" else _during(d.reply[1], "computing it")
        built = done[len(new):]
        for cid, d in zip(cids, built):
            if d.reply[0] == "ok":
                d.process.kernels.add(cid)
                d.process.builds += 1
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
        if cid not in self._workers[w].kernels:  # the worker was replaced since it built this one
            [d] = self._dispatch([_Job(("build", batch, cid, inp.task, inp.trace.to_json()), self.timeout_s, w)])
            build_s += d.seconds
            if d.reply[0] != "ok":
                return MeasureResult((), _during(d.reply[1], "building"), build_s)
            d.process.kernels.add(cid)
            d.process.builds += 1
        request = ("run", cid, inp.task, reference, self.flush_cache, repeats, self.min_repeat_s, cutoff_s)
        [d] = self._dispatch([_Job(request, self.run_limit_s(cutoff_s, repeats), w)])
        d.process.kernels.discard(cid)
        if d.reply[0] != "ok":
            return MeasureResult((), _during(d.reply[1], "running"), build_s, d.seconds)
        return MeasureResult(tuple(d.reply[1]), None, build_s, d.seconds)

    def _dispatch(self, jobs: list[_Job]) -> list[_Done]:
        """Run the jobs on the workers, each worker one job at a time, each job under its limit;
        a process that dies or runs past the limit is replaced."""
        done: list = [None] * len(jobs)
        pending = deque(range(len(jobs)))
        busy: dict[int, tuple[int, float]] = {}  # worker index -> (job index, when it was sent)
        while pending or busy:
            for w in range(len(self._workers)):
                j = next((j for j in pending if jobs[j].worker in (None, w)), None) if w not in busy else None
                if j is not None:
                    pending.remove(j)
                    self._send(w, jobs[j].request)
                    busy[w] = (j, time.monotonic())
            soonest = min(sent + jobs[j].limit_s for j, sent in busy.values())
            watched = [self._workers[w].conn for w in busy] + [self._workers[w].process.sentinel for w in busy]
            wait(watched, timeout=max(0.0, soonest - time.monotonic()))
            for w, (j, sent) in list(busy.items()):
                process = self._workers[w]
                reply = self._poll(w, jobs[j].limit_s, sent + jobs[j].limit_s)
                if reply is not None:
                    done[j] = _Done(w, process, reply, time.monotonic() - sent)
                    del busy[w]
        return done

    def _send(self, w: int, request: tuple) -> None:
        try:
            self._workers[w].conn.send(request)
        except (BrokenPipeError, ConnectionResetError, EOFError):  # it died while idle: replace it
            self._replace(w)
            self._workers[w].conn.send(request)

    def _poll(self, w: int, limit_s: float, deadline: float) -> tuple | None:
        """The reply of busy worker `w`, ("lost", ...) when it died or ran out of time, or None."""
        worker = self._workers[w]
        if worker.conn.poll():
            try:
                return worker.conn.recv()
            except (EOFError, OSError):
                pass  # it died: the pipe closed
        if not worker.process.is_alive() or worker.conn.closed:
            worker.process.join(1.0)
            lost = ("lost", _exit_status(worker.process.exitcode))
        elif time.monotonic() >= deadline:
            lost = ("lost", f"timed out after {float(limit_s)} s")
        else:
            return None
        self._replace(w)
        return lost

    def _start_worker(self) -> _WorkerProcess:
        parent, child = self._context.Pipe()
        process = self._context.Process(target=worker_module.serve, args=(child,), daemon=True,
                                        name="ember-measure")
        process.start()
        child.close()
        return _WorkerProcess(process, parent)

    def _replace(self, w: int) -> None:
        _stop(self._workers[w], kill=True)
        self._workers[w] = self._start_worker()

    def _recycle(self) -> None:
        for w, worker in enumerate(self._workers):
            if worker.builds >= MAX_BUILDS_PER_WORKER:
                _stop(worker)
                self._workers[w] = self._start_worker()

    def close(self) -> None:
        for worker in self._workers:
            _stop(worker)
        self._workers = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _stop(worker: _WorkerProcess, kill: bool = False) -> None:
    if not kill and worker.process.is_alive():
        try:
            worker.conn.send(("stop",))
            worker.process.join(2.0)
        except (BrokenPipeError, ConnectionResetError, EOFError):
            pass
    if worker.process.is_alive():
        worker.process.kill()
        worker.process.join()
    worker.conn.close()


def _exit_status(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"crashed: signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"crashed: signal {-code}"
    return f"crashed: exit status {code}"


def _during(error: str, step: str) -> str:
    """A worker's error; what befell the worker itself (crash, time limit) says during which step."""
    return error if error.startswith(("build failed", "run failed", "reference failed", "wrong result")) \
        else f"{error} while {step}"

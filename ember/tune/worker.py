"""What a measuring worker process does with a candidate: build it, check it, time it.

The runner (ember.tune.measure) sends requests to `answer` in a worker process of ember's own
(ember.workers), one at a time. Everything that can crash or hang (compiling, loading and calling a
candidate kernel) happens here, in a process the runner can kill and restart.

Requests, answered with ("ok", ...) or ("error", message):
- ("reference", task): the outputs of the task's reference kernel (its default trace, or the
  unscheduled function) on the fixed inputs.
- ("build", batch, cid, task, trace_json): replay the trace, lower, compile and load; the kernel
  is kept under `cid` until the batch ends (a build of a later batch drops it).
- ("run", cid, task, reference | None, flush_cache, repeats, min_repeat_s, cutoff_s | None): check
  the kept kernel against the reference outputs (None: do not check), then time it. Answers the
  seconds per call of each repeat, or of its first call alone when that call took longer than
  `cutoff_s` (a candidate already known to be far from the best is not worth its repeats).

Checking: every candidate runs on the same seeded random inputs (fresh copies: a faulty kernel
cannot spoil them for the next one), into outputs filled with values unlike the reference (NaN
for floats), so an element a kernel never writes is an error too. Floats may differ from the
reference by `atol + rtol * max|reference|` (a reordered float32 reduction rounds differently;
the error scales with the magnitude of the sums, not of each element); integers must be exact.

Timing: the first call (the checking one, when there is one) screens against the cutoff and warms
up; then `ember.runtime.bench` (calls per repeat doubled until a repeat lasts
`min_repeat_s`, median) over a launcher that rotates through copies of the arguments totalling
twice the last-level cache, so that every call finds its data out of cache, as a kernel does in a
model whose other kernels ran in between. Rotation (rather than flushing the cache between
repeats) keeps every call cold, not just the first of each repeat. Kernels whose arguments are
tiny use at most MAX_COPIES copies and stay partly cached; their time is mostly call overhead.
"""

from __future__ import annotations

import functools
import itertools
import math
from pathlib import Path

import numpy as np

from ..runtime.bench import bench
from ..tir import dtype as dt
from ..tir.schedule import Trace

SEED = 0  # the random inputs every candidate of a workload is checked and timed on
RTOL = ATOL = 1e-3  # float32 (and float64) outputs
RTOL16 = ATOL16 = 1e-2  # float16 outputs
MAX_COPIES = 1024  # argument copies a timing rotates through, at most
_DEFAULT_LLC_BYTES = 32 << 20


class WrongResult(Exception):
    """A candidate's output differs from the reference beyond the tolerance."""


def answering(cls):
    """The `answer` of a worker process whose requests an instance of `cls` handles: ("ok", ...)
    or ("error", message). The instance, made by the first request, keeps what it builds for the
    requests that follow."""
    made = []

    def answer(step: str, *args) -> tuple:
        if not made:
            made.append(cls())
        try:
            return ("ok", *getattr(made[0], step)(*args))
        except WrongResult as e:
            return ("error", _clip(str(e)))
        except Exception as e:  # a candidate may fail in any way: the runner records how
            return ("error", _clip(f"{step} failed: {type(e).__name__}: {e}"))

    return answer


def _clip(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."


class _Worker:
    """What a worker keeps between requests: this batch's kernels, each workload's inputs, and
    the copies of one workload's arguments that timing rotates through."""

    def __init__(self):
        self.batch = None
        self.kernels: dict[int, object] = {}
        self.inputs: dict[str, list[np.ndarray]] = {}  # by workload key
        self.outputs: dict[str, list[np.ndarray]] = {}  # empty, for their shapes and types
        self.copies: tuple[str, list[list[np.ndarray]]] | None = None  # one workload's rotation

    def reference(self, task):
        kernel = task.build(task.default_trace)
        outputs = self._outputs(task)
        kernel(*self._inputs(task), *outputs)
        return (outputs,)

    def build(self, batch, cid, task, trace_json):
        if batch != self.batch:
            self.batch, self.kernels = batch, {}
        self.kernels[cid] = task.build(Trace.from_json(trace_json))
        return ()

    def run(self, cid, task, reference, flush_cache, repeats, min_repeat_s, cutoff_s=None):
        kernel = self.kernels.pop(cid)
        first = None
        if reference is not None:
            outputs = self._outputs(task, reference)
            first = _one_call(kernel.prepare(*[a.copy() for a in self._inputs(task)], *outputs))
            compare(outputs, reference, [p.name for p in task.func.params[task.num_inputs:]])
        copies = self._copies(task) if flush_cache else [self._inputs(task) + self._outputs(task)]
        launchers = [kernel.prepare(*args) for args in copies]
        if cutoff_s is not None:
            first = first if first is not None else _one_call(launchers[-1])
            if first > cutoff_s:
                return ((first,),)
        next_launcher = itertools.cycle(launchers).__next__
        timed = bench(lambda: next_launcher()(), warmup=0 if first is not None else 1, repeat=repeats,
                      min_time=min_repeat_s * repeats)
        return (timed.times,)

    def _inputs(self, task) -> list[np.ndarray]:
        if task.key not in self.inputs:
            args = task.random_args(np.random.default_rng(SEED))
            self.inputs[task.key], self.outputs[task.key] = args[:task.num_inputs], args[task.num_inputs:]
        return self.inputs[task.key]

    def _outputs(self, task, reference: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """Output arrays holding values no correct kernel leaves there: NaN for floats; for
        other types, the reference plus one (or its negation)."""
        self._inputs(task)
        outputs = [np.empty_like(o) for o in self.outputs[task.key]]
        for k, out in enumerate(outputs):
            if out.dtype.kind == "f":
                out.fill(np.nan)
            elif reference is not None:
                out[...] = ~reference[k] if out.dtype == np.bool_ else reference[k] + 1
        return outputs

    def _copies(self, task) -> list[list[np.ndarray]]:
        if self.copies is None or self.copies[0] != task.key:
            self.copies = None  # free the last workload's copies before making these
            args = self._inputs(task) + self._outputs(task)
            nbytes = sum(a.nbytes for a in args)
            count = min(MAX_COPIES, max(1, math.ceil(2 * last_level_cache_bytes() / max(nbytes, 1))))
            # np.copy writes every page now, so no first-touch page faults land in the timing
            self.copies = (task.key, [[np.copy(a) for a in args] for _ in range(count)])
        return self.copies[1]


answer = answering(_Worker)  # this module's requests (the runner's Call names "ember.tune.worker:answer")


def _one_call(launch) -> float:
    return bench(launch, warmup=0, repeat=1, number=1).median


def compare(outputs: list[np.ndarray], reference: list[np.ndarray], names: list[str]) -> None:
    """Raise WrongResult when an output differs from the reference beyond the tolerance."""
    for name, out, ref in zip(names, outputs, reference):
        if ref.dtype.kind == "f" and _close(out, ref):
            continue
        if ref.dtype.kind == "f":
            rtol, atol = (RTOL16, ATOL16) if ref.dtype.name in dt.HALF_DTYPES else (RTOL, ATOL)
            o, r = out.astype(np.float64), ref.astype(np.float64)
            with np.errstate(invalid="ignore"):
                diff = np.abs(o - r)
            diff[(o == r) | (np.isnan(o) & np.isnan(r))] = 0.0
            diff[np.isnan(diff)] = np.inf  # NaN on one side only
            finite = np.abs(r[np.isfinite(r)])
            tolerance = atol + rtol * (finite.max() if finite.size else 0.0)
        elif ref.dtype.kind in "iu":
            diff, tolerance = np.abs(out.astype(np.float64) - ref.astype(np.float64)), 0.0
        else:
            diff, tolerance = (out != ref).astype(np.float64), 0.0
        error = diff.max() if diff.size else 0.0
        if error > tolerance:
            at = np.unravel_index(int(np.argmax(diff)), diff.shape)
            raise WrongResult(f"wrong result: max abs error {error:.3g} in {name} at {tuple(map(int, at))} "
                              f"(tolerance {tolerance:.3g}; got {out[at].item()!r}, expected {ref[at].item()!r})")


def _close(out: np.ndarray, ref: np.ndarray) -> bool:
    """The common case of `compare` in one pass of the output's own precision (a 4096 x 4096
    float32 output in tens of milliseconds, where compare's exact accounting takes seconds): every
    element within the tolerance of a finite reference. False sends the output to the exact
    check, which also accepts NaN against NaN and infinities that match."""
    wide = np.float32 if ref.dtype.itemsize < 4 else ref.dtype
    o, r = out.astype(wide, copy=False), ref.astype(wide, copy=False)
    if not r.size:
        return True
    with np.errstate(invalid="ignore", over="ignore"):
        largest = max(float(r.max()), -float(r.min()))
        if not np.isfinite(largest):
            return False
        rtol, atol = (RTOL16, ATOL16) if ref.dtype.name in dt.HALF_DTYPES else (RTOL, ATOL)
        diff = np.subtract(o, r)
        np.abs(diff, out=diff)
        return bool(diff.max() <= atol + rtol * largest)


@functools.cache
def last_level_cache_bytes() -> int:
    """The size of the largest CPU cache (Linux sysfs; 32 MiB when it cannot be read)."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=_DEFAULT_LLC_BYTES)

"""Measuring GPU candidates (target "cuda"'s runner): LocalRunner's interface over the processes
of ember.tune.gpu_worker.

On a GPU, a batch is built in parallel by `workers` compiler processes (CPU only: NVRTC needs no
GPU, and a build, 0.1 to 0.5 s, is what a candidate costs) for the architecture and facts the
device process reports, then each candidate is checked and timed, one at a time, by the one
device process, which keeps its CUDA context, the workload's device arrays and its reference
outputs across candidates and batches (a candidate's request carries its cubin and loop IR, a few
hundred KiB; nothing of the size of the outputs crosses a pipe). A candidate that fails NVRTC, is
past the GPU's limits (a ScheduleError naming the limit), fails at its launch or computes a wrong
answer gets a result with that error and the search goes on. A launch that failed on the device
may leave the context unusable (an illegal address is sticky), so after a DeviceError the device
process is replaced, and its reference computed again, before the next candidate.

`GPURunner(simulate=True)` measures on the interpreter with GPU semantics instead (no GPU
needed; LocalRunner's own path, each worker building and running its candidates): every
candidate is still built by NVRTC, its numbers are checked, and its "time" is the interpreter's,
one call each, a stand-in that lets the search run end to end on a CPU-only machine.
`device_preload`: modules the device process imports first (a stand-in driver, in tests).
"""

from __future__ import annotations

from ..errors import WorkerError
from ..workers import Call, WorkerPool
from . import gpu_worker
from .measure import REFERENCE_TIMEOUT_S, LocalRunner, MeasureInput, MeasureResult, _during

FACTS_TIMEOUT_S = 60.0  # starting the driver and retaining the device's context


class GPURunner(LocalRunner):
    def __init__(self, workers: int = 1, timeout_s: float = 30.0, repeats: int = 5, min_repeat_s: float = 0.01,
                 check: bool = True, simulate: bool = False, device_preload: tuple[str, ...] = ()):
        self.simulate = simulate
        self.worker = f"{gpu_worker.__name__}:{'simulated' if simulate else 'compiler'}"
        super().__init__(workers, timeout_s, 1 if simulate else repeats, 0.0 if simulate else min_repeat_s, check,
                         flush_cache=False)  # a GPU kernel is timed on one set of device arrays
        self._device = None if simulate else WorkerPool(1, preload=[gpu_worker.__name__, *device_preload],
                                                        name="ember-gpu")
        self._held: dict[str, tuple[int, str | None]] = {}  # workload key -> (device process, why it has no reference)

    def measure(self, inputs: list[MeasureInput], repeats: int | None = None,
                cutoff_s: float | None = None) -> list[MeasureResult]:
        """As LocalRunner's; simulated, every candidate is run once (the interpreter's time)."""
        if self.simulate:
            return super().measure(inputs, 1, cutoff_s)
        if self._pool is None:
            raise WorkerError("this GPURunner is closed")
        facts, seconds = self._on_device(("facts",), FACTS_TIMEOUT_S)
        if facts[0] != "ok":
            return [MeasureResult((), _during(facts[1], "asking the device"), run_s=seconds) for _ in inputs]
        built = self._dispatch([self._job(("build", i.task, i.trace.to_json(), *facts[1:]), self.timeout_s)
                                for i in inputs])
        return [self._time(i, d.reply[1:], d.seconds, repeats or self.repeats, cutoff_s) if d.reply[0] == "ok"
                else MeasureResult((), _during(d.reply[1], "building"), d.seconds) for i, d in zip(inputs, built)]

    def _time(self, inp: MeasureInput, kernel: tuple, build_s: float, repeats: int,
              cutoff_s: float | None) -> MeasureResult:
        """Check and time one built candidate on the device."""
        if self.check and (why := self._reference(inp.task)) is not None:
            return MeasureResult((), f"no reference to check against: {why}", build_s)
        request = ("run", inp.task, *kernel, self.check, repeats, self.min_repeat_s, cutoff_s)
        reply, seconds = self._on_device(request, self.run_limit_s(cutoff_s, repeats))
        if reply[0] != "ok":
            return MeasureResult((), _during(reply[1], "running"), build_s, seconds)
        return MeasureResult(tuple(reply[1]), None, build_s, seconds)

    def _reference(self, task) -> str | None:
        """Why the device process has no reference outputs of the task (None: it has them now)."""
        process = self._device.process(0)
        if self._held.get(task.key, (None,))[0] != process:  # (a process replaced since: computed again)
            reply, _ = self._on_device(("reference", task), REFERENCE_TIMEOUT_S)
            self._held[task.key] = (process, None if reply[0] == "ok" else _during(reply[1], "computing it"))
        return self._held[task.key][1]

    def _on_device(self, request: tuple, limit_s: float) -> tuple[tuple, float]:
        """(the device process's reply, seconds): ("ok", ...), ("error", message) or ("lost", what
        befell it). After a DeviceError the process is replaced: its context may be unusable."""
        [o] = self._device.run([Call(f"{gpu_worker.__name__}:answer", request, limit_s, 0)])
        if o.status == "error":  # the worker's own code failed, not the candidate's
            reply = ("error", f"{o.value.__class__.__name__}: {o.value}")
        else:
            reply = o.value if o.status == "ok" else ("lost", o.value)
        if reply[0] == "error" and "DeviceError" in reply[1]:
            self._device.restart(0)
        return reply, o.seconds

    def close(self) -> None:
        super().close()
        if self._device is not None:
            self._device.close()
            self._device = None

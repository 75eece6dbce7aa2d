"""Measuring GPU candidates (target "cuda"'s runner): ember.tune.measure's LocalRunner with the
GPU's workers (ember.tune.gpu_worker), each a process with its own CUDA context.

A candidate that fails NVRTC, is past the GPU's limits (a ScheduleError naming the limit), fails
at its launch or computes a wrong answer gets a result with that error and the search goes on. A
launch that failed on the device may leave the worker's context unusable (an illegal address is
sticky), so that worker is replaced before the next candidate.

`GPURunner(simulate=True)` measures on the interpreter with GPU semantics instead (no GPU
needed): every candidate is still built by NVRTC, its numbers are checked, and its "time" is the
interpreter's, one call each, a stand-in that lets the search run end to end on a CPU-only
machine.
"""

from __future__ import annotations

from . import gpu_worker
from .measure import LocalRunner, MeasureInput, MeasureResult


class GPURunner(LocalRunner):
    def __init__(self, workers: int = 1, timeout_s: float = 30.0, repeats: int = 5, min_repeat_s: float = 0.01,
                 check: bool = True, simulate: bool = False):
        self.simulate = simulate
        self.worker = f"{gpu_worker.__name__}:{'simulated' if simulate else 'answer'}"
        super().__init__(workers, timeout_s, 1 if simulate else repeats, 0.0 if simulate else min_repeat_s, check,
                         flush_cache=False)  # a GPU kernel is timed on one set of device arrays

    def measure(self, inputs: list[MeasureInput], repeats: int | None = None,
                cutoff_s: float | None = None) -> list[MeasureResult]:
        """As LocalRunner's; simulated, every candidate is run once (the interpreter's time)."""
        return super().measure(inputs, 1 if self.simulate else repeats, cutoff_s)

    def _run(self, w, batch, cid, inp, build_s, repeats, cutoff_s) -> MeasureResult:
        result = super()._run(w, batch, cid, inp, build_s, repeats, cutoff_s)
        if not self.simulate and result.error and "DeviceError" in result.error:
            lost = self._pool.process(w)
            self._pool.restart(w)  # its context may be unusable: a fresh process, a fresh context
            self._kernels.pop(lost, None)
            self._builds.pop(lost, None)
        return result

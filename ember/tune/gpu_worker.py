"""What the processes measuring GPU candidates do (ember.tune.gpu_measure's requests, target
"cuda"). Building is CPU work and the time a search spends; timing a candidate on the GPU takes a
few milliseconds. So candidates are built in parallel by `compiler` processes that never touch the
driver (no CUDA context: they are told the device's architecture and facts), and checked and
timed one at a time by the one `answer` process that holds the GPU's context, its device arrays
and the reference outputs for the life of the runner; a candidate that corrupts that context (an
illegal address) takes only this process with it, which the runner replaces.

- `compiler` (`Compiler`): a candidate replayed, lowered, checked against the GPU's limits
  (ember.cuda.limits: a ScheduleError names the limit) and built by NVRTC; answered as what the
  device process makes the kernel again from: its launch record, cubin, CUDA C and loop IR (the
  cubin is a few KiB, the loop IR a hundred; no kernel is loaded here).
- `answer` (`DeviceWorker`): `facts` (the device's architecture and facts, for the compilers),
  `reference` (the workload's outputs, kept here: the task's own GPU schedule run on the device,
  since a large GEMM unscheduled on the CPU would take minutes, else its unscheduled function on
  the CPU), and `run`: the candidate on device arrays (the workload's inputs uploaded once, its
  outputs allocated once, both reused by every candidate, so that no host copy is timed).
  Checking: the outputs filled with NaN (values unlike the reference for other types), one
  launch, copied back, compared as on the CPU (ember.tune.worker.compare). Timing: the checking
  launch warms up; then `repeats` intervals between CUDA events around back-to-back launches, as
  many per interval as last `min_repeat_s` (doubled from one); the seconds per launch of each.
- `simulated` (`SimulatedWorker`): no GPU needed: a candidate is built by NVRTC all the same (what
  fails to compile or is past the limits fails here too), and run on the interpreter with GPU
  semantics (ember.cuda.simt: blocks and threads shuffled, races checked), which checks its
  numbers; its time is the interpreter's, a stand-in that says nothing of a GPU's, so that the
  search runs end to end on a machine without one.
"""

from __future__ import annotations

from ..tir.schedule import Trace
from .worker import _Worker, answering, compare

MAX_LAUNCHES_PER_REPEAT = 1 << 16


class SimulatedWorker(_Worker):
    def reference(self, task):
        return (_unscheduled(self, task),)

    def build(self, batch, cid, task, trace_json):
        if batch != self.batch:
            self.batch, self.kernels = batch, {}
        trace = Trace.from_json(trace_json)
        task.build(trace, target="cuda")  # NVRTC and the GPU's limits
        self.kernels[cid] = task.build(trace, target="python")
        return ()


class Compiler:
    def build(self, task, trace_json, arch, gpu):
        """(launch record, cubin, CUDA C, loop IR) of the candidate, built for `arch` and
        checked against the limits of `gpu` (ember.target.GPU) without asking the driver."""
        from ..cuda.kernel import build_cuda
        from ..kernel import lower
        from ..target import Target

        func = lower(task.schedule(Trace.from_json(trace_json)), name=task.name, target=Target("cuda", gpu=gpu))
        kernel = build_cuda(func, arch=arch, gpu=gpu)
        return kernel.to_json(), kernel.binary, kernel.source, kernel.func


class DeviceWorker(_Worker):
    def __init__(self):
        super().__init__()
        self.device_args = None  # (workload key, the inputs' and outputs' device addresses)
        self.references: dict[str, list] = {}  # workload key -> its outputs

    def facts(self):
        """(the device's architecture, its facts as ember.target.GPU): what compilers build for."""
        from ..cuda.driver import device
        from ..target import Target

        return device().arch, Target("cuda").gpu

    def reference(self, task):
        """Compute and keep the workload's reference outputs (see the module doc)."""
        if task.default_trace is None:
            self.references[task.key] = _unscheduled(self, task)
            return ()
        kernel = task.build(task.default_trace, target="cuda")
        pointers = self._device_args(task)
        kernel.launch(pointers)
        self.references[task.key] = self._copied_back(task, kernel, pointers)
        return ()

    def run(self, task, record, binary, source, func, check, repeats, min_repeat_s, cutoff_s=None):
        from ..cuda.kernel import CUDAKernel
        from ..cuda.launch_shape import launch_dims

        kernel = CUDAKernel(func, source, binary, launch_dims(func), record["arch"],
                            aligned={func.params[k] for k in record["aligned"]}, checks=record["checks"])
        pointers = self._device_args(task)
        if check:
            reference = self.references[task.key]
            self._fill(task, pointers, reference)
            kernel.launch(pointers)
            compare(self._copied_back(task, kernel, pointers), reference,
                    [p.name for p in task.func.params[task.num_inputs:]])
        first = _timed(kernel, pointers, 1)
        if cutoff_s is not None and first > cutoff_s:
            return ((first,),)
        number = 1
        while number < MAX_LAUNCHES_PER_REPEAT and number * first < min_repeat_s:
            number *= 2
        return ([_timed(kernel, pointers, number) / number for _ in range(repeats)],)

    def _fill(self, task, pointers: list[int], reference: list) -> None:
        """The outputs on the device set to values no correct kernel leaves there."""
        from ..cuda.driver import check

        cu = _driver()
        for p, o in zip(pointers[task.num_inputs:], self._outputs(task, reference)):
            check(cu.cuMemcpyHtoD(p, o.ctypes.data, o.nbytes), "cuMemcpyHtoD")

    def _copied_back(self, task, kernel, pointers: list[int]) -> list:
        """The outputs, once the kernel's launches are done, copied to the host."""
        from ..cuda.driver import check

        cu = _driver()
        check(cu.cuStreamSynchronize(cu.CUstream(0)), f"kernel {kernel.name}")
        outputs = self._outputs(task)
        for p, o in zip(pointers[task.num_inputs:], outputs):
            check(cu.cuMemcpyDtoH(o.ctypes.data, p, o.nbytes), "cuMemcpyDtoH")
        return outputs

    def _device_args(self, task) -> list[int]:
        """The workload's inputs on the GPU (uploaded once) and its outputs (allocated once)."""
        from ..cuda.driver import check

        cu = _driver()
        if self.device_args is None or self.device_args[0] != task.key:
            if self.device_args is not None:
                for p in self.device_args[1]:
                    cu.cuMemFree(p)
                self.device_args = None
            arrays = self._inputs(task) + self._outputs(task)
            pointers = [int(check(cu.cuMemAlloc(max(1, a.nbytes)), "cuMemAlloc")) for a in arrays]
            for p, a in zip(pointers, arrays[:task.num_inputs]):
                check(cu.cuMemcpyHtoD(p, a.ctypes.data, a.nbytes), "cuMemcpyHtoD")
            self.device_args = (task.key, pointers)
        return self.device_args[1]


def _driver():
    """The driver API with the GPU's primary context current in this process (a DeviceError
    saying why where there is no driver or GPU)."""
    from ..cuda.driver import device, driver

    device().activate()
    return driver()


def _unscheduled(worker: _Worker, task) -> list:
    """The outputs of the task's unscheduled function compiled for the CPU (its own schedule,
    the default trace, binds GPU threads)."""
    outputs = worker._outputs(task)
    task.build(None)(*worker._inputs(task), *outputs)
    return outputs


def _timed(kernel, pointers: list[int], number: int) -> float:
    """Seconds between CUDA events around `number` back-to-back launches."""
    from ..cuda.driver import check, driver

    cu = driver()
    start, end = (check(cu.cuEventCreate(0), "cuEventCreate") for _ in range(2))
    try:
        check(cu.cuEventRecord(start, cu.CUstream(0)), "cuEventRecord")
        for _ in range(number):
            kernel.launch(pointers)
        check(cu.cuEventRecord(end, cu.CUstream(0)), "cuEventRecord")
        check(cu.cuEventSynchronize(end), f"kernel {kernel.name}")
        return float(check(cu.cuEventElapsedTime(start, end), "cuEventElapsedTime")) / 1e3
    finally:
        cu.cuEventDestroy(start)
        cu.cuEventDestroy(end)


answer = answering(DeviceWorker)
compiler = answering(Compiler)
simulated = answering(SimulatedWorker)

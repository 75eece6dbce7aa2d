"""What a measuring worker does with a GPU candidate (ember.tune.worker's requests, for target
"cuda"), in a process of its own and so with a CUDA context of its own: a candidate that corrupts
its context (an illegal address) takes only this process with it, which the runner replaces.

- `answer` (`DeviceWorker`): a candidate is built by NVRTC after the GPU's limits are checked
  (ember.cuda.build_cuda: a ScheduleError names the limit); run on device arrays: the workload's
  inputs uploaded once, its outputs allocated once, both reused by every candidate, so that no
  host copy is timed. Checking: the outputs filled with NaN (values unlike the reference for other
  types), one launch, copied back, compared as on the CPU (ember.tune.worker.compare). Timing:
  `repeats` intervals between CUDA events around back-to-back launches, as many per interval as
  last `min_repeat_s` (doubled from one); the seconds per launch of each.
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


class DeviceWorker(_Worker):
    def __init__(self):
        super().__init__()
        self.device_args = None  # (workload key, the inputs' and outputs' device addresses)

    def reference(self, task):
        """The outputs of the task's own GPU schedule on the device (a large GEMM unscheduled on
        the CPU would take minutes), else of its unscheduled function on the CPU."""
        from ..cuda.driver import check

        if task.default_trace is None:
            return (_unscheduled(self, task),)
        cu = _driver()
        kernel = task.build(task.default_trace, target="cuda")
        pointers = self._device_args(task)
        kernel.launch(pointers)
        check(cu.cuCtxSynchronize(), f"kernel {kernel.name}")
        outputs = self._outputs(task)
        for p, o in zip(pointers[task.num_inputs:], outputs):
            check(cu.cuMemcpyDtoH(o.ctypes.data, p, o.nbytes), "cuMemcpyDtoH")
        return (outputs,)

    def build(self, batch, cid, task, trace_json):
        if batch != self.batch:
            self.batch, self.kernels = batch, {}
        self.kernels[cid] = task.build(Trace.from_json(trace_json), target="cuda")
        return ()

    def run(self, cid, task, reference, flush_cache, repeats, min_repeat_s, cutoff_s=None):
        from ..cuda.driver import check

        cu = _driver()
        kernel = self.kernels.pop(cid)
        pointers = self._device_args(task)
        outputs = pointers[task.num_inputs:]
        if reference is not None:
            host = self._outputs(task, reference)
            for p, o in zip(outputs, host):
                check(cu.cuMemcpyHtoD(p, o.ctypes.data, o.nbytes), "cuMemcpyHtoD")
            kernel.launch(pointers)
            check(cu.cuCtxSynchronize(), f"kernel {kernel.name}")
            for p, o in zip(outputs, host):
                check(cu.cuMemcpyDtoH(o.ctypes.data, p, o.nbytes), "cuMemcpyDtoH")
            compare(host, reference, [p.name for p in task.func.params[task.num_inputs:]])
        first = _timed(kernel, pointers, 1)
        if cutoff_s is not None and first > cutoff_s:
            return ((first,),)
        number = 1
        while number < MAX_LAUNCHES_PER_REPEAT and number * first < min_repeat_s:
            number *= 2
        return ([_timed(kernel, pointers, number) / number for _ in range(repeats)],)

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
simulated = answering(SimulatedWorker)

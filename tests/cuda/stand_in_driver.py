"""A stand-in for the CUDA driver whose device memory is host memory: the driver path's
bookkeeping (the arena, uploads, CUDA graphs, events) checked without a GPU, each kernel run on
the interpreter with GPU semantics."""

import ctypes
import time
from types import SimpleNamespace

import numpy as np

from ember.cuda import driver, kernel
from ember.cuda.simt import SimtKernel
from ember.runtime.args import evaluate
from ember.runtime.interpreted import _view
from ember.tir import dtype as dt


class HostDriver:
    """The driver calls CUDAModel makes, over host memory: an allocation is a NumPy buffer, a copy
    a memmove; `launches` counts the kernels run (each on the interpreter, GPU semantics). A stream
    being captured records its launches and copies instead (a graph: the recorded list), which
    `cuGraphLaunch` runs; `graph_launches` counts those. `refuse_capture`: the error
    cuStreamBeginCapture returns (0: none)."""

    class CUresult:
        CUDA_SUCCESS = 0

    class CUpointer_attribute:  # noqa: N801 (the driver's name)
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 8

    class CUstream_flags:  # noqa: N801
        CU_STREAM_NON_BLOCKING = 1

    class CUstreamCaptureMode:  # noqa: N801
        CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1

    def __init__(self, ordinal_of_arrays=0):
        self.buffers, self.launches, self.ordinal_of_arrays = {}, 0, ordinal_of_arrays
        self.capturing, self.streams, self.graph_launches, self.refuse_capture = {}, 0, 0, 0

    @staticmethod
    def CUstream(handle):  # noqa: N802
        return handle

    def run(self, stream, work):
        """Do `work` now, or record it when the stream is being captured."""
        if stream in self.capturing:
            self.capturing[stream].append(work)
        else:
            work()

    def cuMemAlloc(self, n):  # noqa: N802
        buf = np.empty(n, np.uint8)
        self.buffers[buf.ctypes.data] = buf
        return 0, buf.ctypes.data

    def cuMemFree(self, p):  # noqa: N802
        self.buffers.pop(int(p))
        return (0,)

    def cuMemcpyHtoD(self, dst, src, n):  # noqa: N802
        ctypes.memmove(dst, src, n)
        return (0,)

    cuMemcpyDtoH = cuMemcpyHtoD

    def cuMemcpyDtoDAsync(self, dst, src, n, stream):  # noqa: N802
        self.run(stream, lambda: ctypes.memmove(dst, src, n))
        return (0,)

    cuMemcpyHtoDAsync = cuMemcpyDtoDAsync

    def cuStreamSynchronize(self, stream):  # noqa: N802
        return (0,)

    def cuPointerGetAttribute(self, attribute, address):  # noqa: N802
        return 0, self.ordinal_of_arrays

    def cuStreamCreate(self, flags):  # noqa: N802
        self.streams += 1
        return 0, 1000 + self.streams

    def cuStreamBeginCapture(self, stream, mode):  # noqa: N802
        if self.refuse_capture:
            return (self.refuse_capture,)
        self.capturing[stream] = []
        return (0,)

    def cuStreamEndCapture(self, stream):  # noqa: N802
        return 0, self.capturing.pop(stream)

    def cuGraphInstantiate(self, graph, flags):  # noqa: N802
        return 0, tuple(graph)

    def cuGraphLaunch(self, executable, stream):  # noqa: N802
        self.graph_launches += 1
        for work in executable:
            work()
        return (0,)

    def cuGraphDestroy(self, graph):  # noqa: N802
        return (0,)

    cuGraphExecDestroy = cuStreamDestroy = cuGraphDestroy

    def cuEventCreate(self, flags):  # noqa: N802
        return 0, [0.0]  # the host's time when the stream reached it

    def cuEventRecord(self, event, stream):  # noqa: N802
        self.run(stream, lambda: event.__setitem__(0, time.perf_counter()))
        return (0,)

    def cuEventSynchronize(self, event):  # noqa: N802
        return (0,)

    def cuEventElapsedTime(self, start, end):  # noqa: N802
        return 0, (end[0] - start[0]) * 1e3

    cuEventDestroy = cuGraphDestroy

    def cuGetErrorName(self, err):  # noqa: N802
        return 0, b"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"

    def cuGetErrorString(self, err):  # noqa: N802
        return 0, b"operation not permitted when stream is capturing"


class DeviceArray:
    """A GPU array as CuPy shows one (__cuda_array_interface__), over the stand-in's memory."""

    def __init__(self, host: np.ndarray, cu: HostDriver):
        _, self.address = cu.cuMemAlloc(host.nbytes)
        ctypes.memmove(self.address, host.ctypes.data, host.nbytes)
        self.__cuda_array_interface__ = {"shape": host.shape, "typestr": host.dtype.str, "strides": None,
                                         "data": (self.address, False), "version": 3}


def install(monkeypatch, multiprocessors: int = 132) -> HostDriver:
    """A HostDriver in place of the driver (and the device, an sm_90 of `multiprocessors` SMs),
    its launches interpreted."""
    cu = HostDriver()

    def launch(self, pointers, stream=0, sizes=(), report=True):  # the kernel on the interpreter, at those addresses
        func, pointers, sizes = self.func, list(pointers), list(sizes)
        env = dict(zip(func.size_vars, sizes))

        def run():
            arrays = [_view(p, int(np.prod([evaluate(d, env) for d in b.shape])), np.dtype(dt.to_numpy(b.dtype)))
                      for b, p in zip(func.params, pointers)]
            SimtKernel(func).pyfunc(*arrays, *sizes)
            cu.launches += 1

        cu.run(stream, run)

    monkeypatch.setattr(driver, "driver", lambda: cu)
    monkeypatch.setattr(driver, "device", lambda ordinal=0: SimpleNamespace(
        ordinal=0, activate=lambda: None, arch="sm_90", multiprocessors=multiprocessors, shared_per_block=48 * 1024,
        shared_per_block_optin=227 * 1024, threads_per_block=1024, registers_per_block=64 * 1024))
    monkeypatch.setattr(kernel.CUDAKernel, "launch", launch)
    return cu


def on_stand_in(cm):
    """The model as never called: its device state (the weights, the arena, graphs) was an earlier
    stand-in driver's."""
    cm._open(cm._entry)
    return cm

"""A kernel's call path against a stand-in for the driver API (any machine): NumPy arguments
copied in and written ones copied back, GPU arrays (`__cuda_array_interface__`) passed by
pointer, the launch's grid, block and argument array, and the errors of bad arguments."""

import ctypes
import importlib
import threading

import gpu_kernels as kernels
import numpy as np
import pytest
from gpu_kernels import needs_nvrtc

import ember
import ember.triton as triton
import ember.triton.language as tl
from ember.cuda import driver as cuda_driver
from ember.errors import ArgumentTypeError, DeviceError, IndexOutOfRangeError, ShapeError

tile_launch = importlib.import_module("ember.triton.compiler.launch")  # (the package's `launch` is its function)


class FakeDriver:
    """The driver calls a kernel's call makes, on host memory; a launch fills its last argument
    (the output) with 7.0."""

    class CUresult:
        CUDA_SUCCESS = 0

    CUstream = int

    def __init__(self):
        self.memory: dict[int, ctypes.Array] = {}
        self.launches: list = []
        self.freed: list[int] = []
        self.status = (ctypes.c_int64 * 4)()  # the module's ember_status (ember.cuda.checks)
        self.fails = None  # what a launch records there: (what, index, size, parameter)

    def cuModuleGetGlobal(self, module, name):
        assert name == b"ember_status"
        return 0, ctypes.addressof(self.status), ctypes.sizeof(self.status)

    def cuMemsetD8(self, ptr, value, size):
        ctypes.memset(ptr, value, size)
        return (0,)

    def cuCtxSetCurrent(self, context):
        return (0,)

    def cuModuleLoadData(self, binary):
        return 0, "module"

    def cuModuleGetFunction(self, module, name):
        return 0, name.decode()

    def cuMemAlloc(self, size):
        buf = ctypes.create_string_buffer(size)
        self.memory[ctypes.addressof(buf)] = buf
        return 0, ctypes.addressof(buf)

    def cuMemcpyHtoD(self, dst, src, size):
        ctypes.memmove(dst, src, size)
        return (0,)

    def cuMemcpyDtoH(self, dst, src, size):
        ctypes.memmove(dst, src, size)
        return (0,)

    def cuStreamSynchronize(self, stream):
        return (0,)

    def cuMemFree(self, ptr):
        self.freed.append(ptr)
        return (0,)

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        n = len(self.expected_params)
        slots = (ctypes.c_void_p * n).from_address(params)
        pointers = [ctypes.c_void_p.from_address(slots[k]).value for k in range(n)]
        self.launches.append((function, (gx, gy, gz), (bx, by, bz), stream, pointers))
        out = (ctypes.c_float * self.out_size).from_address(pointers[-1])
        for k in range(self.out_size):
            out[k] = 7.0
        if self.fails:
            self.status[:] = self.fails
        return (0,)


class GPUArray:
    """A device array as CuPy shows one: host memory standing in for the GPU's."""

    def __init__(self, array: np.ndarray):
        self.array = array
        self.__cuda_array_interface__ = {"shape": array.shape, "typestr": array.dtype.str, "strides": None,
                                         "data": (array.ctypes.data, False), "version": 3}


@pytest.fixture
def fake(monkeypatch):
    fake = FakeDriver()
    device = cuda_driver.Device(0, None, None, "stand-in", (9, 0), 48 * 1024, 227 * 1024, 1024, 132, 64 * 1024)
    monkeypatch.setattr(cuda_driver, "driver", lambda: fake)
    monkeypatch.setattr(cuda_driver, "device", lambda ordinal=0: device)
    return fake


@needs_nvrtc
def test_numpy_arguments_are_copied_in_and_written_ones_back(fake):
    s, args, _ = kernels.elementwise(1024, threads=128)
    f = ember.build(s, args, target="cuda", arch="sm_90")
    fake.expected_params, fake.out_size = ["A", "B", "C"], 1024
    a, b, c = np.ones(1024, "float32"), np.full(1024, 2.0, "float32"), np.zeros(1024, "float32")
    f(a, b, c)
    ((function, grid, block, stream, pointers),) = fake.launches
    assert (function, grid, block, stream) == (f.symbol, (2, 1, 1), (128, 1, 1), 0)
    assert all(p in fake.memory for p in pointers)  # device copies, not the host arrays
    assert (c == 7.0).all() and (a == 1.0).all() and (b == 2.0).all()
    assert sorted(fake.freed) == sorted(pointers)


@needs_nvrtc
def test_gpu_arrays_are_passed_in_place(fake):
    s, args, _ = kernels.elementwise(1024, threads=128)
    f = ember.build(s, args, target="cuda", arch="sm_90")
    fake.expected_params, fake.out_size = ["A", "B", "C"], 1024
    a, b, c = (GPUArray(np.zeros(1024, "float32")) for _ in range(3))
    f(a, b, c, stream=5)
    ((_, _, _, stream, pointers),) = fake.launches
    assert pointers == [x.array.ctypes.data for x in (a, b, c)] and stream == 5
    assert (c.array == 7.0).all() and not fake.memory


@needs_nvrtc
def test_bad_arguments_are_named(fake):
    """Before any launch, also after a call that worked out what each argument must be."""
    s, args, _ = kernels.elementwise(1024, threads=128)
    f = ember.build(s, args, target="cuda", arch="sm_90")
    fake.expected_params, fake.out_size = ["A", "B", "C"], 1024
    a = np.zeros(1024, "float32")
    f(a, a, np.zeros(1024, "float32"))
    with pytest.raises(ShapeError, match=r"argument 1 \(B\) has shape \(512,\), expected \(1024,\)"):
        f(a, GPUArray(np.zeros(512, "float32")), a)
    with pytest.raises(ArgumentTypeError, match="takes 3 arrays, got 2"):
        f(a, a)
    with pytest.raises(ArgumentTypeError, match="a CUDA kernel takes GPU arrays"):
        f(a, [0.0] * 1024, a)
    with pytest.raises(ArgumentTypeError, match="is float64, expected float32"):
        f(a, a.astype("float64"), a)
    with pytest.raises(ArgumentTypeError, match=r"argument 2 \(C\) is not contiguous"):
        f(a, a, np.zeros(2048, "float32")[::2])
    assert len(fake.launches) == 1


@triton.jit
def scale(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * alpha, mask=offs < n)


@pytest.fixture
def tile_launches(fake):
    """What each launch of `scale` passed: (grid, stream, the parameters' address, their values:
    x, out, n, alpha, the checks' two pointers, the grid's sizes)."""
    seen = []
    kinds = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p,
             ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]

    def launch(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        slots = (ctypes.c_void_p * len(kinds)).from_address(params)
        seen.append(((gx, gy, gz), stream, params, [t.from_address(slots[k]).value for k, t in enumerate(kinds)]))
        return (0,)

    fake.cuLaunchKernel = launch
    return seen


@needs_nvrtc
def test_a_tile_kernels_later_launches_write_only_their_values(tile_launches, monkeypatch):
    """A launch of a remembered signature neither binds nor specializes again (the direct path):
    the addresses, scalars and grid go into the slots the first launch made, on the `stream=`
    given, else the default stream."""
    x, out = GPUArray(np.zeros(1000, "float32")), GPUArray(np.zeros(1000, "float32"))
    y = GPUArray(np.zeros(1000, "float32"))
    scale[(4,)](x, out, 1000, 0.5, BLOCK=256)  # (the full path, remembered)
    for step in ("specialize", "run"):  # the full path's steps: the later launches reach neither
        monkeypatch.setattr(tile_launch, step, None)
    scale[(triton.cdiv(999, 256),)](y, out, 999, 1.5, BLOCK=256)
    scale[(4,)](x, y, 1000, 2.0, BLOCK=256, stream=9)
    address = lambda a: a.array.ctypes.data  # noqa: E731
    assert [(grid, stream, values) for grid, stream, _, values in tile_launches] == [
        ((4, 1, 1), 0, [address(x), address(out), 1000, 0.5, None, None, 4, 1, 1]),
        ((4, 1, 1), 0, [address(y), address(out), 999, 1.5, None, None, 4, 1, 1]),
        ((4, 1, 1), 9, [address(x), address(y), 1000, 2.0, None, None, 4, 1, 1])]
    assert len({params for _, _, params, _ in tile_launches}) == 1  # the same slots each time


@needs_nvrtc
def test_a_tile_launch_over_an_empty_grid_launches_nothing_and_the_next_one_runs(tile_launches):
    x, out = GPUArray(np.zeros(32, "float32")), GPUArray(np.zeros(32, "float32"))
    scale[(0,)](x, out, 32, 3.0, BLOCK=32)  # (remembered, its launcher never called)
    scale[(0,)](x, out, 32, 3.0, BLOCK=32)
    scale[(1,)](x, out, 32, 3.0, BLOCK=32)
    assert [values for _, _, _, values in tile_launches] == [[x.array.ctypes.data, out.array.ctypes.data, 32, 3.0,
                                                              None, None, 1, 1, 1]]


@needs_nvrtc
def test_a_tile_launch_still_refuses_host_arrays_and_another_gpu(tile_launches):
    x, out = GPUArray(np.zeros(64, "float32")), GPUArray(np.zeros(64, "float32"))
    scale[(1,)](x, out, 64, 2.0, BLOCK=64)
    with pytest.raises(ArgumentTypeError, match="argument 'x_ptr' is in host memory"):
        scale[(1,)](np.zeros(64, "float32"), out, 64, 2.0, BLOCK=64, target="cuda")
    out.device = type("Device", (), {"id": 1})()  # (CuPy's: the array's GPU)
    with pytest.raises(ArgumentTypeError, match="argument 'out_ptr' is on cuda:1, the tensors before it on cuda:0"):
        scale[(1,)](x, out, 64, 2.0, BLOCK=64)
    assert len(tile_launches) == 1


def test_each_thread_packs_its_own_parameters():
    local, types = threading.local(), [ctypes.c_void_p, ctypes.c_int64]
    mine = cuda_driver.Params.mine(local, types)
    other = []
    thread = threading.Thread(target=lambda: other.append(cuda_driver.Params.mine(local, types)))
    thread.start()
    thread.join()
    assert cuda_driver.Params.mine(local, types) is mine and other[0] is not mine
    mine.write([1 << 20, 7])
    assert [ctypes.c_void_p.from_address(mine.array[0]).value, ctypes.c_int64.from_address(mine.array[1]).value] \
        == [1 << 20, 7]


def test_a_failed_driver_call_names_it_and_the_error(fake):
    fake.cuGetErrorName = lambda err: (0, b"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
    fake.cuGetErrorString = lambda err: (0, b"too many resources requested for launch")
    with pytest.raises(DeviceError, match="launching kernel k failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"):
        cuda_driver.check((701,), "launching kernel k")


@needs_nvrtc
def test_a_failed_check_is_raised_after_the_launch(fake):
    """An index read from a tensor out of its axis (always checked), and in debug mode any
    access out of its buffer: the kernel records the first in its status, which the call reads,
    clears and raises."""
    s, args, _ = kernels.elementwise(1024, threads=128)
    f = ember.build(s, args, target="cuda", arch="sm_90", debug=True)
    assert f.checks and "ember_in_bounds(" in f.source and "float4" not in f.source  # lanes one by one
    fake.expected_params, fake.out_size = ["A", "B", "C"], 1024
    a = np.zeros(1024, "float32")
    fake.fails = (3, 1030, 1024, 1)
    with pytest.raises(DeviceError, match=r"kernel main accessed B\[1030\], outside its 1024 elements"):
        f(a, a, np.zeros(1024, "float32"))
    assert list(fake.status) == [0, 0, 0, 0]  # cleared for the next call
    fake.fails = (2, -12, 10, -1)
    with pytest.raises(IndexOutOfRangeError, match="index -12 is out of range for an axis of size 10"):
        f(a, a, np.zeros(1024, "float32"))
    fake.fails = None
    f(a, a, np.zeros(1024, "float32"))
    assert not ember.build(s, args, target="cuda", arch="sm_90").checks  # no checks unless asked

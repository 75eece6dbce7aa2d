"""Whole models for target "cuda": every kernel scheduled by the GPU family and built by NVRTC
(sm_90 without a GPU), the model run on the interpreter with GPU semantics
(Target("cuda", simulate=True)) and checked against torch at 1e-4; on a GPU, through the driver
(skipped with the reason where there is none)."""

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gpu_kernels import needs_gpu, needs_nvrtc

import ember
from ember.errors import ArgumentTypeError, CompileError, ConfigError, DeviceError
from ember.target import Target

pytestmark = needs_nvrtc
SIMULATED = Target("cuda", simulate=True)
TOL = 1e-4


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc(y.flatten(1))


class Block(torch.nn.Module):
    """A transformer block: layer norm, causal attention over 2 heads, a GELU MLP, residuals."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # unfolded for the GPU
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


MODELS = {
    "mlp": (lambda: torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)),
            lambda: torch.randn(2, 16)),
    "cnn": (SmallCNN, lambda: torch.randn(1, 2, 6, 6)),
    "transformer block": (Block, lambda: torch.randn(1, 4, 16)),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def simulated(request):
    torch.manual_seed(0)
    make, example = MODELS[request.param]
    model = make().eval()
    return model, ember.compile(model, (example(),), target=SIMULATED), example


def test_a_model_runs_with_gpu_semantics_and_matches_torch(simulated):
    model, cm, example = simulated
    x = example()  # fresh data, not the traced example's
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(cm(x).numpy(), expected, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(cm(x.numpy()), expected, rtol=TOL, atol=TOL)  # NumPy in, NumPy out
    assert cm.source.count("__global__") == len(cm.kernels)  # every kernel CUDA C, built by NVRTC
    assert "with GPU semantics" in cm.summary()
    with pytest.raises(ConfigError, match="is simulated"):
        cm.save("unused")


def test_the_cuda_target_takes_no_cpu_layouts_or_packing():
    torch.manual_seed(1)
    model = SmallCNN().eval()
    cm = ember.compile(model, (torch.randn(1, 2, 6, 6),), target=SIMULATED)
    ops = {op for k in cm.kernels for op in k.ops}
    assert "conv2d" in ops and not any("nchwc" in op or "packed" in op for op in ops)
    assert not {"pad_gemv", "layout", "pack_weights", "fold_attention"} & {r.name for r in cm.stats.passes}


def test_a_kernel_without_a_gpu_schedule_is_named_at_compile_time():
    class Total(torch.nn.Module):
        def forward(self, x):
            return (x * 2).sum()  # a scalar: no block or thread to bind

    with pytest.raises(CompileError, match=r"mul \+ sum.*no GPU schedule"):
        ember.compile(Total(), (torch.randn(3, 4),), target=SIMULATED)


def test_symbolic_sizes_are_refused_at_compile_time():
    x = torch.randn(2, 16)
    with pytest.raises(CompileError, match="symbolic sizes .* do not compile for target 'cuda' yet"):
        ember.compile(torch.nn.ReLU(), (x,), dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},),
                      target=SIMULATED)


def test_a_lower_precision_is_refused_before_anything_compiles():
    with pytest.raises(ConfigError, match="precision='bf16' does not compile for target 'cuda' yet"):
        ember.compile(torch.nn.ReLU(), (torch.randn(2, 3),), target=SIMULATED, precision="bf16")
    with pytest.raises(ConfigError, match="weights='int8' does not compile for target 'cuda' yet"):
        ember.compile(torch.nn.Linear(3, 4), (torch.randn(2, 3),), target=SIMULATED, weights="int8")


def test_simulate_is_for_the_cuda_target_only():
    with pytest.raises(ConfigError, match="simulate=True is for target 'cuda'"):
        Target("c", simulate=True)


@pytest.fixture(scope="module")
def on_gpu():
    torch.manual_seed(2)
    model = MODELS["mlp"][0]().eval()
    return model, ember.compile(model, (torch.randn(2, 16),), target="cuda")


def test_without_a_gpu_a_call_is_a_device_error_not_the_compile(on_gpu):
    from gpu_kernels import gpu_missing

    if gpu_missing() is None:
        pytest.skip("this machine has a GPU")
    _, cm = on_gpu
    assert "from Python through the driver API" in cm.summary()
    with pytest.raises(DeviceError):
        cm(torch.randn(2, 16))


@needs_gpu
def test_on_the_gpu_torch_cuda_tensors_in_place_and_numpy_copied(on_gpu):
    model, cm = on_gpu
    x = torch.randn(2, 16)
    with torch.no_grad():
        expected = model(x).numpy()
    got = cm(x.cuda())
    assert got.is_cuda
    np.testing.assert_allclose(got.cpu().numpy(), expected, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(cm(x.numpy()), expected, rtol=TOL, atol=TOL)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        got = cm(x.cuda(), stream=stream)
    stream.synchronize()
    np.testing.assert_allclose(got.cpu().numpy(), expected, rtol=TOL, atol=TOL)


@needs_gpu
def test_on_the_gpu_a_cpu_tensor_is_refused_before_any_launch(on_gpu):
    _, cm = on_gpu
    with pytest.raises(ember.errors.ArgumentTypeError, match=r"is on cpu.*to\('cuda:0'\)"):
        cm(torch.randn(2, 16))


# -- the driver path's bookkeeping on a stand-in driver whose device memory is host memory --------
class HostDriver:
    """The driver calls CUDAModel makes, over host memory: an allocation is a NumPy buffer, a copy
    a memmove; `launches` counts the kernels run (each on the interpreter, GPU semantics)."""

    class CUresult:
        CUDA_SUCCESS = 0

    class CUpointer_attribute:  # noqa: N801 (the driver's name)
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 8

    def __init__(self, ordinal_of_arrays=0):
        self.buffers, self.launches, self.ordinal_of_arrays = {}, 0, ordinal_of_arrays

    @staticmethod
    def CUstream(handle):  # noqa: N802
        return handle

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
        return self.cuMemcpyHtoD(dst, src, n)

    def cuStreamSynchronize(self, stream):  # noqa: N802
        return (0,)

    def cuPointerGetAttribute(self, attribute, address):  # noqa: N802
        return 0, self.ordinal_of_arrays


class DeviceArray:
    """A GPU array as CuPy shows one (__cuda_array_interface__), over the stand-in's memory."""

    def __init__(self, host: np.ndarray, cu: HostDriver):
        _, self.address = cu.cuMemAlloc(host.nbytes)
        ctypes.memmove(self.address, host.ctypes.data, host.nbytes)
        self.__cuda_array_interface__ = {"shape": host.shape, "typestr": host.dtype.str, "strides": None,
                                         "data": (self.address, False), "version": 3}


@pytest.fixture
def host_driver(monkeypatch):
    from ember.cuda import driver, kernel
    from ember.cuda.simt import SimtKernel
    from ember.runtime.interpreted import _view
    from ember.tir import dtype as dt
    from ember.tir.expr import as_int

    cu = HostDriver()

    def launch(self, pointers, stream=0):  # the kernel on the interpreter, at the addresses given
        arrays = [_view(p, int(np.prod([as_int(d) for d in b.shape])), np.dtype(dt.to_numpy(b.dtype)))
                  for b, p in zip(self.func.params, pointers)]
        SimtKernel(self.func).pyfunc(*arrays)
        cu.launches += 1

    monkeypatch.setattr(driver, "driver", lambda: cu)
    monkeypatch.setattr(driver, "device", lambda ordinal=0: SimpleNamespace(ordinal=0, activate=lambda: None))
    monkeypatch.setattr(kernel.CUDAKernel, "launch", launch)
    return cu


def test_the_driver_path_runs_the_program_over_one_arena_and_uploaded_weights(on_gpu, host_driver):
    model, cm = on_gpu
    x = torch.randn(2, 16)
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(cm(x.numpy()), expected, rtol=TOL, atol=TOL)  # NumPy: copied in and out
    arena, weights = cm._arena, cm._weights_on_device
    got = cm(DeviceArray(x.numpy(), host_driver))  # a GPU array: in place
    np.testing.assert_allclose(got, expected, rtol=TOL, atol=TOL)
    assert (cm._arena, cm._weights_on_device) == (arena, weights)  # allocated once
    assert host_driver.launches == 2 * len(cm.kernels)
    assert len(host_driver.buffers) == 3  # the arena, the weights, the GPU array: the call's copies freed
    assert "us of the host per launch" in cm.summary()


def test_the_driver_path_refuses_cpu_tensors_and_other_gpus_before_any_launch(on_gpu, host_driver):
    _, cm = on_gpu
    with pytest.raises(ArgumentTypeError, match=r"is on cpu; model model runs on cuda:0"):
        cm(torch.randn(2, 16))
    host_driver.ordinal_of_arrays = 1
    with pytest.raises(ArgumentTypeError, match="is on cuda:1"):
        cm(DeviceArray(np.ones((2, 16), np.float32), host_driver))
    with pytest.raises(ArgumentTypeError, match="has dtype float64"):
        cm(np.ones((2, 16)))
    assert host_driver.launches == 0

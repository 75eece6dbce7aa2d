"""Whole models for target "cuda": every kernel scheduled by the GPU family and built by NVRTC
(sm_90 without a GPU), the model run on the interpreter with GPU semantics
(Target("cuda", simulate=True)) and checked against torch at 1e-4; on a GPU, through the driver
(skipped with the reason where there is none)."""

import numpy as np
import pytest
import torch
from gpu_kernels import needs_gpu, needs_nvrtc

import ember
from ember.errors import CompileError, ConfigError, DeviceError
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
    """A transformer block: layer norm, attention over 2 heads, a GELU MLP, residuals."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1) @ v
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


def test_the_cuda_target_takes_no_cpu_layouts_or_packing():
    torch.manual_seed(1)
    model = SmallCNN().eval()
    cm = ember.compile(model, (torch.randn(1, 2, 6, 6),), target=SIMULATED)
    ops = {op for k in cm.kernels for op in k.ops}
    assert "conv2d" in ops and not any("nchwc" in op or "packed" in op for op in ops)


def test_a_kernel_without_a_gpu_schedule_is_named_at_compile_time():
    class Total(torch.nn.Module):
        def forward(self, x):
            return (x * 2).sum()  # a scalar: no block or thread to bind

    with pytest.raises(CompileError, match=r"mul \+ sum.*no GPU schedule"):
        ember.compile(Total(), (torch.randn(3, 4),), target=SIMULATED)


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

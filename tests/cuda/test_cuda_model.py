"""Whole models for target "cuda": every kernel scheduled by the GPU family and built by NVRTC
(sm_90 without a GPU), the model run on the interpreter with GPU semantics
(Target("cuda", simulate=True)) and checked against torch at 1e-4; what the target refuses at
compile time. On a GPU: test_cuda_model_on_gpu.py; the driver path's bookkeeping on a stand-in
driver: test_cuda_model_graphs.py, test_cuda_model_symbolic.py, test_cuda_model_artifacts.py."""

import numpy as np
import pytest
import torch
from gpu_kernels import needs_nvrtc
from model_cases import MODELS, SIMULATED, TOL, Block, SmallCNN

import ember
from ember.cuda.limits import local_bytes
from ember.errors import CompileError, ConfigError
from ember.target import Target

pytestmark = needs_nvrtc


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


class Residual(torch.nn.Module):
    """h + linear(norm(h)) at batch 1: the sum may take h's buffer in place (the memory plan)."""

    def __init__(self, d=64):
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(d, d), torch.nn.Linear(d, d), torch.nn.Linear(d, 32)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.c(h + self.b(self.norm(h)))


def test_a_one_row_product_is_split_over_threads_and_stores_each_element_once():
    torch.manual_seed(6)
    model = Residual().eval()
    cm = ember.compile(model, (torch.randn(1, 64),), target=SIMULATED)
    assert any("shares" in t for t in cm.plan.to_json())  # the residual overwritten in place
    assert sum("threadIdx.y" in str(f) for f in cm._entry.funcs.values()) == 3  # the three linear layers
    x = torch.randn(1, 64)
    with torch.no_grad():
        np.testing.assert_allclose(cm(x).numpy(), model(x).numpy(), rtol=TOL, atol=TOL)


def test_attention_is_one_fused_kernel_on_the_gpu(simulated):
    model, cm, _ = simulated
    ops = {op for k in cm.kernels for op in k.ops}
    assert ("flash_attention" in ops) == isinstance(model, Block) and "softmax" not in ops


def test_each_thread_computes_only_the_outputs_it_writes():
    """A convolution fused with its bias and ReLU, a linear layer with its bias: each output
    element is computed in the thread that writes it, not the whole product in every thread
    (which the driver refuses to launch once it passes a thread's local memory)."""
    torch.manual_seed(2)
    cm = ember.compile(SmallCNN().eval(), (torch.randn(1, 2, 6, 6),), target="cuda")
    per_thread = {name: local_bytes(k.func)[0] for name, k in cm._entry.kernels.items()}
    assert any(name.startswith("conv2d_gemm_relu") for name in per_thread) and max(per_thread.values()) <= 16, \
        per_thread  # (the convolution as an implicit GEMM, ember.passes.conv_gemm)


def test_the_cuda_target_takes_no_cpu_layouts_or_packing():
    torch.manual_seed(1)
    model = SmallCNN().eval()
    cm = ember.compile(model, (torch.randn(1, 2, 6, 6),), target=SIMULATED)
    ops = {op for k in cm.kernels for op in k.ops}
    assert "conv2d_gemm" in ops and not any("nchwc" in op or "packed" in op for op in ops)
    assert not {"pad_gemv", "layout", "pack_weights", "fold_attention"} & {r.name for r in cm.stats.passes}


def test_a_kernel_scheduled_in_part_only_is_named_at_compile_time():
    class Attend(torch.nn.Module):  # heads of 256 past flash_attention's tiles, causal over symbolic lengths
        def forward(self, q):
            return torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)

    with pytest.raises(CompileError, match=r"kernel \w+ \(scaled_dot_product_attention; .* does not lower for the GPU: "
                                           r"buffer scores is written by bound threads outside the loop over blocks"):
        ember.compile(Attend(), (torch.randn(1, 1, 5, 256),), dynamic_shapes=({2: torch.export.Dim("seq")},),
                      target=SIMULATED, precision="fp16")


def test_quantized_weights_are_refused_before_anything_compiles():
    with pytest.raises(ConfigError, match="weights='int8' does not compile for target 'cuda' yet"):
        ember.compile(torch.nn.Linear(3, 4), (torch.randn(2, 3),), target=SIMULATED, weights="int8")


def test_simulate_is_for_the_cuda_target_only():
    with pytest.raises(ConfigError, match="simulate=True is for target 'cuda'"):
        Target("c", simulate=True)

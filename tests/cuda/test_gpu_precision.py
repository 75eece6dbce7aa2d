"""Models in a lower precision for target "cuda" (precision="tf32" | "fp16" | "bf16"), every
kernel built by NVRTC for sm_90 and run on the interpreter with GPU semantics, against torch in
float32: ||out - ref|| / ||ref|| within 1e-3 for tf32 and 1e-2 for fp16 and bf16; activations
stored in half precision (the kernels' buffers __half / __nv_bfloat16), tf32's operands rounded
in the products' kernels; float32 in, float32 out, and half in, half out."""

import numpy as np
import pytest
import torch
from gpu_kernels import needs_nvrtc
from model_cases import MODELS, SIMULATED

import ember
from ember.errors import ConfigError

pytestmark = needs_nvrtc
TOLERANCE = {"tf32": 1e-3, "fp16": 1e-2, "bf16": 1e-2}
HALF_TYPE = {"fp16": "__half", "bf16": "__nv_bfloat16"}
CASES = [("mlp", "tf32"), ("cnn", "tf32"), ("mlp", "fp16"), ("cnn", "bf16"), ("transformer block", "bf16")]


def relative_error(out, ref) -> float:
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


@pytest.fixture(scope="module", params=CASES, ids=[f"{m}-{p}" for m, p in CASES])
def compiled(request):
    name, precision = request.param
    torch.manual_seed(3)
    make, example = MODELS[name]
    model = make().eval()
    return model, ember.compile(model, (example(),), target=SIMULATED, precision=precision), example, precision


def test_a_model_in_lower_precision_matches_torch_fp32(compiled):
    model, cm, example, precision = compiled
    x = example()  # fresh data
    with torch.no_grad():
        ref = model(x).numpy()
    out = cm(x)
    assert out.dtype == torch.float32  # the user's dtype at the boundary
    assert relative_error(out.numpy(), ref) <= TOLERANCE[precision]
    assert cm.source.count("__global__") == len(cm.kernels)  # every kernel CUDA C, built by NVRTC
    ops = {op for k in cm.kernels for op in k.ops}
    assert "conv2d" not in ops  # the convolutions as implicit GEMMs (conv2d_gemm)
    if precision == "tf32":
        assert "round_tf32" in ops and "cast" not in ops
        assert "m16n16k8.f32.tf32" in cm.source  # the products on Tensor Cores, as TF32
    else:  # the weights and the activations between kernels in half precision, converted at the boundary
        assert "cast" in ops and HALF_TYPE[precision] in cm.source
        assert "mma.sync" in cm.source  # the linear layers on Tensor Cores (mma or wmma), whatever their shapes
        half = {"fp16": np.float16, "bf16": ember.tir.dtype.to_numpy("bfloat16")}[precision]
        assert all(w.dtype == half for w in cm.weights.values() if w.dtype != bool)  # (a causal mask stays bool)


def test_half_inputs_give_half_outputs():
    torch.manual_seed(4)
    make, example = MODELS["mlp"]
    model = make().eval()
    x = example()
    cm = ember.compile(model.half(), (x.half(),), target=SIMULATED, precision="fp16")
    with torch.no_grad():
        ref = model.float()(x).numpy()
    out = cm(x.half())
    assert out.dtype == torch.float16
    assert relative_error(out.float().numpy(), ref) <= TOLERANCE["fp16"]


def test_a_precision_the_gpu_has_not_is_refused_naming_those_it_has():
    with pytest.raises(ConfigError, match=r"precision must be one of \['bf16', 'fp16', 'fp32', 'tf32'\] for target "
                                          r"'cuda', got 'fp8'"):
        ember.compile(torch.nn.ReLU(), (torch.randn(2, 3),), target=SIMULATED, precision="fp8")
    with pytest.raises(ConfigError, match=r"precision must be one of \['bf16', 'fp32'\] for target 'c', got 'fp16'"):
        ember.compile(torch.nn.ReLU(), (torch.randn(2, 3),), precision="fp16")



class TokenMixer(torch.nn.Module):
    """Linear layers over the tokens and products between them: tokens as M, as N and as K."""

    def __init__(self, d=16):
        super().__init__()
        self.inp, self.out = torch.nn.Linear(d, d), torch.nn.Linear(d, d)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.inp(x))
        return self.out((h @ h.transpose(1, 2) / 16) @ h)


def test_a_model_over_symbolic_tokens_in_fp16_runs_its_products_on_tensor_cores():
    """One compile for every token count, every product on Tensor Cores, its tiles padded to the
    size of each call (the causal attention of a symbolic length, in any precision, is not yet
    scheduled for the GPU)."""
    torch.manual_seed(6)
    model = TokenMixer().eval()
    cm = ember.compile(model, (torch.randn(1, 4, 16),), target=SIMULATED, precision="fp16",
                       dynamic_shapes=({1: torch.export.Dim("tokens", max=64)},))
    assert cm.source.count("mma.sync") >= 4 and "int64_t tokens" in cm.source
    for tokens in (1, 37):
        x = torch.randn(1, tokens, 16)
        with torch.no_grad():
            assert relative_error(cm(x).numpy(), model(x).numpy()) <= TOLERANCE["fp16"]

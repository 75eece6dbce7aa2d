"""`ember.compile(..., precision="bf16")`: the weights of linear layers in bf16, their products on
the target's bf16 unit (AVX512-BF16 where this CPU has it) summed in fp32, checked against
torch's fp32 at ||out - ref|| / ||ref|| <= 1e-2; the fallback on targets without the unit; bf16
models in and out; a precision ember does not know."""

import numpy as np
import pytest
import torch

import ember
from ember.errors import ConfigError
from ember.intrinsics import cpu_has
from ember.target import Target

TOL = 1e-2


def rel_error(out, ref) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def nodes(model) -> list[str]:
    return [n.op for n in model.graph.nodes]


@pytest.fixture(scope="module")
def transformer():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True, dropout=0.0).eval()
    x = torch.randn(1, 16, 64)
    with torch.no_grad():
        ref = layer(x).numpy()
    return layer, x, ref, ember.compile(layer, (x,), precision="bf16")


def test_transformer_layer_in_bf16(transformer):
    layer, x, ref, compiled = transformer
    assert nodes(compiled).count("gemm_bf16") == 4  # QKV, the attention's output, the MLP's two
    if cpu_has("avx512_bf16"):
        assert "_mm512_dpbf16_ps(" in compiled.source
    error = rel_error(compiled(x), ref)
    print(f"bf16 transformer layer: ||out - ref|| / ||ref|| = {error:.1e}")
    assert 1e-5 < error <= TOL  # rounded to bf16 (not fp32 throughout), within the bound


def test_without_a_bf16_unit_the_same_products_on_fp32_vectors(transformer):
    """The interpreter and an AVX2 target have no bf16 unit: gemm_bf16 sums the same bf16 products
    on fp32 vectors, so their results are the unit's up to the order of the sums."""
    layer, x, ref, compiled = transformer
    fallback = ember.compile(layer, (x,), precision="bf16", target=Target.x86("avx2"))
    assert "gemm_bf16" in nodes(fallback) and "dpbf16" not in fallback.source
    np.testing.assert_allclose(fallback(x), compiled(x), rtol=1e-4, atol=1e-4)


def test_mlp_on_the_interpreter():
    torch.manual_seed(1)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.LayerNorm(48),
                              torch.nn.Linear(48, 16)).eval()
    x = torch.randn(4, 32)
    with torch.no_grad():
        ref = mlp(x).numpy()
    compiled = ember.compile(mlp, (x,), precision="bf16", target="python")
    assert nodes(compiled).count("gemm_bf16") == 2
    assert rel_error(compiled(x), ref) <= TOL


def test_bf16_model_in_and_out():
    torch.manual_seed(2)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32)).eval()
    x = torch.randn(8, 64)
    with torch.no_grad():
        ref = mlp(x).numpy()
    compiled = ember.compile(mlp.to(torch.bfloat16), (x.to(torch.bfloat16),), precision="bf16")
    out = compiled(x.to(torch.bfloat16))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert rel_error(out.float(), ref) <= TOL


def test_unknown_precision():
    with pytest.raises(ConfigError, match="precision must be one of .*'bf16'.* got 'fp16'"):
        ember.compile(torch.nn.Linear(4, 4), (torch.randn(2, 4),), precision="fp16")

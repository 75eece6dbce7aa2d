"""`ember.compile(..., precision="bf16")`: the weights of linear layers and convolutions in bf16,
their products on the target's bf16 unit (AVX512-BF16 where this CPU has it) summed in fp32, checked against
torch's fp32 at ||out - ref|| / ||ref|| <= 1e-2; the fallback on targets without the unit; bf16
models in and out; a precision ember does not know."""

import re

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


def unit_calls(model) -> list[str]:
    """The calls of a bf16 unit's tile function (AVX512-BF16's or AMX's, a convolution's) in the model's C."""
    return re.findall(r"ember_(?:bf16_avx512_tile|amx_bf16_tile|bf16conv)_\w+\(\(const void\*\)", model.source)


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
    if cpu_has("avx512_bf16"):  # (or AMX, ahead of it, where the CPU has both)
        assert len(unit_calls(compiled)) == 4
    error = rel_error(compiled(x), ref)
    print(f"bf16 transformer layer: ||out - ref|| / ||ref|| = {error:.1e}")
    assert 1e-5 < error <= TOL  # rounded to bf16 (not fp32 throughout), within the bound


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.bn = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16)
        self.c2, self.c3 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.Conv2d(32, 32, 3, padding=1)
        self.dw = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.fc = torch.nn.Linear(32, 16)

    def forward(self, x):
        x = torch.relu(self.bn(self.c1(x)))
        x = torch.relu(self.c2(x))
        x = torch.nn.functional.relu6(x + self.c3(x))
        return self.fc(self.dw(x).mean((2, 3)))


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(3)
    model = SmallCNN().eval()
    with torch.no_grad():
        model.bn.weight.uniform_(0.5, 1.5)
        model.bn.running_var.uniform_(0.5, 1.5)
        x = torch.randn(1, 3, 16, 16)
        ref = model(x).numpy()
    return model, x, ref


def test_small_cnn_in_bf16(cnn, tmp_path):
    """The blocked convolutions in bf16 where this CPU has AVX512-BF16 (c3 with the residual add
    and ReLU6 fused); the first layer (a plain input of 3 channels) and the depthwise one fp32.
    Saved and loaded, the same results. (Winograd, which takes stride-1 3x3 layers in fp32 before
    bf16_convs, is off: this is about the bf16 ones.)"""
    model, x, ref = cnn
    compiled = ember.compile(model, (x,), precision="bf16", disabled_passes=("winograd",))
    convs = 2 if "avx512bf16" in Target().features else 0
    assert nodes(compiled).count("conv2d_nchwc_bf16") == convs and nodes(compiled).count("gemm_bf16") == 1
    assert nodes(compiled).count("conv2d_nchwc") == 4 - convs
    if cpu_has("avx512_bf16"):  # 2 convolutions, 1 linear layer on the unit
        assert len(unit_calls(compiled)) == 3
    error = rel_error(compiled(x), ref)
    print(f"bf16 CNN: ||out - ref|| / ||ref|| = {error:.1e}")
    assert 1e-5 < error <= TOL
    compiled.save(tmp_path / "cnn")
    np.testing.assert_array_equal(ember.load(tmp_path / "cnn")(x), compiled(x))


def test_convolutions_stay_fp32_without_the_unit(cnn):
    """An AVX2 target has no AVX512-BF16: its convolutions stay the fp32 blocked ones (bf16
    products on fp32 vectors would be slower), its linear layer gemm_bf16 on fp32 vectors."""
    model, x, ref = cnn
    fallback = ember.compile(model, (x,), precision="bf16", target=Target.x86("avx2"), disabled_passes=("winograd",))
    assert "conv2d_nchwc_bf16" not in nodes(fallback) and nodes(fallback).count("conv2d_nchwc") == 4
    assert rel_error(fallback(x), ref) <= TOL


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.LayerNorm(48),
                                torch.nn.Linear(48, 16)).eval()
    x = torch.randn(4, 32)
    with torch.no_grad():
        ref = model(x).numpy()
    return model, x, ref, ember.compile(model, (x,), precision="bf16")


def test_without_a_bf16_unit_the_same_products_on_fp32_vectors(mlp):
    """An AVX2 target has no bf16 unit (nor has the interpreter, tests/ops/test_matmul_bf16.py):
    gemm_bf16 sums the same bf16 products on fp32 vectors, the unit's results up to the order of
    the sums."""
    model, x, ref, compiled = mlp
    assert nodes(compiled).count("gemm_bf16") == 2 and rel_error(compiled(x), ref) <= TOL
    fallback = ember.compile(model, (x,), precision="bf16", target=Target.x86("avx2"), disabled_passes=("winograd",))
    assert nodes(fallback).count("gemm_bf16") == 2 and "dpbf16" not in fallback.source
    np.testing.assert_allclose(fallback(x), compiled(x), rtol=1e-5, atol=1e-5)


def test_saved_with_its_bf16_weights(mlp, tmp_path):
    """The packed bf16 weights go to disk as safetensors' BF16 and come back bit for bit."""
    model, x, ref, compiled = mlp
    compiled.save(tmp_path / "mlp")
    loaded = ember.load(tmp_path / "mlp")
    assert nodes(loaded).count("gemm_bf16") == 2
    np.testing.assert_array_equal(loaded(x), compiled(x))


def test_products_kept_fp32_are_reported(mlp, tmp_path, monkeypatch):
    """A linear layer whose K (33) or N (10) the bf16 units do not take stays fp32, and the
    summary and the compile report say which and why, a model cache's hit as its first compile."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EMBER_MODEL_CACHE", "1")
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(33, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)).eval()
    x = torch.randn(4, 33)
    first, again = (ember.compile(model, (x,), precision="bf16") for _ in range(2))
    assert not first.stats.hit and again.stats.hit and nodes(first).count("gemm") == 2
    for cm in (first, again):
        for text in (cm.summary(), cm.compile_report()):
            assert "precision bf16: 2 product(s) kept in float32:" in text
            assert re.search(r"\(4 x 33 x 32\): K=33 is not a multiple of 2", text)
            assert re.search(r"\(4 x 32 x 10\): N=10 is not a multiple of 16", text)
    with torch.no_grad():
        assert rel_error(first(x), model(x).numpy()) <= 1e-5  # (fp32 throughout)
    assert "kept in float32" not in mlp[3].summary()  # (all its products in bf16: nothing to say)


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

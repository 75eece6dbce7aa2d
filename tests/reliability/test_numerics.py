"""Normalizations and reductions on inputs of large and small magnitude give the float64 answer
where it is representable: a float32 row of values near 1e20 has squares past float32's range,
and a layer norm of it used to come out 0. Each operator runs on rows scaled by 1e20, 1e-20,
1e30, rows of mixed scales and rows with one huge outlier, against its float64 NumPy reference
(`check_op`), and against torch where torch is right (it is not for an equal row of 1e20: NaN)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from ember.graph.core import TensorType
from ember.testing import MAGNITUDES, build_op, check_op, magnitude_rows

N = 96  # a row: six vectors of 16 lanes


TOL = {"rtol": 2e-4, "atol": 1e-5}  # outputs of order 1


def _params(shape, count, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype("float32") for _ in range(count)]


@pytest.mark.parametrize("kind", MAGNITUDES)
def test_layer_norm(kind):
    x = magnitude_rows(kind)
    check_op("layer_norm", [x, *_params((N,), 2)], {"eps": 1e-5}, **TOL)


@pytest.mark.parametrize("kind", MAGNITUDES)
def test_rms_norm(kind):
    x = magnitude_rows(kind)
    check_op("rms_norm", [x, *_params((N,), 1)], {"eps": 1e-6}, **TOL)


@pytest.mark.parametrize("kind", MAGNITUDES)
def test_group_and_instance_norm(kind):
    x = magnitude_rows(kind, shape=(4, 6, 4, 4))
    check_op("group_norm", [x, *_params((6,), 2)], {"num_groups": 3}, **TOL)
    check_op("instance_norm", [x, *_params((6,), 2)], {}, **TOL)


@pytest.mark.parametrize("kind", MAGNITUDES)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax(name, kind):
    check_op(name, [magnitude_rows(kind)], {"axis": -1}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["1e18", "1e-15", "1e-20", "mixed", "outlier", "shifted"])
def test_var(kind):
    """The variance itself: 1e36 at 1e18 (whose squared deviations overflowed summed), 1e-40
    (subnormal) at 1e-20, inf where the float64 answer is past float32's range (mixed, outlier)."""
    x = magnitude_rows(kind)
    with np.errstate(over="ignore"):
        check_op("var", [x], {"axes": -1, "correction": 1}, rtol=1e-4, atol=0)
        check_op("var", [x], {"axes": (1,), "keepdims": True, "correction": 0}, rtol=1e-4, atol=0)


def test_rms_norm_of_tiny_values_without_eps():
    """eps 0: the answer is x / rms(x), of order 1, even where x^2 underflows (1e-25)."""
    x = magnitude_rows("1e-25")
    out = check_op("rms_norm", [x], {"eps": 0.0}, **TOL)[0]
    assert np.abs(out).max() > 0.5


@pytest.mark.parametrize("magnitude", [1.0, 1e20, 1e-20, 2.5e38])
def test_an_equal_row_gives_the_bias(magnitude):
    """Variance 0: (x - mean) is exactly 0, so the output is the bias, as torch (which gives NaN
    itself from 1e20 on, its variance overflowing) and float64 give."""
    x = np.full((3, N), magnitude * 1.2345, "float32")
    x[1] = -x[1]
    w, b = _params((N,), 2)
    torch_fn = (lambda x, w, b: torch.nn.functional.layer_norm(x, (N,), w, b)) if magnitude == 1.0 else None
    out = check_op("layer_norm", [x, w, b], {"eps": 1e-5}, **TOL, torch_fn=torch_fn)[0]
    np.testing.assert_array_equal(out, np.broadcast_to(b, x.shape))
    np.testing.assert_array_equal(check_op("rms_norm", [x[:1] * 0], {"eps": 1e-6}, **TOL)[0], 0)


def test_nan_and_inf_propagate_as_in_torch():
    """A NaN in a row makes the row NaN; an infinity makes a layer norm's row NaN (inf - inf) and
    an rms norm's infinite element NaN; the other rows are untouched."""
    x = magnitude_rows("1")
    x[0, 3], x[1, 5], x[2, 9] = np.nan, np.inf, -np.inf
    w, b = _params((N,), 2)
    for name, inputs, attrs, fn in [
        ("layer_norm", [x, w, b], {"eps": 1e-5}, lambda x, w, b: torch.nn.functional.layer_norm(x, (N,), w, b)),
        ("rms_norm", [x, w], {"eps": 1e-6}, lambda x, w: torch.nn.functional.rms_norm(x, (N,), w, 1e-6)),
        ("softmax", [x], {"axis": -1}, lambda x: x.softmax(-1)),
        ("log_softmax", [x], {"axis": -1}, lambda x: x.log_softmax(-1)),
    ]:
        out = check_op(name, inputs, attrs, **TOL, torch_fn=fn)[0]
        assert np.isnan(out[0]).all(), name
        assert np.isfinite(out[3]).all(), name
    with np.errstate(invalid="ignore"):
        out = check_op("var", [x], {"axes": -1}, rtol=1e-5, atol=0)[0]
    assert np.isnan(out[:3]).all() and np.isfinite(out[3])


@pytest.mark.parametrize("scale", [1e10, 1e-10])
def test_attention_softmax(scale):
    """Scores of order 1e20 (q, k of 1e10): the softmax picks the largest, as in float64."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 5, 16)).astype("float32") for _ in range(3))
    check_op("scaled_dot_product_attention", [q * np.float32(scale), k * np.float32(scale), v], {}, rtol=1e-4,
             atol=1e-5)


# -- float16 ------------------------------------------------------------------------------------


def test_float16_statistics():
    """float16 rows of 6e4 (squares past float16, but statistics are float32) and 1e-7 (subnormal)."""
    for magnitude in (6e4 / 4, 1e-7):
        x = (np.random.default_rng(4).standard_normal((4, N)) * magnitude).astype("float16")
        check_op("layer_norm", [x], {"eps": 1e-5}, rtol=2e-3, atol=2e-3)
        check_op("rms_norm", [x], {"eps": 1e-6}, rtol=2e-3, atol=2e-3)


# -- any length, any magnitude ------------------------------------------------------------------


@pytest.fixture(scope="module")
def row_kernels():
    """layer_norm and rms_norm over rows of symbolic length n: one kernel each, run at every size."""
    t = TensorType(("r", "n"), "float32")
    return {name: build_op(name, [t], {"eps": 1e-5}) for name in ("layer_norm", "rms_norm")}


def _reference(x: np.ndarray, centered: bool, eps: float = 1e-5) -> np.ndarray:
    x = x.astype("float64")
    if centered:
        x = x - x.mean(axis=-1, keepdims=True)
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 70), k=st.integers(-30, 30), seed=st.integers(0, 2**32 - 1))
def test_any_length_and_magnitude(row_kernels, n, k, seed):
    """Row lengths on and off the vector width, magnitudes 10^k for k in [-30, 30]."""
    x = (np.random.default_rng(seed).standard_normal((3, n)) * 10.0**k).astype("float32")
    for name, centered in (("layer_norm", True), ("rms_norm", False)):
        (out,) = row_kernels[name].run(x)
        np.testing.assert_allclose(out, _reference(x, centered), rtol=2e-4, atol=2e-5, err_msg=f"{name} n={n} k={k}")


# -- a compiled model against torch in float64 -------------------------------------------------


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(N)
        self.rms = torch.nn.RMSNorm(N, eps=1e-6)

    def forward(self, x):
        return self.norm(x).softmax(-1), self.rms(x), x.log_softmax(-1)


@pytest.fixture(scope="module")
def compiled_block():
    torch.manual_seed(0)
    model = _Block().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p))
    return model, ember.compile(model, (torch.from_numpy(magnitude_rows("1")),))


@pytest.mark.parametrize("kind", ["1e20", "1e-20", "1e30", "mixed", "outlier"])
def test_compiled_model_against_torch_in_float64(compiled_block, kind):
    model, cm = compiled_block
    x = magnitude_rows(kind)
    with torch.no_grad():
        expected = model.double()(torch.from_numpy(x).double())
        model.float()
    for got, want in zip(cm(x), expected):
        np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=2e-4, atol=1e-5, err_msg=kind)

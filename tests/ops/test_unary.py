"""One-input elementwise operators (ember/ops/unary.py) against their NumPy references and
PyTorch, through the C target (and the interpreter for small shapes): floats, float16 (computed
in float32), integers, the exact semantics the catalogue names (round half to even, softplus's
threshold, gelu's two forms), casts, symbolic dims, and the errors of bad inputs."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.testing import build_op, check_op, check_op_sizes

RNG = np.random.default_rng()
POSITIVE = {"log", "sqrt", "rsqrt"}


def data(name: str, shape, dtype: str = "float32") -> np.ndarray:
    """Fresh random inputs in the op's domain: positive for log and sqrt, away from 0 for reciprocal."""
    if name in POSITIVE:
        x = RNG.uniform(0.1, 4, shape)
    elif name == "reciprocal":
        x = RNG.choice([-1, 1], shape) * RNG.uniform(0.2, 3, shape)
    else:
        x = RNG.uniform(-4, 4, shape)
    return x.astype(dtype)


# (name, attributes, the PyTorch function)
FLOAT_OPS = [
    ("neg", None, torch.neg),
    ("abs", None, torch.abs),
    ("exp", None, torch.exp),
    ("log", None, torch.log),
    ("sqrt", None, torch.sqrt),
    ("rsqrt", None, torch.rsqrt),
    ("reciprocal", None, torch.reciprocal),
    ("sin", None, torch.sin),
    ("cos", None, torch.cos),
    ("tanh", None, torch.tanh),
    ("erf", None, torch.erf),
    ("sigmoid", None, torch.sigmoid),
    ("relu", None, F.relu),
    ("silu", None, F.silu),
    ("hardswish", None, F.hardswish),
    ("hardsigmoid", None, F.hardsigmoid),
    ("floor", None, torch.floor),
    ("ceil", None, torch.ceil),
    ("round", None, torch.round),
    ("sign", None, torch.sign),
    ("identity", None, lambda t: t),
    ("gelu", None, F.gelu),
    ("gelu", {"approximate": "tanh"}, lambda t: F.gelu(t, approximate="tanh")),
    ("softplus", None, F.softplus),
    ("softplus", {"beta": 1.0, "threshold": 3.0}, lambda t: F.softplus(t, beta=1.0, threshold=3.0)),
    ("softplus", {"beta": 2.0, "threshold": 5.0}, lambda t: F.softplus(t, beta=2.0, threshold=5.0)),
    ("leaky_relu", None, F.leaky_relu),
    ("leaky_relu", {"alpha": 0.2}, lambda t: F.leaky_relu(t, 0.2)),
    ("elu", None, F.elu),
    ("elu", {"alpha": 0.5}, lambda t: F.elu(t, 0.5)),
    ("clip", {"min": -1.5, "max": 2.0}, lambda t: torch.clamp(t, -1.5, 2.0)),
    ("clip", {"min": 0.5}, lambda t: torch.clamp(t, min=0.5)),
    ("clip", {"max": 0.0}, lambda t: torch.clamp(t, max=0.0)),
]


def _id(v):
    return v if isinstance(v, str) else ("-".join(f"{k}={a}" for k, a in v.items()) if isinstance(v, dict) else "")


@pytest.mark.parametrize("name, attrs, torch_fn", FLOAT_OPS, ids=[f"{n}{_id(a)}" for n, a, _ in FLOAT_OPS])
def test_float32_against_reference_and_torch(name, attrs, torch_fn):
    """(3, 48): the default schedule vectorizes the rows by 16 in C; the interpreter runs it too."""
    x = data(name, (3, 48))
    # torch's float32 erf-GELU is up to 8.8e-7 from the exact value near x = -3.5 (1 + erf cancels);
    # ember's is within 8.3e-8 there, so against torch the error bound is torch's
    torch_atol = 2e-6 if name == "gelu" and not attrs else None
    check_op(name, [x], attrs, rtol=2e-6, atol=1e-6, torch_fn=torch_fn, targets=("c", "python"), torch_atol=torch_atol)


@pytest.mark.parametrize("name, attrs", [("exp", None), ("log", None), ("erf", None), ("gelu", None),
                                         ("gelu", {"approximate": "tanh"}), ("sigmoid", None), ("hardswish", None),
                                         ("softplus", None), ("elu", None), ("clip", {"min": -1, "max": 1}),
                                         ("round", None)])
def test_float16_computed_in_float32(name, attrs):
    """float16 in and out, float32 inside: within one half ulp or so of the exact result."""
    x = data(name, (5, 37), "float16")
    check_op(name, [x], attrs, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("dtype", ["int32", "int8"])
@pytest.mark.parametrize("name, attrs, torch_fn", [
    ("neg", None, torch.neg), ("abs", None, torch.abs), ("relu", None, F.relu), ("sign", None, torch.sign),
    ("identity", None, lambda t: t), ("clip", {"min": -7, "max": 9.0}, lambda t: torch.clamp(t, -7, 9)),
])
def test_integers(name, attrs, torch_fn, dtype):
    """Integer inputs stay integers; the extremes wrap as in NumPy and C (neg and abs of -128)."""
    x = RNG.integers(-100, 100, (4, 33)).astype(dtype)
    x.flat[:2] = np.iinfo(dtype).min, np.iinfo(dtype).max
    check_op(name, [x], attrs, rtol=0, atol=0, torch_fn=None if dtype == "int8" else torch_fn)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, attrs", [("clip", {"min": -1.5, "max": 2.0}), ("relu", None)])
def test_clip_to_constants_keeps_nan(name, attrs, dtype):
    """A bound that is a constant is one maxps/minps (maxpd) a register with the value second (x86
    returns the second operand where either is NaN): NaN stays NaN, infinities clip, as in NumPy."""
    x = RNG.uniform(-4, 4, (2, 48)).astype(dtype)
    x[0, :6] = [np.nan, np.inf, -np.inf, -0.0, 0.0, np.nan]
    x[1, 16:19] = [np.nan, 1.5, np.nan]  # NaN in every vector of 16 lanes
    kernel = build_op(name, [TensorType(x.shape, dtype)], attrs)
    assert re.search(rf"ember_m(ax|in)c_{dtype}x\d+\(", kernel.kernel.source)
    (y,) = kernel.run(x)
    lo, hi = (-1.5, 2.0) if name == "clip" else (0.0, np.inf)
    np.testing.assert_array_equal(y, np.clip(x, lo, hi))


def test_round_is_half_to_even():
    x = data("round", (3, 48))
    x[0, :9] = [-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 4.5]
    out = check_op("round", [x], None, rtol=0, atol=0, torch_fn=torch.round, targets=("c", "python"))[0]
    np.testing.assert_array_equal(out[0, :9], [-4, -2, -2, -0, 0, 2, 2, 4, 4])


def test_softplus_threshold_switches_to_identity():
    """Above threshold / beta softplus is x itself (as in PyTorch), and exp never overflows."""
    x = data("softplus", (3, 48)) * 25
    x[0, :5] = [100.0, 200.0, -200.0, 3.0, 3.001]
    out = check_op("softplus", [x], {"beta": 1.0, "threshold": 3.0}, rtol=2e-6, atol=1e-6,
                   torch_fn=lambda t: F.softplus(t, 1.0, 3.0))[0]
    assert np.all(np.isfinite(out))
    assert out[0, 4] == x[0, 4] and out[0, 3] != x[0, 3]


@pytest.mark.parametrize("name, attrs", [("relu", None), ("sign", None), ("clip", {"min": -1.5, "max": 2.0}),
                                         ("exp", None), ("leaky_relu", None)])
def test_nan_propagates(name, attrs):
    x = data(name, (3, 48))
    x[:, ::5] = np.nan
    out = check_op(name, [x], attrs, rtol=2e-6, atol=1e-6, targets=("c", "python"))[0]
    assert np.isnan(out[:, ::5]).all()


def test_gelu_forms_differ():
    """The erf form and the tanh approximation are different functions."""
    x = data("gelu", (3, 48))
    exact = check_op("gelu", [x], None, rtol=2e-6, atol=1e-6)[0]
    approx = check_op("gelu", [x], {"approximate": "tanh"}, rtol=2e-6, atol=1e-6)[0]
    assert 1e-5 < np.abs(exact - approx).max() < 1e-2


def test_logical_not():
    x = RNG.random((3, 48)) < 0.5
    check_op("logical_not", [x], None, rtol=0, atol=0, torch_fn=torch.logical_not, targets=("c", "python"))


@pytest.mark.parametrize("src, dst", [
    ("float32", "int32"), ("float32", "int8"), ("float32", "bool"), ("float32", "float16"), ("float32", "float64"),
    ("int32", "float32"), ("int32", "int8"), ("int64", "int32"), ("bool", "float32"), ("bool", "int32"),
    ("float16", "float32"), ("float16", "int32"), ("uint8", "float32"), ("int8", "uint8"), ("int8", "float32"),
    ("uint8", "int32"), ("int16", "float32"), ("int8", "int64"), ("uint8", "float64"),
])
def test_cast(src, dst):
    """Floats to integers round toward zero, to bool test nonzero; integers wrap (two's complement)."""
    if src == "bool":
        x = RNG.random((4, 48)) < 0.5
    elif src.startswith("float"):
        x = (RNG.uniform(-100, 100, (4, 48)) * (RNG.random((4, 48)) < 0.9)).astype(src)  # zeros too
    else:
        info = np.iinfo(src)
        x = RNG.integers(max(info.min, -1000), min(info.max, 1000), (4, 48)).astype(src)
    torch_fn = (lambda t: t.to(getattr(torch, dst))) if "uint8" not in (src, dst) and dst != "int8" else None
    check_op("cast", [x], {"dtype": dst}, rtol=0, atol=0, torch_fn=torch_fn)


def test_vector_widening_is_the_units_own():
    """8-bit lanes reach float32 through int32 by one vpmovzxbd where the vector is 16 lanes of
    AVX-512 (GCC widens a 16-lane __builtin_convertvector of bytes in 8-lane pieces else)."""
    source = build_op("cast", [TensorType((4, 64), "uint8")], {"dtype": "float32"}).kernel.source
    found = re.search(r"__builtin_convertvector\(ember_widen_uint8x(\d+)\([^;]*float32x\1\)", source)
    assert found
    if found.group(1) == "16":
        assert "_mm512_cvtepu8_epi32((__m128i)v)" in source


def test_cast_on_interpreter():
    x = RNG.uniform(-9, 9, (2, 5)).astype("float32")
    out = check_op("cast", [x], {"dtype": "int32"}, rtol=0, atol=0, targets=("c", "python"))[0]
    np.testing.assert_array_equal(out, np.trunc(x))


@pytest.mark.parametrize("name, attrs", [("gelu", None), ("clip", {"min": 0.0}), ("cast", {"dtype": "float16"})])
def test_symbolic_batch_one_build_two_sizes(name, attrs):
    x3, x5 = data(name, (3, 24)), data(name, (5, 24))
    check_op_sizes(name, [TensorType(("batch", 24))], attrs, [[x3], [x5]], rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("name, dtype, attrs, match", [
    ("exp", "int32", None, "exp needs a floating-point input, got int32"),
    ("gelu", "int64", None, "gelu needs a floating-point input"),
    ("neg", "bool", None, "neg needs a numeric .* input, got bool"),
    ("logical_not", "float32", None, "logical_not needs a bool input, got float32"),
    ("gelu", "float32", {"approximate": "fast"}, "gelu: approximate must be 'none' or 'tanh', got 'fast'"),
    ("cast", "float32", None, "cast: attribute 'dtype' is required"),
    ("cast", "float32", {"dtype": "float8"}, "cast: unknown dtype 'float8'"),
    ("clip", "int32", {"min": 0.5}, r"clip: min=0.5 is not an integer, and the input is int32"),
    ("clip", "float32", {"max": "1"}, "clip: max must be a number"),
    ("softplus", "float32", {"beta": 0.0}, "softplus: beta must not be 0"),
    ("leaky_relu", "float32", {"slope": 0.1}, r"leaky_relu: unknown attribute\(s\) \['slope'\]"),
])
def test_errors_name_the_op_and_the_problem(name, dtype, attrs, match):
    with pytest.raises(OpTypeError, match=match):
        infer_types(name, [TensorType((2, 3), dtype)], attrs)


def test_arity_is_checked():
    with pytest.raises(OpTypeError, match="relu takes 1 inputs, got 2"):
        infer_types("relu", [TensorType((2,)), TensorType((2,))])

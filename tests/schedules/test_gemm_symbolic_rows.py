"""GEMM kernels over a symbolic number of rows (a prefill compiled for every prompt length): the
linear layer of a transformer as torch exports it (x (1, seq, K) viewed as (seq, K), addmm, viewed
back as (1, seq, N)) fuses into one kernel that takes the register-tiled schedule (the reshapes
around it only add or remove a dimension of size 1, symbolic sizes included) and computes what
NumPy computes in float64 for every row count."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op

RNG = np.random.default_rng()
RTOL, ATOL = 1e-4, 2e-4  # fp32 accumulation over K <= 800 of terms of order 1


def _rand(*shape):
    return RNG.uniform(-1, 1, shape).astype("float32")


def _layer(k: int, n: int, gelu: bool) -> Graph:
    g = Graph()
    x = g.add_input("x", TensorType((1, "seq", k)))
    rows, = add_op(g, "reshape", [x], {"shape": ("seq", k)})
    y, = add_op(g, "gemm", [rows, g.add_constant(_rand(k, n), "w"), g.add_constant(_rand(n), "b")])
    if gelu:
        y, = add_op(g, "gelu", [y], {"approximate": "tanh"})
    out, = add_op(g, "reshape", [y], {"shape": (1, "seq", n)})
    g.set_outputs([out])
    return g


def _float64(g: Graph, x, gelu: bool):
    y = x[0].astype(np.float64) @ g.constants["w"].astype(np.float64) + g.constants["b"]
    if gelu:
        y = 0.5 * y * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y ** 3)))
    return y[None]


@pytest.fixture(scope="module", params=[(777, 288, False), (256, 320, True)], ids=["bias", "bias_gelu"])
def layer(request):
    k, n, gelu = request.param
    g = _layer(k, n, gelu)
    return g, ember.compile(g), gelu


def test_one_tiled_kernel(layer):
    _, cm, _ = layer
    assert len(cm.kernels) == 1
    assert "matmul_local_15" in cm.source  # the 8 x 32 register tile: 16 vector accumulators
    assert "aligned_alloc" not in cm.source  # (the untiled fallback computes the product in a buffer)


@settings(max_examples=12, deadline=None)
@given(seq=st.integers(1, 40))
def test_every_row_count_matches_float64(layer, seq):
    g, cm, gelu = layer
    x = _rand(1, seq, g.inputs[0].type.shape[2])
    np.testing.assert_allclose(cm(x), _float64(g, x, gelu), rtol=RTOL, atol=ATOL, err_msg=f"seq = {seq}")

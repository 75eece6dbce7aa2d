"""GEMV column padding: a single-row gemm with a constant weight of an odd column count is padded
to whole column tiles and sliced back (same outputs, output names kept), one of whole vectors but
no wide tile (1000 columns) to a multiple of the narrowest wide tile; left alone for several rows,
columns in wide tiles, a weight or bias that is an input, and a transposed weight. The padded
kernel against NumPy on the C target."""

import numpy as np
import pytest
from pass_check import check_same, ops

import ember
from ember.graph import Graph, TensorType
from ember.ops.matmul import GEMV_COLS
from ember.ops.nodes import add_op
from ember.passes.pad_gemv import pad_gemv
from ember.target import Target, as_target

RNG = np.random.default_rng()


def _rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


def _gemv(rows=1, n=1001, bias_shape=(1001,), trans_b=False, weight_input=False):
    g = Graph()
    a = g.add_input("a", TensorType((rows, 40)))
    b = g.add_input("b", TensorType((n, 40) if trans_b else (40, n))) if weight_input else \
        g.add_constant(_rand(n, 40) if trans_b else _rand(40, n), "w")
    ins = [a, b] + ([g.add_constant(_rand(*bias_shape), "c")] if bias_shape is not None else [])
    y, = add_op(g, "gemm", ins, {"trans_b": trans_b, "alpha": 0.5, "beta": 2.0}, name="logits")
    z, = add_op(g, "relu", [y])
    g.set_outputs([y, z])
    return g


@pytest.mark.parametrize("bias_shape", [(1001,), (1, 1001), (), None])
def test_odd_columns_are_padded(bias_shape):
    g = _gemv(bias_shape=bias_shape)
    out = pad_gemv(g)
    assert ops(out) == ["gemm", "slice", "relu"]
    gemm = out.nodes[0]
    assert gemm.inputs[1].shape == (40, 1024) and gemm.outputs[0].shape == (1, 1024)
    assert out.nodes[1].outputs[0].name == "logits"
    check_same(g, out)


def test_narrow_tiles_are_padded_to_wide_ones():
    g = _gemv(n=1000, bias_shape=(1000,))
    out = pad_gemv(g, Target(vector_bytes=64))
    assert ops(out) == ["gemm", "slice", "relu"]
    assert out.nodes[0].inputs[1].shape == (40, 1024)
    check_same(g, out)


@pytest.mark.parametrize("kwargs", [{"rows": 2}, {"n": 1024, "bias_shape": (1024,)}, {"weight_input": True},
                                    {"trans_b": True}, {"n": 7, "bias_shape": (7,)}])
def test_left_alone(kwargs):
    g = _gemv(**kwargs)
    assert ops(pad_gemv(g)) == ["gemm", "relu"]


def test_the_padding_follows_the_targets_vectors():
    """Half a vector of columns is the narrowest tile: 1540 = 4 x 385 fills AVX2's 4-column halves
    (padded to wide tiles of 64: 1600), not AVX-512's 8-column ones (padded to GEMV_COLS: 2048);
    the interpreter has no vectors to fill."""
    g = _gemv(n=1540, bias_shape=(1540,))
    assert pad_gemv(g, Target(vector_bytes=64)).nodes[0].inputs[1].shape == (40, 2048)
    assert pad_gemv(g, Target(vector_bytes=32)).nodes[0].inputs[1].shape == (40, 1600)
    assert ops(pad_gemv(g, as_target("python"))) == ["gemm", "relu"]


def test_padded_gemv_computes_the_product():
    g = Graph()
    x = g.add_input("x", TensorType((1, 96)))
    w, c = _rand(96, 3 * GEMV_COLS + 5), _rand(3 * GEMV_COLS + 5)
    y, = add_op(g, "gemm", [x, g.add_constant(w, "w"), g.add_constant(c, "c")])
    g.set_outputs([y])
    model = ember.compile(g)
    assert [k.ops for k in model.kernels][0] == ("gemm",)
    a = _rand(1, 96)
    np.testing.assert_allclose(model(a), a @ w + c, rtol=1e-4, atol=1e-4)

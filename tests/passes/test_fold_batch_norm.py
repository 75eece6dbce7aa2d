"""Batch-norm folding into conv1d/conv2d (with or without bias, grouped), gemm (trans_b, with and
without c) and 2-D matmul, compared with the unfolded graph; left alone when the producer's
output has another user or a parameter is not a constant."""

import numpy as np
import pytest
from pass_check import check_same, ops

from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.fold_batch_norm import fold_batch_norm


def _rand(*shape, positive=False):
    x = np.random.default_rng().standard_normal(shape).astype("float32")
    return np.abs(x) + 0.5 if positive else x


def _bn(g, x, c, **kw):
    params = [g.add_constant(_rand(c), "mean"), g.add_constant(_rand(c, positive=True), "var"),
              g.add_constant(_rand(c), "gamma"), g.add_constant(_rand(c), "beta")]
    return add_op(g, "batch_norm", [x, *params], kw, name="bn")[0]


@pytest.mark.parametrize("op, groups, bias", [("conv2d", 1, True), ("conv2d", 1, False), ("conv2d", 2, True),
                                              ("conv1d", 1, True)])
def test_conv_bn(op, groups, bias):
    spatial = (7, 6) if op == "conv2d" else (9,)
    g = Graph()
    x = g.add_input("x", TensorType((2, 4, *spatial)))
    w = g.add_constant(_rand(6, 4 // groups, *(3,) * len(spatial)), "w")
    ins = [x, w] + ([g.add_constant(_rand(6), "b")] if bias else [])
    y, = add_op(g, op, ins, {"groups": groups, "padding": (1,) * 2 * len(spatial)})
    z, = add_op(g, "relu", [_bn(g, y, 6, eps=1e-3)])
    g.set_outputs([z])
    out = fold_batch_norm(g)
    assert ops(out) == [op, "relu"]
    assert len(out.nodes[0].inputs) == 3
    check_same(g, out, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("trans_b, with_c", [(True, True), (False, True), (True, False)])
def test_gemm_bn(trans_b, with_c):
    g = Graph()
    a = g.add_input("a", TensorType((5, 8)))
    b = g.add_constant(_rand(3, 8) if trans_b else _rand(8, 3), "b")
    ins = [a, b] + ([g.add_constant(_rand(3), "c")] if with_c else [])
    y, = add_op(g, "gemm", ins, {"trans_b": trans_b, "alpha": 0.5, "beta": 2.0})
    g.set_outputs([_bn(g, y, 3)])
    out = fold_batch_norm(g)
    assert ops(out) == ["gemm"] and out.nodes[0].attrs["beta"] == 1.0
    assert [v.name for v in out.outputs] == ["bn"]
    check_same(g, out, rtol=1e-4, atol=1e-5)


def test_matmul_bn_becomes_gemm():
    g = Graph()
    a = g.add_input("a", TensorType((5, 8)))
    y, = add_op(g, "matmul", [a, g.add_constant(_rand(8, 3), "b")])
    g.set_outputs([_bn(g, y, 3)])
    out = fold_batch_norm(g)
    assert ops(out) == ["gemm"]
    check_same(g, out, rtol=1e-4, atol=1e-5)


def test_not_folded_with_other_users_or_variable_weights():
    g = Graph()
    x = g.add_input("x", TensorType((1, 2, 5, 5)))
    w_in = g.add_input("w", TensorType((3, 2, 1, 1)))
    y, = add_op(g, "conv2d", [x, g.add_constant(_rand(3, 2, 1, 1), "w1")])
    other, = add_op(g, "exp", [y])  # y has a second user
    y2, = add_op(g, "conv2d", [x, w_in])  # weights are an input
    g.set_outputs([_bn(g, y, 3), other, _bn(g, y2, 3)])
    out = fold_batch_norm(g)
    assert ops(out) == ops(g)
    check_same(g, out)

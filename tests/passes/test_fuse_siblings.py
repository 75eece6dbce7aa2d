"""Horizontal fusion: sibling gemm/matmul nodes on one input with constant weights become one
product over concatenated weights and a split, computing the same values; nodes that are not
siblings (another input, a weight computed at run time, other attributes, a graph output) stay."""

import numpy as np
import pytest
import torch
from pass_check import check_same, ops

import ember
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.fuse_siblings import fuse_siblings


def _rand(*shape):
    return np.random.default_rng().standard_normal(shape).astype("float32")


def _consume(g, values):
    """One output that uses every value (so none of them is a graph output itself)."""
    total = values[0]
    for v in values[1:]:
        total, = add_op(g, "add", [total, v])
    g.set_outputs([total])


@pytest.mark.parametrize("trans_b", [False, True])
def test_gemm_siblings_with_and_without_bias(trans_b):
    g = Graph()
    x = g.add_input("x", TensorType((6, 8)))
    outs = []
    for n, bias in [(4, (4,)), (4, None), (4, (1, 4))]:
        w = g.add_constant(_rand(n, 8) if trans_b else _rand(8, n), "w")
        ins = [x, w] + ([g.add_constant(_rand(*bias), "b")] if bias else [])
        outs += add_op(g, "gemm", ins, {"trans_b": trans_b, "alpha": 0.5, "beta": 2.0})
    _consume(g, outs)
    out = fuse_siblings(g)
    assert ops(out) == ["gemm", "split", "add", "add"]
    check_same(g, out)


def test_matmul_siblings_of_different_widths_on_a_batched_input():
    g = Graph()
    x = g.add_input("x", TensorType((2, 5, 8)))
    outs = [add_op(g, "matmul", [x, g.add_constant(_rand(8, n), "w")])[0] for n in (3, 7)]
    y, = add_op(g, "concat", outs, {"axis": 2})
    g.set_outputs([y])
    out = fuse_siblings(g)
    assert ops(out) == ["matmul", "split", "concat"]
    assert out.nodes[1].outputs[0].type.shape == (2, 5, 3)
    check_same(g, out)


def test_what_is_not_a_sibling_stays():
    g = Graph()
    x = g.add_input("x", TensorType((4, 8)))
    y = g.add_input("y", TensorType((4, 8)))
    w_run = g.add_input("w", TensorType((8, 8)))
    a, = add_op(g, "gemm", [x, g.add_constant(_rand(8, 8), "w1")], {"alpha": 1.0})
    b, = add_op(g, "gemm", [x, g.add_constant(_rand(8, 8), "w2")], {"alpha": 2.0})  # other attributes
    c, = add_op(g, "gemm", [y, g.add_constant(_rand(8, 8), "w3")], {"alpha": 1.0})  # another input
    d, = add_op(g, "matmul", [x, w_run])  # a weight computed at run time
    e, = add_op(g, "gemm", [x, g.add_constant(_rand(8, 8), "w4"), g.add_constant(_rand(4, 8), "c")],
                {"alpha": 1.0})  # a bias that is not per column
    _consume(g, [a, b, c, d, e])
    assert fuse_siblings(g) is g


def test_a_sibling_that_is_a_graph_output_keeps_its_node():
    g = Graph()
    x = g.add_input("x", TensorType((4, 8)))
    outs = [add_op(g, "matmul", [x, g.add_constant(_rand(8, 8), "w")])[0] for _ in range(3)]
    total, = add_op(g, "add", outs[:2])
    g.set_outputs([total, outs[2]])
    out = fuse_siblings(g)
    assert ops(out) == ["matmul", "split", "matmul", "add"]
    check_same(g, out)


class _SwiGLU(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(32, 32) for _ in range(3))
        self.gate, self.up = torch.nn.Linear(32, 48, bias=False), torch.nn.Linear(32, 48, bias=False)
        self.down = torch.nn.Linear(48, 32)

    def forward(self, x):
        att = torch.nn.functional.scaled_dot_product_attention(self.q(x), self.k(x), self.v(x), is_causal=True)
        h = x + att
        return h + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


def test_attention_projections_and_swiglu_compile_fused():
    model = _SwiGLU().eval()
    x = torch.randn(2, 9, 32)
    cm = ember.compile(model, (x,))
    graph_ops = [n.op for n in cm.graph.nodes]
    assert graph_ops.count("split") == 2, graph_ops  # q/k/v and gate/up
    with torch.no_grad():
        np.testing.assert_allclose(cm(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-5)
    assert "split" not in [n.op for n in ember.compile(model, (x,), disabled_passes=["fuse_siblings"]).graph.nodes]


@pytest.mark.parametrize("bias_shapes, absorbed", [([(3,), (1, 1, 7)], True), ([(), (1,)], True),
                                                   ([(3,), None], False), ([(3,), (5, 7)], False)])
def test_matmul_siblings_biases_are_added_once_before_the_split(bias_shapes, absorbed):
    """ONNX's MatMul + Add(bias) per projection: one product, one add of the biases
    concatenated (one value, () or (1,), is one per column), one split; a sibling without a
    per-column bias keeps the adds where they are."""
    g = Graph()
    x = g.add_input("x", TensorType((2, 5, 8)))
    outs = []
    for n, shape in zip((3, 7), bias_shapes):
        (y,) = add_op(g, "matmul", [x, g.add_constant(_rand(8, n), "w")])
        if shape is not None:
            (y,) = add_op(g, "add", [g.add_constant(_rand(*shape), "b"), y] if n == 7 else [y, g.add_constant(
                _rand(*shape), "b")])
        outs.append(add_op(g, "relu", [y])[0])
    g.set_outputs(add_op(g, "concat", outs, {"axis": 2}))
    out = fuse_siblings(g)
    if absorbed:
        assert ops(out) == ["matmul", "add", "split", "relu", "relu", "concat"]
    else:
        assert ops(out)[:2] == ["matmul", "split"] and "add" in ops(out)
    check_same(g, out)

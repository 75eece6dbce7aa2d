"""Rows sliced out of a matrix product are sliced out of its left operand first (ember.passes.
slice_products): a language model's last-position logits (matmul then slice of the row axis, a
symbolic row count included), a batch axis, a gemm with a per-column bias; left alone when the
slice cuts columns, when the product has another reader or is a graph output, when the bias
varies by row and when the right operand has batch axes of its own. Same outputs (names kept)."""

import numpy as np
import pytest
from pass_check import check_same, ops

import ember
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.dce import dce
from ember.passes.slice_products import slice_products

RNG = np.random.default_rng()
LAST = {"starts": (-1,), "ends": (2**63 - 1,)}


def _rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


def _head(rows=9, slice_attrs=None, op="matmul", bias=None, extra_reader=False, batch_b=False, output=False):
    g = Graph()
    x = g.add_input("x", TensorType((2, rows, 24)))
    w = g.add_constant(_rand(2, 24, 40) if batch_b else _rand(24, 40), "w")
    if op == "gemm":
        x2, = add_op(g, "reshape", [x], {"shape": (2 * rows, 24)})
        ins = [x2, w] + ([g.add_constant(_rand(*bias), "c")] if bias is not None else [])
        y, = add_op(g, "gemm", ins, {"alpha": 1.0, "beta": 1.0}, name="logits")
    else:
        y, = add_op(g, "matmul", [x, w], name="logits")
    attrs = dict(slice_attrs or dict(LAST, axes=(1,)))
    z, = add_op(g, "slice", [y], attrs, out_names=["last"])
    outs = [z] + ([add_op(g, "relu", [y])[0]] if extra_reader else []) + ([y] if output else [])
    g.set_outputs(outs)
    return g


@pytest.mark.parametrize("attrs", [dict(LAST, axes=(1,)), dict(LAST, axes=(-2,)),
                                   {"starts": (1,), "ends": (2,), "axes": (0,)},
                                   {"starts": (0, 2), "ends": (1, 7), "axes": (0, 1), "steps": (1, 2)}])
def test_rows_and_batch_sliced_before_the_product(attrs):
    g = _head(slice_attrs=attrs)
    out = dce(slice_products(g))
    assert ops(out) == ["slice", "reshape", "gemm", "reshape"]  # the batch folded into the rows of a 2-D gemm
    assert out.nodes[0].inputs[0].name == "x"
    check_same(g, out)


@pytest.mark.parametrize("bias", [(40,), (1, 40), None])
def test_gemm_rows_with_a_bias_per_column(bias):
    g = _head(rows=9, op="gemm", bias=bias, slice_attrs={"starts": (3,), "ends": (11,), "axes": (0,)})
    out = dce(slice_products(g))
    assert ops(out) == ["reshape", "slice", "gemm"]
    check_same(g, out)


@pytest.mark.parametrize("case", [
    dict(slice_attrs={"starts": (0,), "ends": (8,), "axes": (2,)}),  # columns
    dict(extra_reader=True), dict(output=True), dict(batch_b=True),
    dict(op="gemm", bias=(18, 40), slice_attrs={"starts": (3,), "ends": (11,), "axes": (0,)})])
def test_left_alone(case):
    g = _head(**case)
    assert ops(dce(slice_products(g))) == ops(g)


def test_symbolic_rows_compile_to_a_gemv():
    """The last position of a prompt of any length: one compile, the head a single-row product."""
    g = _head(rows="seq")
    cm = ember.compile(g)
    assert "slice_products" in [r.name for r in cm.stats.passes if r.changed]
    w = g.constants["w"].astype(np.float64)
    for seq in (1, 5, 130):
        x = _rand(2, seq, 24)
        np.testing.assert_allclose(cm(x), (x.astype(np.float64) @ w)[:, -1:], rtol=1e-4, atol=1e-4)


def test_rows_through_a_reshape_of_a_2d_product():
    """gemm(x[M, K], w) seen as (1, M, N), its last row kept (a linear layer over one sequence)."""
    g = Graph()
    x = g.add_input("x", TensorType((9, 24)))
    y, = add_op(g, "gemm", [x, g.add_constant(_rand(24, 40), "w"), g.add_constant(_rand(40), "c")],
                {"alpha": 1.0, "beta": 1.0})
    y3, = add_op(g, "reshape", [y], {"shape": (1, 9, 40)})
    z, = add_op(g, "slice", [y3], dict(LAST, axes=(1,)), out_names=["last"])
    g.set_outputs([z])
    out = dce(slice_products(g))
    assert ops(out) == ["slice", "gemm", "reshape"] and out.nodes[0].inputs[0].name == "x"
    check_same(g, out)


def test_last_position_of_one_sequence_becomes_a_2d_gemm():
    """x[1, seq, K] @ w, last row: sliced to (1, 1, K), then a 2-D gemm between reshapes (what the
    weight passes take), one compile for every length."""
    g = Graph()
    x = g.add_input("x", TensorType((1, "seq", 24)))
    y, = add_op(g, "matmul", [x, g.add_constant(_rand(24, 1001), "w")])
    z, = add_op(g, "slice", [y], dict(LAST, axes=(1,)), out_names=["last"])
    g.set_outputs([z])
    out = dce(slice_products(g))
    assert ops(out) == ["slice", "reshape", "gemm", "reshape"]
    cm = ember.compile(g)
    assert "matmul" not in ops(cm.graph) and "pad_gemv" in [r.name for r in cm.stats.passes if r.changed]
    w = g.constants["w"].astype(np.float64)
    for seq in (1, 6, 67):
        x = _rand(1, seq, 24)
        np.testing.assert_allclose(cm(x), (x.astype(np.float64) @ w)[:, -1:], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("index", [-1, 3, -9])
def test_gather_of_one_position_sliced_before_the_product(index):
    g = Graph()
    x = g.add_input("x", TensorType((2, 9, 24)))
    y, = add_op(g, "matmul", [x, g.add_constant(_rand(24, 40), "w")], name="logits")
    z, = add_op(g, "gather", [y, g.add_constant(np.array(index, np.int64), "i")], {"axis": 1}, out_names=["last"])
    g.set_outputs([z])
    out = dce(slice_products(g))
    assert ops(out)[0] == "slice" and "gather" not in ops(out) and out.nodes[0].inputs[0].name == "x"
    check_same(g, out)


def test_gather_out_of_range_left_alone():
    g = Graph()
    x = g.add_input("x", TensorType((2, 9, 24)))
    y, = add_op(g, "matmul", [x, g.add_constant(_rand(24, 40), "w")])
    g.set_outputs(add_op(g, "gather", [y, g.add_constant(np.array(9, np.int64), "i")], {"axis": 1}))
    assert ops(dce(slice_products(g))) == ["matmul", "gather"]

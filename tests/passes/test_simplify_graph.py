"""Algebraic simplification: each rule of the table on a small graph, and the cases it must leave
alone (a broadcast behind x + 0, a non-neutral constant, a non-identity transpose)."""

import numpy as np
import pytest
from pass_check import check_same, ops

from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.algebraic import RULES, simplify
from ember.passes.dce import dce


def _graph(x_shape=(2, 3, 4), dtype="float32"):
    g = Graph()
    return g, g.add_input("x", TensorType(x_shape, dtype))


def _const(g, value, shape=(), dtype="float32"):
    return g.add_constant(np.full(shape, value, dtype), "k")


@pytest.mark.parametrize("op, k, swap", [("mul", 1, False), ("mul", 1, True), ("add", 0, False),
                                         ("add", 0, True), ("sub", 0, False), ("div", 1, False)])
def test_neutral_elements(op, k, swap):
    g, x = _graph()
    c = _const(g, k, (4,))
    y, = add_op(g, op, [c, x] if swap else [x, c])
    z, = add_op(g, "exp", [y])
    g.set_outputs([z])
    out = dce(simplify(g))
    assert ops(out) == ["exp"]
    check_same(g, out)


def test_broadcasting_neutral_op_stays():
    g, x = _graph((4,))
    y, = add_op(g, "add", [x, _const(g, 0, (3, 4))])  # x + 0 broadcasts x to (3, 4)
    z, = add_op(g, "mul", [x, _const(g, 2, (4,))])  # not neutral
    g.set_outputs([y, z])
    out = simplify(g)
    assert ops(out) == ["add", "mul"]
    check_same(g, out)


def test_identity_same_cast_same_reshape():
    g, x = _graph()
    a, = add_op(g, "identity", [x])
    b, = add_op(g, "cast", [a], {"dtype": "float32"})
    c, = add_op(g, "reshape", [b], {"shape": (2, 3, 4)})
    d, = add_op(g, "cast", [c], {"dtype": "float64"})  # a real cast: stays
    g.set_outputs([d])
    out = simplify(g)
    assert ops(out) == ["cast"] and out.nodes[0].inputs[0] is out.inputs[0]
    check_same(g, out)


def test_reshape_chain_merges():
    g, x = _graph()
    a, = add_op(g, "reshape", [x], {"shape": (6, 4)})
    b, = add_op(g, "reshape", [a], {"shape": (4, 6)})
    c, = add_op(g, "reshape", [b], {"shape": (24,)})
    g.set_outputs([c])
    out = dce(simplify(g))
    assert ops(out) == ["reshape"] and out.nodes[0].attrs["shape"] == (24,)
    check_same(g, out)


def test_reshape_back_to_input_shape_vanishes():
    g, x = _graph()
    a, = add_op(g, "reshape", [x], {"shape": (6, 4)})
    b, = add_op(g, "reshape", [a], {"shape": (2, 3, 4)})
    y, = add_op(g, "relu", [b])
    g.set_outputs([y])
    out = dce(simplify(g))
    assert ops(out) == ["relu"]
    check_same(g, out)


def test_transposes_compose():
    g, x = _graph()
    a, = add_op(g, "transpose", [x], {"perm": (1, 2, 0)})
    b, = add_op(g, "transpose", [a], {"perm": (0, 2, 1)})
    c, = add_op(g, "transpose", [b], {"perm": (-1, 0, 1)})  # negative axes
    g.set_outputs([c])
    out = dce(simplify(g))
    assert ops(out) == ["transpose"]
    check_same(g, out)


def test_inverse_transposes_cancel():
    g, x = _graph()
    a, = add_op(g, "transpose", [x], {"perm": (2, 0, 1)})
    b, = add_op(g, "transpose", [a], {"perm": (1, 2, 0)})
    i, = add_op(g, "transpose", [b], {"perm": (0, 1, 2)})
    y, = add_op(g, "tanh", [i])
    g.set_outputs([y])
    out = dce(simplify(g))
    assert ops(out) == ["tanh"]
    check_same(g, out)


@pytest.mark.parametrize("shape, perm, rule", [((1, 5, 6), (1, 0, 2), "reshape"),
                                               ((5, 1, 1, 6), (2, 0, 3, 1), "reshape"),
                                               ((1, 5, 6), (2, 0, 1), "transpose"),
                                               ((2, 5, 1), (1, 0, 2), "transpose")])
def test_transpose_of_unit_axes_is_a_reshape(shape, perm, rule):
    """A transpose that moves only axes of size 1 keeps the bytes in order: a reshape (a view);
    one that reorders two larger axes stays."""
    g, x = _graph(shape)
    y, = add_op(g, "transpose", [x], {"perm": perm})
    g.set_outputs([y])
    out = dce(simplify(g))
    assert ops(out) == [rule]
    check_same(g, out)


def test_graph_output_keeps_its_name():
    g, x = _graph()
    y, = add_op(g, "identity", [x], name="y")
    g.set_outputs([y])
    out = simplify(g)
    assert [v.name for v in out.outputs] == ["y"]
    check_same(g, out)


def test_rule_table_covers_the_documented_ops():
    assert set(RULES) == {"mul", "add", "sub", "div", "identity", "cast", "reshape", "transpose", "pow"}


@pytest.mark.parametrize("power, muls", [(2.0, 1), (3.0, 2)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_small_integer_powers_become_products(power, muls, dtype):
    g, x = _graph(dtype=dtype)
    y, = add_op(g, "pow", [x, _const(g, power, dtype=dtype)])
    g.set_outputs([y])
    out = dce(simplify(g))
    assert ops(out) == ["mul"] * muls
    check_same(g, out, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("power, shape, dtype", [(2.5, (), "float32"), (3.0, (4,), "float32"),
                                                 (3.0, (), "float16"), (3, (), "int32")])
def test_other_powers_stay(power, shape, dtype):
    g, x = _graph(dtype=dtype)
    y, = add_op(g, "pow", [x, g.add_constant(np.full(shape, power, dtype), "k")])
    g.set_outputs([y])
    assert ops(simplify(g)) == ["pow"]

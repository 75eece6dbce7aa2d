"""Common subexpression elimination: equal nodes and equal constants merge; different attributes
or inputs do not; graph outputs keep their names."""

import numpy as np
from pass_check import check_same, ops

from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.cse import cse
from ember.passes.dce import dce


def test_identical_nodes_merge_through_chains():
    g = Graph()
    x = g.add_input("x", TensorType((3, 4)))
    a1, = add_op(g, "exp", [x])
    a2, = add_op(g, "exp", [x])
    b1, = add_op(g, "transpose", [a1], {"perm": (1, 0)})
    b2, = add_op(g, "transpose", [a2], {"perm": (1, 0)})
    y, = add_op(g, "add", [b1, b2])
    g.set_outputs([y])
    out = cse(g)
    assert ops(out) == ["exp", "transpose", "add"]
    assert out.nodes[2].inputs[0] is out.nodes[2].inputs[1]
    check_same(g, out)


def test_equal_constants_merge_by_bytes():
    rng = np.random.default_rng()
    w = rng.standard_normal((4,)).astype("float32")
    g = Graph()
    x = g.add_input("x", TensorType((4,)))
    m1, = add_op(g, "mul", [x, g.add_constant(w, "w1")])
    m2, = add_op(g, "mul", [x, g.add_constant(w.copy(), "w2")])
    m3, = add_op(g, "mul", [x, g.add_constant(w + 1, "w3")])  # other bytes: stays
    s, = add_op(g, "add", [m1, m2])
    y, = add_op(g, "add", [s, m3])
    g.set_outputs([y])
    out = dce(cse(g))
    assert ops(out) == ["mul", "mul", "add", "add"]
    assert sorted(out.constants) == ["w1", "w3"]
    check_same(g, out)


def test_different_attributes_and_outputs_stay():
    g = Graph()
    x = g.add_input("x", TensorType((3, 4)))
    s0, = add_op(g, "sum", [x], {"axes": (0,)})
    s1, = add_op(g, "sum", [x], {"axes": (1,)})
    e1, = add_op(g, "exp", [x], name="e1")
    e2, = add_op(g, "exp", [x], name="e2")  # a graph output of its own name: kept
    g.set_outputs([s0, s1, e1, e2])
    out = cse(g)
    assert ops(out) == ["sum", "sum", "exp", "exp"]
    check_same(g, out)

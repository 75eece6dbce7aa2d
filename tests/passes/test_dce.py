"""Dead code elimination: unused nodes and constants go, inputs and outputs stay."""

import numpy as np
from pass_check import check_same, ops

from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.dce import dce


def test_removes_dead_chains_and_unused_constants():
    g = Graph()
    x = g.add_input("x", TensorType((2, 3)))
    g.add_input("unused", TensorType((5,)))
    w = g.add_constant(np.ones((2, 3), "float32"), "w")
    g.add_constant(np.zeros(7, "float32"), "never_used")
    dead, = add_op(g, "mul", [x, w])
    add_op(g, "exp", [dead])  # a dead chain of two
    lo, hi = add_op(g, "split", [x], {"axis": 1, "sizes": (1, 2)})  # one output used: the node stays
    y, = add_op(g, "relu", [hi])
    g.set_outputs([y, x])
    out = dce(g)
    assert ops(out) == ["split", "relu"]
    assert list(out.constants) == []
    assert [v.name for v in out.inputs] == ["x", "unused"]
    check_same(g, out)


def test_live_graph_unchanged():
    g = Graph()
    x = g.add_input("x", TensorType((4,)))
    y, = add_op(g, "add", [x, g.add_constant(np.ones(4, "float32"), "one")])
    g.set_outputs([y])
    out = dce(g)
    assert ops(out) == ["add"] and list(out.constants) == ["one"]
    check_same(g, out)

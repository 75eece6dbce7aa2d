"""The graph passes on control flow: every pass runs inside regions (constant folding and dead code
in a branch and a loop body), an `if` on a constant condition becomes its branch, and two loops
with different bodies never merge."""

from __future__ import annotations

import numpy as np
import pytest

from ember.graph import Graph, TensorType
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.passes.cse import cse
from ember.passes.fold_constants import fold_constants
from ember.passes.pipeline import run_pipeline
from ember.testing import random_array

T = TensorType((4,))


def branch(name: str, op: str) -> Graph:
    """x -> op(x) * (2 + 3): a constant subexpression, and a node nothing uses."""
    g = Graph(name)
    x = g.add_input("x", T)
    two, three = g.add_constant(np.float32(2), "two"), g.add_constant(np.float32(3), "three")
    (k,) = add_op(g, "add", [two, three])
    (y,) = add_op(g, op, [x])
    add_op(g, "exp", [y])  # dead
    (z,) = add_op(g, "mul", [y, k])
    g.set_outputs([z])
    return g


def body(op: str) -> Graph:
    g = Graph("body")
    g.add_input("i", TensorType((), "int64"))
    go = g.add_input("go", TensorType((), "bool"))
    s = g.add_input("s", T)
    (y,) = add_op(g, op, [s])
    g.set_outputs([go, y])
    return g


def if_graph(cond: bool | None) -> Graph:
    """if(c, x) [relu branch, tanh branch]; c a constant when `cond` is given, else an input."""
    g = Graph()
    x = g.add_input("x", T)
    c = g.add_constant(np.array(cond), "c") if cond is not None else g.add_input("c", TensorType((), "bool"))
    (y,) = add_op(g, "if", [c, x], regions=[branch("then", "relu"), branch("else", "tanh")], out_names=["y"])
    g.set_outputs([y])
    return g


@pytest.mark.parametrize("cond", [True, False])
def test_if_on_a_constant_condition_becomes_its_branch(cond):
    g = if_graph(cond)
    out = run_pipeline(g, 2, debug=True)
    assert all(not n.regions for n in out.nodes)
    assert [v.name for v in out.outputs] == ["y"]  # the output keeps its name
    assert ("relu" if cond else "tanh") in out.op_histogram()
    x = random_array((4,))
    np.testing.assert_allclose(evaluate(out, x)[0], evaluate(g, x)[0], rtol=1e-6)


def test_passes_run_inside_regions():
    g = if_graph(None)
    out = run_pipeline(g, 2, debug=True)
    (node,) = out.nodes
    for region in node.regions:
        assert sorted(region.op_histogram()) == sorted(["mul", region.nodes[0].op])  # folded, dead code gone
        assert len(region.nodes) == 2
    x = random_array((4,))
    for c in (True, False):
        np.testing.assert_allclose(evaluate(out, x, np.array(c))[0], evaluate(g, x, np.array(c))[0], rtol=1e-6)


def test_an_if_on_a_constant_inside_a_loop_body_folds_there():
    g = Graph()
    x = g.add_input("x", T)
    b = Graph("body")
    b.add_input("i", TensorType((), "int64"))
    go = b.add_input("go", TensorType((), "bool"))
    s = b.add_input("s", T)
    yes = b.add_constant(np.array(True), "yes")
    (y,) = add_op(b, "if", [yes, s], regions=[branch("then", "relu"), branch("else", "tanh")])
    b.set_outputs([go, y])
    n, true = g.add_constant(np.array(2, "int64"), "n"), g.add_constant(np.array(True), "true")
    (out,) = add_op(g, "loop", [n, true, x], {"carried": 1}, regions=[b])
    g.set_outputs([out])
    assert "if" in fold_constants(g).nodes[0].regions[0].op_histogram()  # a pass sees the graph it is given
    folded = run_pipeline(g, 1, debug=True)  # the pipeline runs it inside regions
    (loop,) = folded.nodes
    assert "if" not in loop.regions[0].op_histogram()
    x = random_array((4,))
    np.testing.assert_allclose(evaluate(folded, x)[0], evaluate(g, x)[0], rtol=1e-6)


def test_a_short_loop_on_constants_folds():
    g = Graph()
    x = g.add_input("x", T)
    s0 = g.add_constant(random_array((4,)), "s0")
    n, true = g.add_constant(np.array(3, "int64"), "n"), g.add_constant(np.array(True), "true")
    (s,) = add_op(g, "loop", [n, true, s0], {"carried": 1}, regions=[body("tanh")])
    g.set_outputs(add_op(g, "add", [x, s]))
    out = run_pipeline(g, 1, debug=True)
    assert out.op_histogram() == {"add": 1}
    x = random_array((4,))
    np.testing.assert_allclose(evaluate(out, x)[0], evaluate(g, x)[0], rtol=1e-6)
    g.constants["n"] = np.array(10**6, "int64")  # too many iterations to run at compile time
    assert "loop" in run_pipeline(g, 1).op_histogram()


def test_loops_with_different_bodies_do_not_merge():
    g = Graph()
    x = g.add_input("x", T)
    n, true = g.add_constant(np.array(2, "int64"), "n"), g.add_constant(np.array(True), "true")
    (a,) = add_op(g, "loop", [n, true, x], {"carried": 1}, regions=[body("relu")])
    (b,) = add_op(g, "loop", [n, true, x], {"carried": 1}, regions=[body("neg")])
    g.set_outputs([a, b])
    assert len(cse(g).nodes) == 2

"""Compiled control flow: nested regions (an if in a loop body, with scan outputs), symbolic sizes
through a loop, saving and loading, profiling, checked division inside a loop, the memory plan
of loop-carried values, the interpreter target; each result against the reference evaluator on
fresh inputs."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.graph import Graph, TensorType
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.testing import random_array


def nested_graph(batch="batch") -> Graph:
    """s <- if i is even: relu(s) * w - 0.5 else: tanh(s + x); 4 iterations, scanning x's rows and
    stacking s; the branches capture x and the loop's scanned slice."""
    t = TensorType((batch, 8))
    g = Graph("nested")
    x = g.add_input("x", t)
    rows = g.add_input("rows", TensorType((4, batch, 8)))
    w = g.add_constant(random_array((8,)), "w")

    def branch(name, even):
        r = Graph(name)
        s, xr, xs = (r.add_input(n, t) for n in ("s", "x", "row"))
        if even:
            (y,) = add_op(r, "relu", [s])
            (y,) = add_op(r, "mul", [y, r.add_constant(random_array((8,)), "w")])
            (y,) = add_op(r, "sub", [y, r.add_constant(np.float32(0.5), "half")])
        else:
            (y,) = add_op(r, "add", [s, xr])
            (y,) = add_op(r, "add", [y, xs])
            (y,) = add_op(r, "tanh", [y])
        r.set_outputs([y])
        return r

    body = Graph("body")
    i = body.add_input("i", TensorType((), "int64"))
    go = body.add_input("go", TensorType((), "bool"))
    s = body.add_input("s", t)
    row = body.add_input("row", t)
    bx = body.add_input("x", t)
    two = body.add_constant(np.array(2, "int64"), "two")
    zero = body.add_constant(np.array(0, "int64"), "zero")
    (m,) = add_op(body, "mod", [i, two])
    (even,) = add_op(body, "equal", [m, zero])
    (y,) = add_op(body, "if", [even, s, bx, row], regions=[branch("then", True), branch("else", False)])
    body.set_outputs([go, y, y])
    n, true = g.add_constant(np.array(4, "int64"), "n"), g.add_constant(np.array(True), "true")
    (x2,) = add_op(g, "mul", [x, w])
    outs = add_op(g, "loop", [n, true, x2, rows, x], {"carried": 1, "scanned": 1, "length": 4}, regions=[body])
    g.set_outputs(outs)
    return g


@pytest.fixture(scope="module")
def graph():
    return nested_graph()


@pytest.fixture(scope="module")
def nested(graph):
    return ember.compile(graph)


def _inputs(batch: int) -> list[np.ndarray]:
    return [random_array((batch, 8)), random_array((4, batch, 8))]


def _check(compiled, graph: Graph, inputs) -> None:
    for a, e in zip(compiled(*inputs), evaluate(graph, *inputs), strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batch", [1, 3, 6])
def test_nested_regions_with_a_symbolic_batch(graph, nested, batch):
    _check(nested, graph, _inputs(batch))


def test_saved_and_loaded(nested, tmp_path):
    loaded = ember.load(nested.save(tmp_path / "nested"))
    inputs = _inputs(2)
    for a, b in zip(loaded(*inputs), nested(*inputs)):
        np.testing.assert_array_equal(a, b)


def test_profiled(nested):
    prof = nested.profile(*_inputs(2), repeat=3)
    assert all(k.median_us >= 0 for k in prof.kernels)


def test_loop_carried_values_in_the_memory_plan(nested):
    plan = nested.plan
    span = {t.name: (t.first, t.last) for t in plan.tensors}
    nexts = [name for name in span if "/next" in name]
    assert len(nexts) == 2  # the body's condition and its carried value, outside the body
    body = [name for name in span if name.startswith("loop/0/") and "/next" not in name]
    assert body and all(span[nexts[1]][0] < span[b][0] and span[b][1] <= span[nexts[1]][1] for b in body)


def test_interpreter_runs_the_same_branches_and_loops(graph):
    _check(ember.compile(graph, target="python"), graph, _inputs(2))


def test_checked_division_by_zero_inside_a_loop():
    g = Graph()
    x = g.add_input("x", TensorType((4,), "int32"))
    d = g.add_input("d", TensorType((4,), "int32"))
    body = Graph("body")
    body.add_input("i", TensorType((), "int64"))
    go = body.add_input("go", TensorType((), "bool"))
    s = body.add_input("s", TensorType((4,), "int32"))
    bd = body.add_input("d", TensorType((4,), "int32"))
    (q,) = add_op(body, "floor_divide", [s, bd])
    body.set_outputs([go, q])
    n, true = g.add_constant(np.array(2, "int64"), "n"), g.add_constant(np.array(True), "true")
    (out,) = add_op(g, "loop", [n, true, x, d], {"carried": 1}, regions=[body])
    g.set_outputs([out])
    compiled = ember.compile(g, checked=True)
    x = np.random.default_rng().integers(100, 1000, 4).astype("int32")
    d = np.array([2, 3, 5, 7], "int32")
    np.testing.assert_array_equal(compiled(x, d), evaluate(g, x, d)[0])
    with pytest.raises(ZeroDivisionError):
        compiled(x, np.array([2, 0, 5, 7], "int32"))

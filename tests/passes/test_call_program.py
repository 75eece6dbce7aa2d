"""The call program of a model (ember.program, written by ember.passes.call_program): a launch per
kernel step on the references of the plan (views resolved to the bytes they view), the copy of an
output no kernel writes, weights in order of first use; the program run by the interpreter
computes what the NumPy references compute."""

from __future__ import annotations

import numpy as np

import ember
from ember.graph import Graph, TensorType
from ember.lowering import cut_regions, lower_groups, partition
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.passes.call_program import call_program
from ember.passes.plan_memory import kernel_graph, plan_memory
from ember.program import Arg, Copy, Launch, Ref
from ember.testing import random_array


def graph() -> Graph:
    """y = reshape(relu(x + w) * v), and x returned as it is."""
    g = Graph("small")
    x = g.add_input("x", TensorType((4, 8)))
    w, v = g.add_constant(random_array((8,)), "w"), g.add_constant(random_array((4, 8)), "v")
    (a,) = add_op(g, "add", [x, w])
    (r,) = add_op(g, "relu", [a])
    (m,) = add_op(g, "mul", [r, v])
    (y,) = add_op(g, "reshape", [m], {"shape": (32,)})
    g.set_outputs([y, x])
    return g


def program_of(g: Graph):
    fused = partition(g, 0)  # one kernel per node: relu reads a workspace tensor
    steps = kernel_graph(fused, cut_regions(0))
    lowered = lower_groups(steps.kernels, 1, None, "python")
    return call_program(steps, plan_memory(steps), lowered.calls, lowered.kernels, []), lowered


def test_launches_copies_and_weights():
    program, lowered = program_of(graph())
    launches = program.launches()
    assert [call.kernel for call in launches] == [k.name for _, _, k in lowered.calls]
    assert all(isinstance(s, Launch) for s in program.body[:-1]) and len(launches) == 3
    add, relu, mul = launches
    assert add.args[0] == Arg(Ref("input", 0), (4, 8), "float32")
    assert add.args[1].ref == Ref("weight", 0) and mul.args[1].ref == Ref("weight", 1)
    assert add.args[2].ref.kind == "workspace" and relu.args[0] == add.args[2]  # read where it was written
    assert mul.args[-1].ref == Ref("output", 0)  # the reshape is a view: mul writes the output's bytes
    assert (add.outputs, add.grid, add.sizes) == (1, (), ())
    assert "add" in add.comment and "relu" in relu.comment
    assert program.body[-1] == Copy(Ref("output", 1), Ref("input", 0), (4, 8), 4)  # x as it is
    assert program.weights == ("w", "v")
    assert {f.name for f in program.kernels} == {call.kernel for call in launches}


def test_the_interpreter_runs_the_program():
    g = graph()
    x = random_array((4, 8))
    want = evaluate(g, x)
    got = ember.compile(g, target="python", opt_level=0)(x)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_weights_merge_by_their_bits():
    """Constants of one dtype and shape share a weight only where their bytes are the same: a 0.0
    and a -0.0 stay apart (x / 0.0 is inf, x / -0.0 is -inf), and a NaN shares with the same NaN.
    The lanes that differ lie outside the sample of 64 that buckets the arrays, so the bytes decide."""
    a, c = random_array((128,)), random_array((128,))
    a[1], c[3] = 0.0, np.nan
    b, d = a.copy(), c.copy()  # d: c's bits in another array
    b[1] = -0.0
    g = Graph("signed_zeros")
    x = g.add_input("x", TensorType((128,)))
    weights = {"a": a, "b": b, "c": c, "d": d}
    g.set_outputs([add_op(g, "div", [x, g.add_constant(w, name)])[0] for name, w in weights.items()])
    program, _ = program_of(g)
    assert program.weights == ("a", "b", "c")
    xs = np.abs(random_array((128,))) + 0.5
    got = ember.compile(g, target="python", opt_level=0)(xs)
    for out, w in zip(got, weights.values(), strict=True):
        np.testing.assert_allclose(out, xs / w, rtol=1e-6, atol=0)
    assert got[0][1] == np.inf and got[1][1] == -np.inf

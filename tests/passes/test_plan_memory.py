"""Memory planning: offsets never overlap for tensors live at the same step (checked by brute
force on random lifetimes and random graphs), reuse makes the workspace smaller than one buffer
per tensor, and symbolic shapes are planned per binding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.errors import ShapeError
from ember.graph import Graph, TensorType
from ember.passes.plan_memory import ALIGN, MemoryPlan, greedy_by_size, plan_memory


def check_layout(sizes, lifetimes, offsets, peak):
    """No two tensors live at a common step share a byte; offsets aligned; peak is tight enough."""
    n = len(sizes)
    assert all(o % ALIGN == 0 for o in offsets)
    assert peak == max((o + s for o, s in zip(offsets, sizes)), default=0)
    for a in range(n):
        for b in range(a + 1, n):
            live_together = not (lifetimes[a][1] < lifetimes[b][0] or lifetimes[b][1] < lifetimes[a][0])
            apart = offsets[a] + sizes[a] <= offsets[b] or offsets[b] + sizes[b] <= offsets[a]
            assert apart or not live_together, f"tensors {a} and {b} overlap while both live"
    steps = {s for first, last in lifetimes for s in range(first, last + 1)}
    live_max = max((sum(sz for sz, (f, l) in zip(sizes, lifetimes) if f <= s <= l) for s in steps), default=0)
    assert live_max <= peak <= sum(sizes)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 6), st.integers(0, 12)), max_size=30))
def test_greedy_by_size_random_lifetimes(items):
    sizes = [ALIGN * s for s, _, _ in items]
    lifetimes = [(first, first + length) for _, length, first in items]
    offsets, peak = greedy_by_size(sizes, lifetimes)
    check_layout(sizes, lifetimes, offsets, peak)


@st.composite
def random_graphs(draw):
    """A random DAG: nodes of a made-up operator read 1 to 3 earlier values (inputs, constants,
    node outputs) and define 1 or 2 outputs of random sizes; some values are graph outputs."""
    g = Graph("random")
    values = [g.add_input(f"x{k}", TensorType((draw(st.integers(1, 40)),))) for k in range(draw(st.integers(1, 3)))]
    if draw(st.booleans()):
        values.append(g.add_constant(np.zeros(3, "float32"), "w"))
    for k in range(draw(st.integers(1, 25))):
        ins = draw(st.lists(st.sampled_from(values), min_size=1, max_size=3))
        outs = [TensorType((draw(st.integers(0, 300)),), draw(st.sampled_from(["float32", "int8", "float64"])))
                for _ in range(draw(st.integers(1, 2)))]
        values += g.add_node("f", ins, {}, outs, name=f"n{k}").outputs
    g.set_outputs(draw(st.lists(st.sampled_from(values), min_size=1, max_size=4)))
    return g


@settings(max_examples=100, deadline=None)
@given(random_graphs())
def test_plan_random_graphs(g):
    plan = plan_memory(g)
    names = {t.name for t in plan.tensors}
    kept_out = {v.name for v in g.inputs} | set(g.constants) | {v.name for v in g.outputs}
    assert not names & kept_out  # inputs, outputs and constants are not in the workspace
    assert names == {v.name for n in g.nodes for v in n.outputs} - kept_out
    steps = {v.name: k for k, n in enumerate(g.nodes) for v in n.outputs}
    for t in plan.tensors:  # live from its node to its last reader
        readers = [k for k, n in enumerate(g.nodes) if any(v.name == t.name for v in n.inputs)]
        assert (t.first, t.last) == (steps[t.name], max(readers, default=steps[t.name]))
    layout = plan.layout()
    sizes = [t.nbytes({}) for t in plan.tensors]
    check_layout(sizes, [(t.first, t.last) for t in plan.tensors], layout.offsets, layout.peak_bytes)
    assert layout.unplanned_bytes == sum(sizes)


def chain(n: int, shape=(1024,)) -> Graph:
    g = Graph("chain")
    v = g.add_input("x", TensorType(shape))
    for k in range(n):
        v = g.add_node("f", [v], {}, [TensorType(shape)], name=f"n{k}").outputs[0]
    g.set_outputs([v])
    return g


def test_chain_reuses_memory():
    layout = plan_memory(chain(6)).layout()
    one = 4096  # 1024 float32, a multiple of ALIGN
    assert layout.unplanned_bytes == 5 * one  # the last node writes the output
    assert layout.peak_bytes == 2 * one < layout.unplanned_bytes


def test_sizes_round_up_to_alignment():
    g = Graph("odd")
    x = g.add_input("x", TensorType((3,)))
    a = g.add_node("f", [x], {}, [TensorType((3,), "int8")], name="a").outputs[0]
    b = g.add_node("f", [x, a], {}, [TensorType((3,), "int8")], name="b").outputs[0]
    c = g.add_node("f", [a, b], {}, [TensorType((3,))], name="c").outputs[0]
    g.set_outputs([c])
    layout = plan_memory(g).layout()
    assert sorted(layout.offsets) == [0, ALIGN] and layout.peak_bytes == 2 * ALIGN


def test_symbolic_shapes_plan_per_binding():
    plan = plan_memory(chain(4, ("n", 3)))
    assert plan.symbols == ("n",)
    small, big = plan.layout({"n": 2}), plan.layout({"n": 1024})
    assert small.peak_bytes == 2 * ALIGN and big.peak_bytes == 2 * 12288
    with pytest.raises(ShapeError, match="needs symbol 'n'"):
        plan.layout({})


def test_plan_json_roundtrip():
    plan = plan_memory(chain(4, ("n", 3)))
    assert MemoryPlan.from_json(plan.to_json()) == plan

"""Memory planning: offsets never overlap for tensors live at the same step (checked by brute
force on random lifetimes and random graphs, with views and in-place writes), reuse makes the
workspace smaller than one buffer per tensor, symbolic shapes are planned per binding (or once
at their upper bounds, for every binding that makes no tensor larger); views
share their input's bytes for as long as they are read, in-place writes take the bytes of an input
that dies there and of no other, the inputs of a concat are written into its bytes when they lie
at aligned offsets; compiled models with reshapes that are views (of the workspace,
of inputs and constants, as outputs) and elementwise kernels writing in place compute what the
NumPy references compute."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.errors import ShapeError
from ember.graph import Graph, TensorType
from ember.lowering import partition
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.passes.plan_memory import (
    VIEW_OPS,
    KernelGraph,
    MemoryPlan,
    Step,
    greedy_by_size,
    kernel_graph,
    plan_memory,
)
from ember.target import Target
from ember.testing import random_array

ALIGN = Target.align  # the default target's alignment, which plan_memory takes by default

VIEW = "view"  # a node of this op in the graphs below is a view step; "in_place" attributes are the steps'


def steps_of(g: Graph) -> KernelGraph:
    """The kernel graph whose steps are the nodes of `g`."""
    return KernelGraph(g, tuple(Step(n.name, tuple(n.inputs), tuple(n.outputs), n.op == VIEW,
                                     tuple(n.attrs.get("in_place", ()))) for n in g.nodes))


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
    plan = plan_memory(steps_of(g))
    names = {t.name for t in plan.tensors}
    kept_out = {v.name for v in g.inputs} | set(g.constants) | {v.name for v in g.outputs}
    assert not names & kept_out  # inputs, outputs and constants are not in the workspace
    assert names == {v.name for n in g.nodes for v in n.outputs} - kept_out
    steps = {v.name: k for k, n in enumerate(g.nodes) for v in n.outputs}
    for t in plan.tensors:  # live from its node to its last reader
        readers = [k for k, n in enumerate(g.nodes) if any(v.name == t.name for v in n.inputs)]
        assert (t.first, t.last) == (steps[t.name], max(readers, default=steps[t.name]))
    layout = plan.layout()
    sizes = [t.nbytes({}, ALIGN) for t in plan.tensors]
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
    layout = plan_memory(steps_of(chain(6))).layout()
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
    layout = plan_memory(steps_of(g)).layout()
    assert sorted(layout.offsets) == [0, ALIGN] and layout.peak_bytes == 2 * ALIGN


def test_symbolic_shapes_plan_per_binding():
    plan = plan_memory(steps_of(chain(4, ("n", 3))))
    assert plan.symbols == ("n",)
    small, big = plan.layout({"n": 2}), plan.layout({"n": 1024})
    assert small.peak_bytes == 2 * ALIGN and big.peak_bytes == 2 * 12288
    with pytest.raises(ShapeError, match="needs symbol 'n'"):
        plan.layout({})


def test_a_layout_at_the_upper_bounds_holds_every_smaller_binding():
    plan = plan_memory(steps_of(chain(4, ("n", 3))))
    bounded = plan.bounded({"n": 1024}, limit=1 << 20)
    assert bounded.layout == plan.layout({"n": 1024})
    assert bounded.holds({"n": 2}) and bounded.holds({"n": 1024}) and not bounded.holds({"n": 1025})
    assert plan.bounded({"n": 1024}, limit=2 * 12288 - 1) is None  # its workspace over the limit


def test_a_model_with_bounded_symbols_lays_its_workspace_out_once():
    """Each call in range uses the layout at the symbols' upper bounds (a decode step's new
    cache length every step), and computes what NumPy computes; out of range, a ShapeError."""
    g = Graph("bounded")
    x = g.add_input("x", TensorType(("n", 8)))
    (y,) = add_op(g, "neg", [x])
    for op in ("exp", "sin"):
        (y,) = add_op(g, op, [y])
    g.set_outputs(add_op(g, "concat", [y, x], {"axis": 0}))
    g.ranges = {"n": (1, 40)}
    cm = ember.compile(g, opt_level=0)
    for n in (3, 17, 40):
        a = random_array((n, 8), "float32")
        np.testing.assert_allclose(cm(a), np.concatenate([np.sin(np.exp(-a)), a]), rtol=1e-5, atol=1e-6)
    assert len({id(v) for v in cm._layouts.values()}) == 1
    with pytest.raises(ShapeError):
        cm(random_array((41, 8), "float32"))


def test_plan_json_roundtrip():
    plan = plan_memory(steps_of(chain(4, ("n", 3))))
    assert MemoryPlan.from_json(plan.to_json()) == plan


# -- views and in-place writes ------------------------------------------------------------------


def buffers(plan: MemoryPlan) -> dict[str, list]:
    """The tensors of each buffer, by the name of the one that owns it."""
    out: dict[str, list] = {}
    for t in plan.tensors:
        out.setdefault(t.shares or t.name, []).append(t)
    return out


def check_sharing(g: Graph, plan: MemoryPlan) -> None:
    """Buffers never overlap while live (a buffer lives from its first tensor's first step to its
    tensors' last); a view shares what it views; a tensor written over another is written by a
    node that may write in place, over an input of its type whose buffer no later node reads and
    no other input of the node is in."""
    layout = plan.layout()
    by_name = {t.name: k for k, t in enumerate(plan.tensors)}
    groups = buffers(plan)
    owners = list(groups)
    sizes = [max(t.nbytes({}, ALIGN) for t in groups[o]) for o in owners]
    lives = [(min(t.first for t in groups[o]), max(t.last for t in groups[o])) for o in owners]
    check_layout(sizes, lives, [layout.offsets[by_name[o]] for o in owners], layout.peak_bytes)
    assert all(layout.offsets[k] == layout.offsets[by_name[t.shares or t.name]] for k, t in enumerate(plan.tensors))
    owner_of = {t.name: t.shares or t.name for t in plan.tensors}
    for step, node in enumerate(g.nodes):
        for k, y in enumerate(node.outputs):
            if y.name not in owner_of or owner_of[y.name] == y.name:
                continue
            if node.op == VIEW:
                assert owner_of[y.name] == owner_of[node.inputs[0].name]
                continue
            x = node.inputs[dict(node.attrs["in_place"])[k]]
            assert x.type == y.type and owner_of.get(x.name) == owner_of[y.name]
            assert not any(owner_of.get(v.name) == owner_of[y.name] for v in node.inputs if v is not x)
            assert all(t.last <= step for t in groups[owner_of[y.name]] if t.first < step)


@st.composite
def graphs_with_views(draw):
    """A random DAG of 1-d float32 values: nodes read 1 to 3 earlier values and write one or two;
    some are views (their input's size), some may write an output in place over an input of its
    size; some values are graph outputs."""
    g = Graph("sharing")
    sizes = st.sampled_from([16, 32, 48])
    values = [g.add_input(f"x{k}", TensorType((draw(sizes),))) for k in range(draw(st.integers(1, 2)))]
    for k in range(draw(st.integers(1, 25))):
        if draw(st.booleans()):
            x = draw(st.sampled_from(values))
            values += g.add_node(VIEW, [x], {}, [x.type], name=f"v{k}").outputs
            continue
        ins = draw(st.lists(st.sampled_from(values), min_size=1, max_size=3))
        outs = [TensorType((draw(sizes),)) for _ in range(draw(st.integers(1, 2)))]
        pairs = tuple((o, i) for o, t in enumerate(outs) for i, x in enumerate(ins)
                      if x.type == t and draw(st.booleans()))
        values += g.add_node("f", ins, {"in_place": pairs}, outs, name=f"n{k}").outputs
    views = {v.name for n in g.nodes if n.op == VIEW for v in n.outputs}
    g.set_outputs(draw(st.lists(st.sampled_from([v for v in values if v.name not in views]), min_size=1, max_size=3)))
    return g


@settings(max_examples=150, deadline=None)
@given(graphs_with_views())
def test_views_and_in_place_writes_on_random_graphs(g):
    plan = plan_memory(steps_of(g))
    check_sharing(g, plan)
    assert plan.layout().unplanned_bytes == sum(t.nbytes({}, ALIGN) for t in plan.tensors)


def sharing_chain() -> Graph:
    """x -> a -> view b -> c (may write over b) -> d (may write over c), with a read again by d."""
    g = Graph("sharing")
    x = g.add_input("x", TensorType((1024,)))
    a = g.add_node("f", [x], {}, [TensorType((1024,))], name="n0").outputs[0]
    b = g.add_node(VIEW, [a], {}, [TensorType((1024,))], name="view").outputs[0]
    c = g.add_node("f", [b], {"in_place": ((0, 0),)}, [TensorType((1024,))], name="n1").outputs[0]
    d = g.add_node("f", [c, a], {"in_place": ((0, 0),)}, [TensorType((1024,))], name="n2").outputs[0]
    e = g.add_node("f", [d], {}, [TensorType((1024,))], name="n3").outputs[0]
    g.set_outputs([e])
    return g


def test_view_shares_its_input_and_keeps_it_alive():
    plan = plan_memory(steps_of(sharing_chain()))
    t = {t.name: t for t in plan.tensors}
    view = next(v for v in t.values() if v.first == 1)
    assert view.shares == "n0" or view.shares == plan.tensors[0].name
    # c may not write over b: a, which b views, is read again by d
    c, d = (v for v in plan.tensors if v.first in (2, 3))
    assert c.shares is None
    assert d.shares == c.name  # d writes over c, which dies there
    check_sharing(sharing_chain(), plan)


def test_in_place_writes_make_a_chain_one_buffer():
    g = Graph("chain")
    v = g.add_input("x", TensorType((1024,)))
    for k in range(6):
        v = g.add_node("f", [v], {"in_place": ((0, 0),)}, [TensorType((1024,))], name=f"n{k}").outputs[0]
    g.set_outputs([v])
    layout = plan_memory(steps_of(g)).layout()
    assert layout.peak_bytes == 4096 and layout.unplanned_bytes == 5 * 4096  # against 2 * 4096 without


def test_no_in_place_over_inputs_constants_outputs_or_other_types():
    g = Graph("kept")
    x = g.add_input("x", TensorType((64,)))
    w = g.add_constant(np.ones(64, "float32"), "w")
    a = g.add_node("f", [x, w], {"in_place": ((0, 0), (0, 1))}, [TensorType((64,))], name="n0").outputs[0]
    b = g.add_node(VIEW, [x], {}, [TensorType((8, 8))], name="v").outputs[0]  # a view of an input
    c = g.add_node("f", [b, a], {"in_place": ((0, 0),)}, [TensorType((8, 8))], name="n1").outputs[0]
    d = g.add_node("f", [c], {"in_place": ((0, 0),)}, [TensorType((8, 8), "int32")], name="n2").outputs[0]
    g.set_outputs([d, a])
    plan = plan_memory(steps_of(g))
    assert [(t.name, t.shares) for t in plan.tensors] == [(c.name, None)]  # b outside, a and d outputs


def test_view_as_graph_output_is_refused():
    g = Graph("bad")
    a = g.add_node("f", [g.add_input("x", TensorType((4,)))], {}, [TensorType((4,))], name="n0").outputs[0]
    g.set_outputs(g.add_node(VIEW, [a], {}, [TensorType((2, 2))], name="v").outputs)
    with pytest.raises(ValueError, match="view v: its output .* is a graph output"):
        plan_memory(steps_of(g))


def test_plan_with_sharing_json_roundtrip():
    plan = plan_memory(steps_of(sharing_chain()))
    assert any(t.shares for t in plan.tensors) and MemoryPlan.from_json(plan.to_json()) == plan


def reshapes_graph() -> Graph:
    """Reshapes of an input, of a constant, of kernel outputs (one dies in an elementwise kernel,
    which may write over it), and two reshapes that are graph outputs (one of an input)."""
    g = Graph("reshapes")
    x = g.add_input("x", TensorType((4, 6)))
    (xr,) = add_op(g, "reshape", [x], {"shape": (6, 4)})
    (wr,) = add_op(g, "flatten", [g.add_constant(random_array((3, 8)), "w")], {"start_dim": 0})
    (a,) = add_op(g, "gemm", [xr, g.add_constant(random_array((4, 24)), "b")])
    (af,) = add_op(g, "reshape", [a], {"shape": (144,)})
    (s,) = add_op(g, "sum", [af], {"axes": (0,), "keepdims": True})
    (e,) = add_op(g, "exp", [af])
    (e,) = add_op(g, "sub", [e, s])
    (e3,) = add_op(g, "unsqueeze", [e], {"axes": (0,)})
    (y,) = add_op(g, "mul", [e3, g.add_constant(random_array((144,)), "k")])
    (y,) = add_op(g, "reshape", [y], {"shape": (6, 24)})
    (z,) = add_op(g, "gemm", [y, g.add_constant(random_array((24, 24)), "c")])
    (zr,) = add_op(g, "reshape", [z], {"shape": (24, 6)})
    (xo,) = add_op(g, "squeeze", [add_op(g, "unsqueeze", [x], {"axes": (0,)})[0]])
    g.set_outputs([zr, add_op(g, "add", [wr, wr])[0], xo])
    return g


@pytest.mark.parametrize("opt_level", [0, 3])
def test_compiled_reshapes_are_views(opt_level):
    g = reshapes_graph()
    cm = ember.compile(g, opt_level=opt_level)
    copies = [k.ops for k in cm.kernels if set(k.ops) <= set(VIEW_OPS)]
    assert copies == [("unsqueeze", "squeeze")] or copies == [("squeeze",)]  # the output that views x: a copy
    assert any(t.shares for t in cm.plan.tensors)
    x = random_array((4, 6))
    for got, want in zip(cm(x), evaluate(g, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_elementwise_kernels_write_in_place():
    """Unfused, exp(x) -> add -> tanh -> mul is a chain of kernels whose inputs die in them: one
    buffer in the middle, against two."""
    g = Graph("in_place")
    x = g.add_input("x", TensorType((64, 64)))
    (y,) = add_op(g, "exp", [x])
    (y,) = add_op(g, "add", [y, g.add_constant(random_array((64,)), "b")])
    (y,) = add_op(g, "tanh", [y])
    g.set_outputs(add_op(g, "mul", [y, y]))
    cm = ember.compile(g, disabled_passes=["fuse"])
    assert cm.memory.peak_bytes == 64 * 64 * 4 < cm.memory.unplanned_bytes
    x_ = random_array((64, 64))
    np.testing.assert_allclose(cm(x_), evaluate(g, x_)[0], rtol=1e-5, atol=1e-6)


def test_kernel_graph_of_a_fused_graph():
    """The steps the compiler plans, unfused: views for reshapes of workspace values and of
    inputs, a kernel for the output that views an input (a copy), the reshape that is an output
    written by the kernel of the value it views, in-place writes in the elementwise chain."""
    fused = partition(reshapes_graph(), 0)
    steps = kernel_graph(fused)
    views = [s for s in steps.steps if s.view]
    assert views and all(set(s.group.ops) <= set(VIEW_OPS) for s in views)
    copies = [s.group.ops for s in steps.steps if not s.view and set(s.group.ops) <= set(VIEW_OPS)]
    assert copies == [("squeeze",)]  # the output that views x (through a view): a kernel copies
    assert steps.kernels == [s.group for s in steps.steps if not s.view]
    [(value, position)] = steps.written_as  # the gemm's value, written as output 0 (zr views it)
    assert position == 0 and value.shape == (6, 24)
    assert any(s.in_place for s in steps.steps)


def concat_graph() -> Graph:
    """exp(x) and tanh(x) concatenated, that and its sigmoid concatenated again (nested); a reshape
    of tanh(x) read later; a concat of 3 x 5 slabs, whose 60-byte offset no alignment divides."""
    g = Graph("concats")
    x = g.add_input("x", TensorType((1, 16, 4, 4)))
    z = g.add_input("z", TensorType((1, 3, 5)))
    (a,) = add_op(g, "exp", [x])
    (b,) = add_op(g, "tanh", [x])
    (c1,) = add_op(g, "concat", [a, b], {"axis": 1})
    (d,) = add_op(g, "sigmoid", [c1])
    (c2,) = add_op(g, "concat", [c1, d], {"axis": 1})
    (r,) = add_op(g, "reshape", [b], {"shape": (16, 16)})
    (p,) = add_op(g, "exp", [z])
    (q,) = add_op(g, "tanh", [z])
    (c3,) = add_op(g, "concat", [p, q], {"axis": 1})
    g.set_outputs([add_op(g, "relu", [c2])[0], add_op(g, "neg", [r])[0], add_op(g, "relu", [c3])[0]])
    return g


@pytest.mark.parametrize("target", ["c", "python"])
def test_concats_are_written_in_place(target):
    """The kernels that make a concat's inputs write them into its bytes (nested concats: one
    buffer), the concat runs nothing; a reshape of a slab views it where it lies; misaligned
    slabs are copied by a concat kernel."""
    g = concat_graph()
    fused = partition(g, 0)
    slabs = [s.slabs for s in kernel_graph(fused).steps if s.slabs]
    assert slabs == [(0, 1024), (0, 2048)]
    cm = ember.compile(g, disabled_passes=["fuse"], target=target)
    assert [k.ops for k in cm.kernels].count(("concat",)) == 1  # the misaligned one
    where = {t.name: (t.shares, t.at) for t in cm.plan.tensors}
    assert where["exp"] == ("concat_0", 0) and where["tanh"] == ("concat_0", 1024)
    assert where["concat"] == ("concat_0", 0) and where["sigmoid"] == ("concat_0", 2048)
    assert where["reshape"] == ("concat_0", 1024) and where["concat_3"] == (None, 0)
    assert MemoryPlan.from_json(cm.plan.to_json()) == cm.plan
    x, z = random_array((1, 16, 4, 4)), random_array((1, 3, 5))
    for got, want in zip(cm(x, z), evaluate(g, x, z), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

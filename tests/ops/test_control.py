"""The control-flow operators' type inference (what each refuses, by name) and their reference
semantics against plain NumPy loops: zero iterations, reversed scans, an early stop."""

from __future__ import annotations

import numpy as np
import pytest

from ember.graph import Graph, TensorType
from ember.ops import OpTypeError, infer_types
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.testing import random_array

T = TensorType((3,))


def accumulate(stop_above: float | None = None) -> Graph:
    """body(i, go, s, row) = (go and sum(s) <= stop_above, s + row, s * 2)."""
    b = Graph("body")
    b.add_input("i", TensorType((), "int64"))
    go = b.add_input("go", TensorType((), "bool"))
    s, row = b.add_input("s", T), b.add_input("row", T)
    (s2,) = add_op(b, "add", [s, row])
    (twice,) = add_op(b, "mul", [s, b.add_constant(np.float32(2), "two")])
    if stop_above is not None:
        (total,) = add_op(b, "sum", [s2])
        (go,) = add_op(b, "less_equal", [total, b.add_constant(np.float32(stop_above), "limit")])
    b.set_outputs([go, s2, twice])
    return b


def loop_graph(trips: int, reverse: bool, stop_above: float | None = None, length=None) -> Graph:
    g = Graph()
    s0, rows = g.add_input("s0", T), g.add_input("rows", TensorType((5, 3)))
    n, true = g.add_constant(np.array(trips, "int64"), "n"), g.add_constant(np.array(True), "true")
    outs = add_op(g, "loop", [n, true, s0, rows],
                  {"carried": 1, "scanned": 1, "length": trips if length is None else length,
                   "scan_reverse": (int(reverse),), "out_reverse": (int(reverse),)}, regions=[accumulate(stop_above)])
    g.set_outputs(outs)
    return g


def numpy_loop(s, rows, trips, reverse, stop_above=None):
    outs = []
    for i in range(trips):
        row = rows[len(rows) - 1 - i] if reverse else rows[i]
        outs.append(s * 2)
        s = s + row
        if stop_above is not None and s.sum() > stop_above:
            break
    outs = outs[::-1] if reverse else outs
    return s, np.stack(outs) if outs else np.zeros((0, 3), "float32")


@pytest.mark.parametrize("trips, reverse", [(0, False), (1, True), (5, False), (5, True)])
def test_loop_scans_like_a_numpy_loop(trips, reverse):
    s0, rows = random_array((3,)), random_array((5, 3))
    got = evaluate(loop_graph(trips, reverse), s0, rows)
    for a, e in zip(got, numpy_loop(s0, rows, trips, reverse)):
        np.testing.assert_allclose(a, e, rtol=1e-6)


def test_loop_stops_when_its_body_says_so():
    s0, rows = np.full(3, 0.5, "float32"), np.abs(random_array((5, 3))) + 1
    got = evaluate(loop_graph(5, False, stop_above=4.0, length="iterations"), s0, rows)
    expected = numpy_loop(s0, rows, 5, False, stop_above=4.0)
    assert 0 < len(got[1]) < 5
    for a, e in zip(got, expected):
        np.testing.assert_allclose(a, e, rtol=1e-6)


def _if_types(cond: TensorType, then_out: TensorType):
    then, other = Graph("then"), Graph("else")
    for r, t in ((then, then_out), (other, T)):
        x = r.add_input("x", T)
        r.set_outputs([x] if t == T else [r.add_constant(np.zeros(t.shape, t.dtype), "c")])
    return infer_types("if", [cond, T], {}, (then, other))


def test_if_refuses_what_it_cannot_run():
    with pytest.raises(OpTypeError, match="condition must be a bool"):
        _if_types(TensorType((), "float32"), T)
    with pytest.raises(OpTypeError, match="branches give different types"):
        _if_types(TensorType((), "bool"), TensorType((4,)))
    assert _if_types(TensorType((1,), "bool"), T)[1] == [T]


def test_loop_refuses_a_carried_value_whose_type_changes():
    b = accumulate()
    b.outputs[1] = b.outputs[2] = b.add_constant(np.zeros(4, "float32"), "other")
    with pytest.raises(OpTypeError, match="a carried value's type never changes"):
        infer_types("loop", [TensorType((), "int64"), TensorType((), "bool"), T, TensorType((5, 3))],
                    {"carried": 1, "scanned": 1, "length": 5}, (b,))

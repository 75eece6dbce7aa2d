"""The reference evaluator against NumPy on graphs of binary operators (built with add_op), and
its errors: inputs of the wrong number, dtype, rank or size, symbols bound two ways, unknown
operators, and nodes whose types disagree with what their operators compute."""

from __future__ import annotations

import numpy as np
import pytest

from ember.errors import ArgumentTypeError, ShapeError
from ember.graph import Graph, TensorType
from ember.ops import OpTypeError, UnsupportedOpError
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.testing import random_array


def small_graph() -> tuple[Graph, np.ndarray]:
    """out0 = max((x + b) * y, b) - x / 2; out1 = x + b; out2 = y (an input as an output)."""
    g = Graph()
    x = g.add_input("x", TensorType(("batch", 4)))
    y = g.add_input("y", TensorType(("batch", 1)))
    b_data = random_array((4,))
    b = g.add_constant(b_data, "b")
    two = g.add_constant(np.float32(2), "two")
    (s,) = add_op(g, "add", [x, b])
    (m,) = add_op(g, "mul", [s, y])
    (mx,) = add_op(g, "maximum", [m, b])
    (d,) = add_op(g, "div", [x, two])
    (out,) = add_op(g, "sub", [mx, d])
    g.set_outputs([out, s, y])
    return g, b_data


@pytest.mark.parametrize("batch", [1, 3])
def test_matches_numpy(batch):
    g, b = small_graph()
    x, y = random_array((batch, 4)), random_array((batch, 1))
    out, s, y_out = evaluate(g, x, y)
    np.testing.assert_allclose(out, np.maximum((x + b) * y, b) - x / np.float32(2), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(s, x + b)
    np.testing.assert_array_equal(y_out, y)
    assert out.dtype == s.dtype == np.float32


def test_integer_graph_is_exact():
    g = Graph()
    a = g.add_input("a", TensorType((5,), "int32"))
    c = g.add_input("c", TensorType((5,), "int32"))
    (q,) = add_op(g, "floor_divide", [a, c])
    (r,) = add_op(g, "mod", [a, c])
    (back,) = add_op(g, "add", [add_op(g, "mul", [q, c])[0], r])
    g.set_outputs([back])
    a_data = random_array((5,), "int32")
    c_data = random_array((5,), "int32")
    c_data[c_data == 0] = 7
    np.testing.assert_array_equal(evaluate(g, a_data, c_data)[0], a_data)


@pytest.mark.parametrize("args, error, message", [
    (lambda: [random_array((2, 4))], ArgumentTypeError, r"graph main takes 2 input\(s\) \(%x, %y\), got 1"),
    (lambda: [random_array((2, 4), "float64"), random_array((2, 1))], ArgumentTypeError,
     "input %x must be float32, got float64"),
    (lambda: [random_array((2, 4)), random_array((2,))], ShapeError,
     r"input %y must have rank 2 \(float32\[batch, 1\]\), got shape \(2,\)"),
    (lambda: [random_array((2, 5)), random_array((2, 1))], ShapeError,
     r"input %x must have shape float32\[batch, 4\], got \(2, 5\) \(dimension 1\)"),
    (lambda: [random_array((2, 4)), random_array((3, 1))], ShapeError,
     "input %y: dimension 0 is 'batch' = 3, but input %x set 'batch' = 2"),
])
def test_input_errors(args, error, message):
    g, _ = small_graph()
    with pytest.raises(error, match=message):
        evaluate(g, *args())


def test_unknown_operators_are_all_named():
    g = Graph()
    x = g.add_input("x", TensorType((2,)))
    (y,) = g.add_node("frobnicate", [x], {}, [TensorType((2,))]).outputs
    (z,) = g.add_node("add", [y, x], {}, [TensorType((2,))]).outputs
    g.add_node("twiddle", [z], {}, [TensorType((2,))], name="last")
    with pytest.raises(UnsupportedOpError) as info:
        evaluate(g, random_array((2,)))
    assert info.value.missing == [("frobnicate", "frobnicate"), ("twiddle", "last")]


def test_node_types_are_checked():
    g = Graph()
    x = g.add_input("x", TensorType((2, 3)))
    (y,) = g.add_node("add", [x, x], {}, [TensorType((3, 2))], name="liar").outputs
    g.set_outputs([y])
    with pytest.raises(ShapeError, match=r"node liar \(add\): output 0 %liar must have shape float32\[3, 2\]"):
        evaluate(g, random_array((2, 3)))
    y.type = TensorType((2, 3), "float16")
    with pytest.raises(ArgumentTypeError, match=r"node liar \(add\): output 0 %liar is float32 but its type says "
                                                 "float16"):
        evaluate(g, random_array((2, 3)))


def test_add_op_binds_and_infers():
    g = Graph()
    x = g.add_input("x", TensorType(("n", 1)))
    w = g.add_input("w", TensorType((3,), "float32"))
    (y,) = add_op(g, "pow", [x, w], name="p")
    assert (y.name, y.type, y.node.name) == ("p", TensorType(("n", 3)), "p")
    with pytest.raises(OpTypeError, match="do not broadcast") as info:
        add_op(g, "add", [y, g.add_input("v", TensorType((4,)))])
    assert info.value.__notes__ == ["while adding node add to graph main on %p: float32[n, 3], %v: float32[4]"]

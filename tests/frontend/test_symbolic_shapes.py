"""Shape arithmetic on symbolic dimensions folded at import (ember.frontend.symbolic): integer
expressions of symbols, and an ONNX model whose Reshape target is computed from the Shape of an
input with a symbolic batch, compiled once and run at two batch sizes."""

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import ember
from ember.frontend.onnx import OnnxImportError, import_onnx
from ember.frontend.symbolic import Expr, fold_arithmetic

SYMBOLS = ("a", "b")


def value(e, env: dict[str, int]) -> int:
    """An int, a symbol or an Expr at these symbol values."""
    if isinstance(e, str):
        return env[e]
    if isinstance(e, Expr):
        return sum(c * int(np.prod([env[s] for s in m])) for m, c in e.terms)
    return int(e)


leaves = st.one_of(st.integers(-5, 5), st.sampled_from(SYMBOLS))
trees = st.recursive(leaves, lambda sub: st.tuples(st.sampled_from(["add", "sub", "mul"]), sub, sub), max_leaves=8)


def build(tree):
    """The tree folded with fold_arithmetic on 0-d object arrays, and its value as a function."""
    if not isinstance(tree, tuple):
        return np.asarray(tree, dtype=object if isinstance(tree, str) else "int64"), lambda env: value(tree, env)
    op, left, right = tree
    (x, fx), (y, fy) = build(left), build(right)
    out = fold_arithmetic(op, [x, y])
    py = {"add": lambda u, v: u + v, "sub": lambda u, v: u - v, "mul": lambda u, v: u * v}[op]
    return out, lambda env: py(fx(env), fy(env))


@given(trees, st.integers(1, 9), st.integers(1, 9))
def test_folded_expression_has_the_value_of_the_arithmetic(tree, a, b):
    folded, direct = build(tree)
    env = {"a": a, "b": b}
    assert value(folded.item(), env) == direct(env)
    assert folded.dtype == (np.int64 if isinstance(folded.item(), int | np.integer) else object)


@given(trees, st.integers(1, 9), st.integers(-4, 4).filter(bool))
def test_exact_division_undoes_a_product(tree, a, k):
    folded, _ = build(tree)
    product = fold_arithmetic("mul", [folded, np.asarray(k)])
    back = fold_arithmetic("trunc_divide", [product, np.asarray(k)])
    assert value(back.item(), {"a": a, "b": 3}) == value(folded.item(), {"a": a, "b": 3})


def test_expressions_simplify_to_symbols_and_numbers():
    a, b = Expr.of("a"), Expr.of("b")
    assert (a * 8).divided(8).simplified() == "a"
    assert (a * b + a).divided(a).simplified() == Expr.of(1) + b
    assert ((a + 1) * 3).divided(a + 1).simplified() == 3
    assert (a - a).simplified() == 0
    assert str(a * b * 2 - 1) == "-1 + 2 * a * b"


def test_inexact_division_is_not_folded():
    assert fold_arithmetic("trunc_divide", [np.asarray(["a"], dtype=object), np.asarray([2])]) is None
    assert fold_arithmetic("div", [np.asarray(["a"], dtype=object), np.asarray([2.0], dtype="float32")]) is None


# -- an ONNX model with a symbolic batch --------------------------------------------------------


def ints(name, values):
    return onnx.numpy_helper.from_array(np.asarray(values, dtype="int64"), name)


def reshape_model():
    """y = relu(reshape(x, [N * 4 / 4 + 1 - 1, H * W])) for x of shape (N, 4, 6), the target
    computed from Shape(x) through Gather, Slice, Unsqueeze, Squeeze, Cast, Mul, Div, Add, Sub and
    Concat; and z = reshape(x, [N, -1, 2]) from the data movement alone."""
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["s"]),
        n("Gather", ["s", "zero"], ["batch"], axis=0),
        n("Unsqueeze", ["batch", "axis0"], ["batch1"]),
        n("Mul", ["batch1", "four"], ["times4"]),
        n("Div", ["times4", "four"], ["back"]),
        n("Add", ["back", "one"], ["plus1"]),
        n("Sub", ["plus1", "one"], ["lead"]),
        n("Slice", ["s", "one", "three"], ["hw"]),
        n("Cast", ["hw"], ["hw32"], to=TensorProto.INT32),
        n("Cast", ["hw32"], ["hw64"], to=TensorProto.INT64),
        n("ReduceProd", ["hw64"], ["area"], keepdims=1),
        n("Concat", ["lead", "area"], ["target"], axis=0),
        n("Reshape", ["x", "target"], ["r"]),
        n("Relu", ["r"], ["y"]),
        n("Squeeze", ["batch1", "axis0"], ["batch0"]),
        n("Unsqueeze", ["batch0", "axis0"], ["batch2"]),
        n("Concat", ["batch2", "minus_one", "two"], ["target2"], axis=0),
        n("Reshape", ["x", "target2"], ["z"]),
    ]
    inits = [ints("zero", 0), ints("axis0", [0]), ints("one", [1]), ints("three", [3]), ints("four", [4]),
             ints("minus_one", [-1]), ints("two", [2])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ("N", 4, 6))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ("N", 24)),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, ("N", 12, 2))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def test_reshape_target_from_shape_arithmetic_folds():
    graph = import_onnx(reshape_model())
    assert [n.op for n in graph.nodes] == ["reshape", "relu", "reshape"]
    assert [v.shape for v in graph.outputs] == [("N", 24), ("N", 12, 2)]


@pytest.fixture(scope="module")
def compiled():
    return ember.compile(reshape_model())


@pytest.mark.parametrize("batch", [2, 5])
def test_compiled_at_two_batch_sizes(compiled, batch):
    x = np.random.default_rng().uniform(-2, 2, (batch, 4, 6)).astype("float32")
    expected = ReferenceEvaluator(reshape_model()).run(None, {"x": x})
    for a, e in zip(compiled(x), expected, strict=True):
        np.testing.assert_allclose(np.asarray(a), e, rtol=1e-6, atol=0)


def test_inexact_division_of_a_symbol_is_named():
    n = helper.make_node
    nodes = [n("Shape", ["x"], ["s"]), n("Div", ["s", "two"], ["half"]), n("Reshape", ["x", "half"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ("N",))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ("M",))], [ints("two", [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OnnxImportError, match=r"Div node 'half': trunc_divide of the symbolic shape\(s\) \[\['N'\]\]"):
        import_onnx(model)

"""ONNX operators whose output size depends on the data (NonZero, Unique): compiled around, computed
on the host between compiled segments (ember.runtime.segmented), checked against onnx's reference
evaluator at inputs that give outputs of different sizes."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

import ember
from ember.errors import ArgumentTypeError, ArtifactError
from ember.frontend.onnx import import_onnx
from ember.runtime.segmented import SegmentedModel

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, initializers=()):
    g = oh.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)])


@pytest.fixture(scope="module")
def nonzero_model():
    """relu, then the coordinates of the non-zero elements, then arithmetic on them: a segment
    before the host step and one after it, whose input size is the count of non-zeros."""
    nodes = [oh.make_node("Relu", ["x"], ["r"]), oh.make_node("NonZero", ["r"], ["nz"]),
             oh.make_node("Transpose", ["nz"], ["t"]), oh.make_node("Cast", ["t"], ["f"], to=F),
             oh.make_node("Mul", ["f", "two"], ["y"])]
    model = _model(nodes, [oh.make_tensor_value_info("x", F, [4, 5])], [oh.make_tensor_value_info("y", F, [None, 2])],
                   [onnx.numpy_helper.from_array(np.array(2, np.float32), "two")])
    return model, ember.compile(model)


def test_nonzero_sizes_from_the_data(nonzero_model):
    model, cm = nonzero_model
    assert isinstance(cm, SegmentedModel) and len(cm.segments) == 2
    ref = ReferenceEvaluator(model)
    rng = np.random.default_rng(0)
    sizes = set()
    for shift in (-2.0, -0.5, 0.0, 0.5, 3.0):  # from almost no non-zero elements to all of them
        x = (rng.standard_normal((4, 5)) + shift).astype(np.float32)
        (expected,) = ref.run(None, {"x": x})
        y = cm(x)
        assert y.shape == expected.shape
        np.testing.assert_array_equal(y, expected)
        sizes.add(y.shape[0])
    assert len(sizes) >= 4


def test_nonzero_of_no_element(nonzero_model):
    _, cm = nonzero_model
    y = cm(-np.random.default_rng(1).random((4, 5)).astype(np.float32) - 1)
    assert y.shape == (0, 2)


def test_segmented_model_checks_inputs(nonzero_model):
    _, cm = nonzero_model
    with pytest.raises(ArgumentTypeError, match="dtype float64, expected float32"):
        cm(np.ones((4, 5)))


def test_not_one_artifact(nonzero_model):
    with pytest.raises(ArtifactError, match="segments"):
        nonzero_model[1].save("unused")


def test_nonzero_torch_tensors(nonzero_model):
    torch = pytest.importorskip("torch")
    _, cm = nonzero_model
    x = torch.randn(4, 5)
    y = cm(x)
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, torch.nonzero(torch.relu(x)).float() * 2)


# (onnx's reference of sorted=0 takes the values along axis 0 of the input as it is: right for a
# 1-D input or axis 0 only)
@pytest.mark.parametrize(("axis", "sorted_", "shape"), [(None, 1, (6, 4)), (None, 0, (24,)), (0, 1, (6, 4)),
                                                        (0, 0, (6, 4)), (1, 1, (6, 4))])
def test_unique(axis, sorted_, shape):
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    nodes = [oh.make_node("Abs", ["x"], ["a"]), oh.make_node("Unique", ["a"], ["u", "i", "inv", "c"], **attrs),
             oh.make_node("Neg", ["u"], ["y"])]
    out_rank = 1 if axis is None else len(shape)
    outputs = [oh.make_tensor_value_info("y", F, [None] * out_rank)] + [
        oh.make_tensor_value_info(n, TensorProto.INT64, [None]) for n in ("i", "inv", "c")]
    model = _model(nodes, [oh.make_tensor_value_info("x", F, shape)], outputs)
    cm = ember.compile(model)
    ref = ReferenceEvaluator(model)
    rng = np.random.default_rng(axis or 7)
    sizes = set()
    for levels in (1, 2, 3, 50):  # how many distinct values (or slices): from one to (almost) all
        if axis is None:
            x = rng.integers(-levels, levels + 1, shape).astype(np.float32)
        else:  # `levels` distinct slices (at most all), repeated along the axis in a random order
            x = rng.integers(-50, 51, shape).astype(np.float32)
            x = np.take(x, rng.permutation(np.arange(shape[axis]) % min(levels, shape[axis])), axis=axis)
        expected = ref.run(None, {"x": x})
        actual = cm(x)
        for a, e in zip(actual, expected):
            assert a.dtype == e.dtype
            np.testing.assert_array_equal(a, e)
        sizes.add(actual[0].shape[0 if axis is None else axis])
    assert len(sizes) >= 3


def test_nonzero_of_a_constant_folds():
    """NonZero of an initializer is folded at import to an array of the size its data gives."""
    data = np.array([[0, 1, 0], [2, 0, 3]], np.float32)
    model = _model([oh.make_node("NonZero", ["c"], ["nz"]), oh.make_node("Add", ["nz", "x"], ["y"])],
                   [oh.make_tensor_value_info("x", TensorProto.INT64, [1, 1])],
                   [oh.make_tensor_value_info("y", TensorProto.INT64, [2, 3])],
                   [onnx.numpy_helper.from_array(data, "c")])
    graph = import_onnx(model)
    assert [n.op for n in graph.nodes] == ["add"]
    x = np.array([[5]], np.int64)
    np.testing.assert_array_equal(ember.compile(model)(x), np.array(np.nonzero(data)) + 5)

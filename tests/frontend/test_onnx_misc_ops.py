"""ONNX operators checked against onnx's ReferenceEvaluator on fresh random data, through the
reference evaluator and compiled: CumProd, Det, BatchNormalization in training mode (the batch's
statistics and the running ones), Dropout in training mode with ratio 0."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import ember
from ember.frontend.onnx import import_onnx
from ember.ops.evaluate import evaluate
from ember.testing import assert_close

RNG = np.random.default_rng()


def one_node(op: str, inputs: dict[str, np.ndarray], outputs: list[str], opset: int = 21,
             consts: dict[str, np.ndarray] | None = None, node_inputs: list[str] | None = None,
             domain: str = "", **attrs) -> onnx.ModelProto:
    """A model of one `op` node: graph inputs of these arrays' types, then initializers `consts`
    (the node takes them in that order, or `node_inputs`); outputs typed by ONNX's inference."""
    consts = consts or {}
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
                    for n, x in inputs.items()]
    inits = [onnx.numpy_helper.from_array(v, n) for n, v in consts.items()]
    node = helper.make_node(op, node_inputs or [*inputs, *consts], outputs, **attrs)
    graph = helper.make_graph([node], op.lower(), graph_inputs,
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def check(model: onnx.ModelProto, inputs: dict[str, np.ndarray], rtol: float, atol: float, compiled: bool = True):
    """ember's reference evaluator and (when `compiled`) its compiled model against onnx's
    ReferenceEvaluator."""
    expected = ReferenceEvaluator(model).run(None, inputs)
    runs = [("ember's reference", evaluate(import_onnx(model), *inputs.values()))]
    if compiled:
        out = ember.compile(model)(*inputs.values())
        runs.append(("compiled", list(out) if isinstance(out, tuple | list) else [out]))
    for what, actual in runs:
        assert len(actual) == len(expected)
        for k, (a, e) in enumerate(zip(actual, expected)):
            a = np.asarray(a)
            got, want = f"{a.dtype}{a.shape}", f"{e.dtype}{e.shape}"
            assert got == want, f"{what} output {k}: {got} != {want}"
            assert_close(a, e, rtol, atol, f"{what} output {k} vs onnx's ReferenceEvaluator")


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumprod(exclusive, reverse):
    x = (RNG.uniform(0.7, 1.3, (3, 40, 2)) * RNG.choice([-1.0, 1.0], (3, 40, 2))).astype("float32")
    model = one_node("CumProd", {"x": x}, ["y"], opset=26, consts={"axis": np.array(-2, "int64")},
                     exclusive=exclusive, reverse=reverse)
    check(model, {"x": x}, 1e-5, 1e-6)


def test_cumprod_axis_given_at_run_time():
    """A runtime axis: the model is compiled per value of it (a SpecializedModel)."""
    x = RNG.uniform(0.5, 1.5, (4, 5)).astype("float64")
    model = one_node("CumProd", {"x": x, "axis": np.array(0, "int32")}, ["y"], opset=26)
    cm = ember.compile(model)
    for axis in (1, 0, -1):
        a = np.array(axis, "int32")
        (e,) = ReferenceEvaluator(model).run(None, {"x": x, "axis": a})
        assert_close(np.asarray(cm(x, a)), e, 1e-12, 1e-12, f"axis {axis}")


@pytest.mark.parametrize("shape, dtype", [((5, 5), "float32"), ((2, 3, 4, 4), "float64")])
def test_det(shape, dtype):
    x = RNG.uniform(-1, 1, shape).astype(dtype)
    check(one_node("Det", {"x": x}, ["y"]), {"x": x}, 1e-4 if dtype == "float32" else 1e-10, 1e-6)


@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (6, 3)])
def test_batch_norm_training_mode(shape):
    c = shape[1]
    inputs = {"x": RNG.uniform(-2, 3, shape).astype("float32"), "s": RNG.uniform(0.5, 2, c).astype("float32"),
              "b": RNG.uniform(-1, 1, c).astype("float32"), "mean": RNG.uniform(-1, 1, c).astype("float32"),
              "var": RNG.uniform(0.5, 2, c).astype("float32")}
    model = one_node("BatchNormalization", inputs, ["y", "running_mean", "running_var"], opset=15,
                     training_mode=1, momentum=0.8, epsilon=1e-3)
    check(model, inputs, 1e-4, 1e-5)


def test_dropout_training_with_ratio_zero():
    x = RNG.uniform(-2, 2, (3, 4, 5)).astype("float32")
    model = one_node("Dropout", {"x": x}, ["y", "mask"], opset=13,
                     consts={"ratio": np.array(0.0, "float32"), "training_mode": np.array(True)})
    check(model, {"x": x}, 0, 0)
    model = one_node("Dropout", {"x": x}, ["y"], opset=13,
                     consts={"ratio": np.array(0.5, "float32"), "training_mode": np.array(True)})
    with pytest.raises(ember.ops.UnsupportedOpError, match=r"Dropout\(training_mode=True\)"):
        import_onnx(model)

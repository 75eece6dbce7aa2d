"""Cubic resize (ember/ops/resize.py, mode="cubic") on the C target against its NumPy reference
and PyTorch's bicubic interpolation (Keys' kernel, a = -0.75, half_pixel and align_corners),
upsampling and downsampling; exclude_outside and another coefficient against the reference; the
ONNX converter against onnx's ReferenceEvaluator."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch.nn.functional as F
from onnx import helper
from onnx.reference import ReferenceEvaluator

from ember.frontend.onnx import import_onnx
from ember.ops.evaluate import evaluate
from ember.testing import assert_close, check_op

RNG = np.random.default_rng()
TOL = {"rtol": 1e-5, "atol": 1e-5}


def rand(*shape) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


@pytest.mark.parametrize("size", [(10, 14), (3, 4), (7, 7)])
def test_cubic_against_torch_bicubic(size):
    x = rand(2, 3, 5, 7)
    for mode, align in (("half_pixel", False), ("align_corners", True)):
        check_op("resize", [x], {"sizes": size, "mode": "cubic", "coordinate_transformation_mode": mode}, **TOL,
                 torch_fn=lambda t, a=align: F.interpolate(t, size=size, mode="bicubic", align_corners=a))


def test_cubic_exclude_outside_and_coefficient():
    x = rand(1, 2, 6, 5)
    for attrs in ({"exclude_outside": True}, {"cubic_coeff_a": -0.5, "coordinate_transformation_mode": "asymmetric"},
                  {"coordinate_transformation_mode": "pytorch_half_pixel", "sizes": (1, 9)}):
        check_op("resize", [x], {"sizes": (9, 3), "mode": "cubic", **attrs}, **TOL)
    check_op("resize", [rand(2, 3, 8)], {"sizes": (5,), "mode": "cubic"}, **TOL)  # 1-d


def test_onnx_cubic_resize_against_reference_evaluator():
    x = rand(1, 2, 4, 6)
    for attrs, sizes in [({}, (1, 2, 8, 9)), ({"exclude_outside": 1, "cubic_coeff_a": -0.5}, (1, 2, 3, 4))]:
        node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="cubic", **attrs)
        graph = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                                                   x.shape)],
                                  [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, sizes)],
                                  [onnx.numpy_helper.from_array(np.array(sizes, "int64"), "sizes")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
        (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
        (actual,) = evaluate(import_onnx(model), x)
        assert_close(actual, expected, 1e-5, 1e-5, "cubic resize vs onnx's ReferenceEvaluator")


def test_cubic_needs_floats():
    from ember.graph.core import TensorType
    from ember.ops import OpTypeError, infer_types

    with pytest.raises(OpTypeError, match="cubic"):
        infer_types("resize", [TensorType((1, 1, 4, 4), "int32")], {"sizes": (8, 8), "mode": "cubic"})

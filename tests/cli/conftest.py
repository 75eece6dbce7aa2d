"""The small ONNX models the `ember` command is tested on."""

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

MATMUL_RELU = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]


@pytest.fixture
def save_onnx(tmp_path):
    """Write a float32 graph from input x to output y (opset 17) to tmp_path/model.onnx;
    `nodes` default to y = relu(x @ w)."""

    def save(x_shape, y_shape, weights: dict, nodes=None):
        graph = helper.make_graph(
            MATMUL_RELU if nodes is None else nodes,
            "mlp",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
            [numpy_helper.from_array(array, name) for name, array in weights.items()],
        )
        path = tmp_path / "model.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        return path

    return save

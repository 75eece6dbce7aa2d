"""Small ONNX models built in tests: a graph of nodes with NumPy initializers, at opset 21, shapes
inferred and checked."""

import numpy as np
import onnx
from onnx import helper, numpy_helper


def model(nodes, inputs, outputs, inits, name: str = "test") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    made.ir_version = 10
    return onnx.shape_inference.infer_shapes(made, check_type=True)


def value_info(name, elem, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)

"""Checking the ONNX frontend against onnxruntime: small models written in ONNX's text format
(`onnx_model`), random inputs for their graph inputs (`random_inputs`), and `check_onnx`, which
imports a model, runs the ember graph and compares every output with onnxruntime's.

The ember graph runs on the reference evaluator (`run_ember`): the one place to switch when
compiled models should be checked too.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort

from ember.frontend.onnx import import_onnx
from ember.graph.core import Graph
from ember.ops.evaluate import evaluate
from ember.testing import assert_close


def onnx_model(graph_text: str, opset: int = 17, **initializers: np.ndarray) -> onnx.ModelProto:
    """A model from ONNX's text format (`name (float[2, 3] x) => (float y) { y = Relu(x) }`);
    outputs declared without a shape get the one ONNX infers; initializers are arrays by name."""
    opset_id = onnx.helper.make_opsetid("", opset)
    model = onnx.parser.parse_model(f'<ir_version: 8, opset_import: ["" : {opset}]>\n{graph_text}')
    model.ir_version = onnx.helper.find_min_ir_version_for([opset_id])
    for vi in model.graph.output:  # the text format declares `float y` as a scalar
        if not vi.type.tensor_type.shape.dim:
            vi.type.tensor_type.ClearField("shape")
    model.graph.initializer.extend(onnx.numpy_helper.from_array(np.asarray(a), name)
                                   for name, a in initializers.items())
    return onnx.shape_inference.infer_shapes(model, check_type=True)


def random_inputs(model: onnx.ModelProto, rng: np.random.Generator, sizes: dict[str, int] | None = None,
                  low: float = -3.0, high: float = 3.0) -> list[np.ndarray]:
    """Fresh data for each graph input: floats uniform in [low, high), ints in [0, 5), bools;
    symbolic dimensions take their size from `sizes`."""
    inits = {i.name for i in model.graph.initializer}
    arrays = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else sizes[d.dim_param] for d in tt.shape.dim)
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
        if dtype.kind == "f":
            arrays.append(rng.uniform(low, high, shape).astype(dtype))
        elif dtype.kind == "b":
            arrays.append(rng.random(shape) < 0.5)
        else:
            arrays.append(rng.integers(0, 5, shape).astype(dtype))
    return arrays


def run_onnxruntime(model: onnx.ModelProto, inputs: list[np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3  # no warnings about the output shapes the text format leaves out
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs)))


def run_ember(graph: Graph, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return evaluate(graph, *inputs)


def check_onnx(model: onnx.ModelProto, inputs: list[np.ndarray], rtol: float, atol: float) -> Graph:
    """Import `model`, run it on `inputs` with ember and with onnxruntime, compare every output."""
    graph = import_onnx(model)
    expected = run_onnxruntime(model, inputs)
    actual = run_ember(graph, inputs)
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert_close(a, e, rtol, atol, f"output {k} ({model.graph.output[k].name}) vs onnxruntime")
    return graph

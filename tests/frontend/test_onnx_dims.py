"""ONNX dim_params that are expressions of symbols ("past_sequence_length + 1"): imported as
dimension expressions (ember.dims), one compile run at several sizes, an input whose expression
dimension disagrees with its symbols refused; other dim_params stay one sanitized symbol. Sizes
used as values (a position cast to float, a table's row at it, Range to it, a causal Trilu over
symbolic sizes) computed at run time, against onnxruntime (rtol 1e-6)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.errors import ShapeError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from ember.frontend.onnx import import_onnx  # noqa: E402

RNG = np.random.default_rng()


def _cache_model():
    """y = concat(past, new) * mask[..., None]: the cache grows by one, the mask covers it."""
    nodes = [
        helper.make_node("Concat", ["past", "new"], ["cat"], axis=1),
        helper.make_node("Unsqueeze", ["mask", "axes"], ["mask3"]),
        helper.make_node("Mul", ["cat", "mask3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "cache",
        [helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, "past_sequence_length", 4]),
         helper.make_tensor_value_info("new", TensorProto.FLOAT, [1, 1, 4]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, "past_sequence_length + 1"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "past_sequence_length + 1", 4])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_expression_dim_params_run_at_every_size():
    model = _cache_model()
    g = import_onnx(model)
    assert [v.shape for v in g.inputs] == [(1, "past_sequence_length", 4), (1, 1, 4), (1, "past_sequence_length + 1")]
    cm = ember.compile(model)
    assert cm.spec.outputs[0].shape == (1, "past_sequence_length + 1", 4)
    for past in (1, 5, 33):
        p, n = RNG.standard_normal((1, past, 4), dtype=np.float32), RNG.standard_normal((1, 1, 4), dtype=np.float32)
        mask = RNG.standard_normal((1, past + 1), dtype=np.float32)
        np.testing.assert_allclose(cm(p, n, mask), np.concatenate([p, n], axis=1) * mask[..., None], rtol=1e-6)
    with pytest.raises(ShapeError, match=r"input 'mask' dimension 1 is 5, expected past_sequence_length \+ 1 = 4"):
        cm(np.zeros((1, 3, 4), np.float32), np.zeros((1, 1, 4), np.float32), np.zeros((1, 5), np.float32))


def test_other_dim_params_are_one_symbol():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch size", "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch size", "n"])])
    g = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert g.inputs[0].shape == ("batch_size", "n")


def _positions_model():
    """What an exported decode step and prefill compute from their sizes: the cache's length P as
    a float (a rotary position), a table's row at P (a position embedding), Range(0, P) and the
    causal Trilu of an (S, S) score matrix (a prefill's mask)."""
    n = helper.make_node
    nodes = [n("Shape", ["cache"], ["p"], start=1, end=2), n("Cast", ["p"], ["pos"], to=TensorProto.FLOAT),
             n("Gather", ["table", "p"], ["row"], axis=0), n("Squeeze", ["p"], ["p0"]),
             n("Range", ["zero", "p0", "one"], ["ramp"]), n("Cast", ["ramp"], ["ramp_f"], to=TensorProto.FLOAT),
             n("Trilu", ["scores"], ["causal"], upper=0), n("Add", ["pos", "ramp_f"], ["shifted"])]
    graph = helper.make_graph(
        nodes, "positions",
        [helper.make_tensor_value_info("cache", TensorProto.FLOAT, [1, "past", 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, "seq", "seq"])],
        [helper.make_tensor_value_info(v, TensorProto.FLOAT, shape)
         for v, shape in (("row", [1, 4]), ("shifted", ["past"]), ("causal", [1, "seq", "seq"]))],
        [helper.make_tensor("zero", TensorProto.INT64, [], [0]), helper.make_tensor("one", TensorProto.INT64, [], [1]),
         helper.make_tensor("table", TensorProto.FLOAT, [9, 4], RNG.standard_normal(36).tolist())])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_sizes_used_as_values_run_at_every_size():
    """The sizes are read at run time (`size` nodes, an arange of symbolic length, a mask compared
    from aranges): one compile, against onnxruntime at two sizes of each symbol."""
    from onnx_check import run_onnxruntime

    model = _positions_model()
    cm = ember.compile(model)
    assert "size" in {n.op for n in cm.graph.nodes} and "arange" in {n.op for n in cm.graph.nodes}
    for past, seq in ((3, 5), (7, 2)):
        inputs = [RNG.standard_normal((1, past, 4), dtype=np.float32), RNG.standard_normal((1, seq, seq), np.float32)]
        for got, want in zip(cm(*inputs), run_onnxruntime(model, inputs)):
            np.testing.assert_allclose(got, want, rtol=1e-6)

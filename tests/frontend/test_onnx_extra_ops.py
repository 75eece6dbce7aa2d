"""ONNX operators outside the default domain and the last default-domain stragglers, each a
one-node model compiled with ember.compile and checked against onnx's ReferenceEvaluator on
fresh random inputs: ai.onnx.preview FlexAttention (plain and grouped-query through the fused
attention, score_mod / prob_mod subgraphs inline over the unfused form)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.backend.test.case.node.flexattention import (
    _make_prob_mod_scale_graph,
    _make_score_mod_causal_mask_graph,
    _make_score_mod_relative_positional_graph,
    _make_score_mod_soft_cap_graph,
)
from onnx.reference import ReferenceEvaluator

import ember
from ember.testing import assert_close

RNG = np.random.default_rng()


def model_of(node: onnx.NodeProto, inputs: list[np.ndarray], opsets: dict[str, int]) -> onnx.ModelProto:
    """A model of one node whose inputs x0, x1, ... are graph inputs of these arrays' types."""
    graph_inputs = [helper.make_tensor_value_info(f"x{k}", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
                    for k, x in enumerate(inputs)]
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in node.output]
    graph = helper.make_graph([node], node.op_type.lower(), graph_inputs, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    return onnx.shape_inference.infer_shapes(model)


def check_compiled(model: onnx.ModelProto, inputs: list[np.ndarray], rtol: float, atol: float) -> None:
    expected = ReferenceEvaluator(model).run(None, {f"x{k}": x for k, x in enumerate(inputs)})
    actual = ember.compile(model)(*inputs)
    actual = actual if isinstance(actual, (list, tuple)) else [actual]
    for k, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert a.dtype == e.dtype and a.shape == e.shape, f"output {k}: {a.dtype}{a.shape} != {e.dtype}{e.shape}"
        assert_close(a, e, rtol, atol, f"output {k} vs onnx's ReferenceEvaluator")


# -- FlexAttention ---------------------------------------------------------------------------------

PREVIEW = {"": 26, "ai.onnx.preview": 1}


def flex(q, k, v, **attrs) -> onnx.ModelProto:
    node = helper.make_node("FlexAttention", ["x0", "x1", "x2"], ["y"], domain="ai.onnx.preview", **attrs)
    return model_of(node, [q, k, v], PREVIEW)


@pytest.mark.parametrize("dtype, heads", [("float32", (4, 4)), ("float32", (6, 2)), ("float16", (4, 2))])
def test_flex_attention_fused(dtype, heads):
    q = RNG.uniform(-1, 1, (2, heads[0], 5, 8)).astype(dtype)
    k = RNG.uniform(-1, 1, (2, heads[1], 7, 8)).astype(dtype)
    v = RNG.uniform(-1, 1, (2, heads[1], 7, 12)).astype(dtype)
    rtol = 2e-3 if dtype == "float16" else 1e-5
    check_compiled(flex(q, k, v, scale=0.3 if heads[0] == 6 else None), [q, k, v], rtol, rtol)


@pytest.mark.parametrize("mods", ["causal+prob", "soft_cap", "relative"])
def test_flex_attention_subgraphs(mods):
    q = RNG.uniform(-1, 1, (1, 4, 6, 8)).astype("float32")
    k = RNG.uniform(-1, 1, (1, 2, 6, 8)).astype("float32")
    v = RNG.uniform(-1, 1, (1, 2, 6, 4)).astype("float32")
    score_mod = {"causal+prob": _make_score_mod_causal_mask_graph(),
                 "soft_cap": _make_score_mod_soft_cap_graph(RNG.uniform(0.5, 2.0)),
                 "relative": _make_score_mod_relative_positional_graph()}[mods]
    attrs = {"score_mod": score_mod}
    if mods == "causal+prob":
        attrs["prob_mod"] = _make_prob_mod_scale_graph(RNG.uniform(0.5, 2.0))
    check_compiled(flex(q, k, v, **attrs), [q, k, v], 1e-5, 1e-5)

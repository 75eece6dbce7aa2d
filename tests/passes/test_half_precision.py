"""The GPU's half-precision passes (ember.passes.half_precision, ember.passes.tf32_products) on
an imported graph: the signature keeps the user's names and dtypes, every float constant is
converted once, activations are half between the nodes, and the graph still computes the model
within half precision (the NumPy references, ember.ops.evaluate)."""

import numpy as np
import pytest
import torch

from ember.frontend.torch import import_module
from ember.ops.bits import round_tf32
from ember.ops.evaluate import evaluate
from ember.passes.half_precision import bf16_activations, fp16_activations
from ember.passes.tf32_products import tf32_products


@pytest.fixture(scope="module")
def mlp_graph():
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()
    x = torch.randn(3, 8)
    return model, x, import_module(model, (x,))


def test_half_activations_keep_the_signature_and_convert_every_weight_once(mlp_graph):
    model, x, graph = mlp_graph
    for convert, half in ((fp16_activations, "float16"), (bf16_activations, "bfloat16")):
        out = convert(graph)
        assert [(v.name, v.type) for v in out.inputs] == [(v.name, v.type) for v in graph.inputs]
        assert [(v.name, v.type) for v in out.outputs] == [(v.name, v.type) for v in graph.outputs]
        assert {str(c.dtype) for c in out.constants.values()} == {half}
        assert len(out.constants) == len(graph.constants)
        assert all(v.type.dtype == half for n in out.nodes for v in n.outputs if v not in out.outputs)
        fresh = torch.randn(3, 8)
        (got,) = evaluate(out, fresh.numpy())
        want = model(fresh).detach().numpy()
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2


def test_tf32_rounds_the_products_operands_only(mlp_graph):
    _, _, graph = mlp_graph
    out = tf32_products(graph)
    assert sum(n.op == "round_tf32" for n in out.nodes) == 2  # the two layers' activations
    assert all(v.type.dtype == "float32" for n in out.nodes for v in n.outputs)
    weights = [c for c in out.constants.values() if c.ndim == 2]
    assert weights and all(np.array_equal(w, round_tf32(w)) for w in weights)

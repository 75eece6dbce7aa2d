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
from ember.passes.conv_gemm import conv_gemm
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


def test_convolutions_of_one_group_become_implicit_gemms_and_depthwise_ones_stay():
    torch.manual_seed(6)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8),
                                torch.nn.Conv2d(8, 4, 1)).eval()
    x = torch.randn(1, 3, 9, 9)
    half = fp16_activations(import_module(model, (x,)))
    out = conv_gemm(half)
    assert [n.op for n in out.nodes if n.op.startswith("conv")] == ["conv2d_gemm", "conv2d", "conv2d_gemm"]
    assert {c.shape for c in out.constants.values() if c.ndim == 2} == {(8, 27), (4, 8)}  # (OC, C*KH*KW)
    fresh = torch.randn(1, 3, 9, 9)
    (got,) = evaluate(out, fresh.numpy())
    (before,) = evaluate(half, fresh.numpy())
    np.testing.assert_allclose(got, before, rtol=1e-2, atol=1e-2)  # the same sums, in another order
    want = model(fresh).detach().numpy()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2


def test_a_recurrent_cell_keeps_float32_inputs_between_half_activations():
    torch.manual_seed(6)
    model = torch.nn.LSTM(4, 3).eval()
    x = torch.randn(5, 1, 4)
    out = fp16_activations(import_module(model, (x,)))
    cell = next(n for n in out.nodes if n.op == "lstm")
    assert {v.type.dtype for v in cell.inputs} == {"float32"}
    got = evaluate(out, x.numpy())[0]
    want = model(x)[0].detach().numpy()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2

"""The default schedule of an elementwise kernel whose innermost extent no vector width divides
(wav2vec2's 3199 samples): read at its own place, its innermost loops are fused and vectorized
(a GELU in vectors, not a scalar erf per element); read through a broadcast, it stays scalar
(a fused index would divide per lane). Both checked against NumPy."""

import numpy as np
import torch

import ember
from ember.graph import Graph, TensorType
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.testing import random_array


def _gelu_graph(per_channel: bool) -> Graph:
    g = Graph("odd_rows")
    x = g.add_input("x", TensorType((1, 8, 37)))
    (y,) = add_op(g, "gelu", [x])
    scale = g.add_constant(random_array((1, 8, 1) if per_channel else ()), "scale")
    g.set_outputs(add_op(g, "mul", [y, scale]))
    return g


def _kernel(cm) -> str:
    """The C of the model's one kernel (the prelude defines the vector functions either way)."""
    (k,) = cm.kernels
    body = cm.source[cm.source.index(f"void {k.name}("):]
    return body[:body.index("\n}\n")]


def test_same_place_elementwise_is_vectorized_across_rows():
    g = _gelu_graph(per_channel=False)
    cm = ember.compile(g)
    assert "ember_erf_float32x" in _kernel(cm)  # 8 x 37 = 296 elements: vectors of 8
    x = random_array((1, 8, 37))
    np.testing.assert_allclose(cm(x), evaluate(g, x)[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cm(x), torch.nn.functional.gelu(torch.from_numpy(x)).numpy() * g.constants["scale"],
                               rtol=1e-5, atol=1e-6)


def test_a_broadcast_operand_keeps_the_rows_scalar():
    g = _gelu_graph(per_channel=True)
    cm = ember.compile(g)
    assert "ember_erf_float32(" in _kernel(cm)
    x = random_array((1, 8, 37))
    np.testing.assert_allclose(cm(x), evaluate(g, x)[0], rtol=1e-5, atol=1e-6)

"""trim_taps: the taps of a convolution that read only padding are sliced off its kernel and the
padding shrinks, compared with the untrimmed graph (NumPy references) and, for a dilated atrous
branch imported from torch and through the pipeline, with torch."""

import numpy as np
import pytest
import torch
from pass_check import check_same

from ember.frontend.torch import import_module
from ember.graph import Graph, TensorType
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.passes.pipeline import run_pipeline
from ember.passes.trim_taps import trim_taps


def _rand(*shape):
    return np.random.default_rng().standard_normal(shape).astype("float32")


def _conv(spatial, kernel, groups=1, **attrs):
    g = Graph()
    x = g.add_input("x", TensorType((1, 4, *spatial)))
    w = g.add_constant(_rand(6, 4 // groups, *kernel), "w")
    y, = add_op(g, f"conv{len(spatial)}d", [x, w, g.add_constant(_rand(6), "b")], {"groups": groups, **attrs})
    g.set_outputs([y])
    return g


@pytest.mark.parametrize("spatial, kernel, attrs, trimmed", [
    # dilation beyond the map: the centre tap alone, a 1x1 convolution without padding
    ((5, 6), (3, 3), {"dilations": (8, 8), "padding": (8, 8, 8, 8)}, (1, 1)),
    # one axis only; the other's taps all reach the input
    ((5, 9), (3, 3), {"dilations": (6, 2), "padding": (6, 2, 6, 2)}, (1, 3)),
    # asymmetric padding and a stride: the first row of taps reads padding alone
    ((2, 4), (3, 3), {"padding": (3, 0, 0, 0), "strides": (2, 1)}, (2, 3)),
    # conv1d, grouped
    ((7,), (5,), {"dilations": (4,), "padding": (8, 8), "groups": 2}, (3,)),
])
def test_trims_and_keeps_values(spatial, kernel, attrs, trimmed):
    g = _conv(spatial, kernel, **attrs)
    out = trim_taps(g)
    assert out.constants[out.nodes[0].inputs[1].name].shape[2:] == trimmed
    assert min(out.nodes[0].attrs["padding"]) >= 0
    check_same(g, out)


@pytest.mark.parametrize("spatial, kernel, attrs", [
    ((6, 6), (3, 3), {"dilations": (2, 2), "padding": (2, 2, 2, 2)}),  # every tap reaches the input
    ((6, 6), (3, 3), {"dilations": (5, 5), "padding": (4, 4, 4, 4)}),  # dead taps, but the padding would go negative
])
def test_left_alone(spatial, kernel, attrs):
    g = _conv(spatial, kernel, **attrs)
    assert trim_taps(g) is g


def test_atrous_branch_against_torch():
    """DeepLabV3's atrous branch at a rate beyond the map, in small, through the pipeline: a 1x1
    convolution without padding that matches torch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(32, 16, 3, padding=12, dilation=12), torch.nn.ReLU()).eval()
    graph = run_pipeline(import_module(model, (torch.randn(1, 32, 9, 10),)), opt_level=2)
    conv, = (n for n in graph.nodes if n.op.startswith("conv"))
    assert graph.constants[conv.inputs[1].name].shape[2:4] == (1, 1)
    assert not any(conv.attrs["padding"])
    for _ in range(2):
        x = torch.randn(1, 32, 9, 10)
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(evaluate(graph, x.numpy())[0], want, rtol=1e-4, atol=1e-5)

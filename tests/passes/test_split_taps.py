"""split_taps: a convolution whose taps read padding over much of its map computed region by
region (each region's live taps over the input it reads), compared with the whole convolution
(NumPy references); convolutions that waste little left whole; an atrous branch in small
compiled through the pipeline, blocked throughout, against torch."""

import numpy as np
import pytest
import torch
from pass_check import check_same, ops

import ember
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.split_taps import split_taps


def _rand(*shape):
    return np.random.default_rng().standard_normal(shape).astype("float32")


def _conv(spatial, kernel, **attrs):
    g = Graph()
    x = g.add_input("x", TensorType((1, 4, *spatial)))
    w = g.add_constant(_rand(6, 4, *kernel), "w")
    y, = add_op(g, "conv2d", [x, w, g.add_constant(_rand(6), "b")], attrs)
    g.set_outputs([y])
    return g


@pytest.mark.parametrize("spatial, kernel, attrs, regions", [
    # rate 6 over 9 x 10: three bands a side, the centre one tap
    ((9, 10), (3, 3), {"dilations": (6, 6), "padding": (6, 6, 6, 6)}, 9),
    # a stride, asymmetric padding, a 2 x 3 kernel
    ((12, 11), (2, 3), {"dilations": (7, 5), "strides": (2, 1), "padding": (7, 5, 3, 5)}, 9),
    # dilated along W alone: one band of rows
    ((6, 12), (3, 3), {"dilations": (1, 8), "padding": (1, 8, 1, 8)}, 3),
])
def test_regions_compute_the_convolution(spatial, kernel, attrs, regions):
    g = _conv(spatial, kernel, **attrs)
    out = split_taps(g)
    assert ops(out).count("conv2d") == regions
    check_same(g, out)


@pytest.mark.parametrize("spatial, attrs", [
    ((3, 3), {"padding": (1, 1, 1, 1)}),  # undilated: 0.6 of the work, but in 9 regions of a few pixels
    ((12, 12), {"dilations": (2, 2), "padding": (2, 2, 2, 2)}),
])
def test_little_waste_stays_whole(spatial, attrs):
    g = _conv(spatial, (3, 3), **attrs)
    assert split_taps(g) is g


def test_atrous_branch_against_torch():
    """A 1x1 convolution, then an atrous 3x3 at rate 6 over 9 x 10 with batch norm and ReLU: its
    regions read the blocked input through slices and are concatenated blocked."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 32, 1), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 16, 3, padding=6, dilation=6, bias=False),
                                torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 1)).eval()
    with torch.no_grad():
        model[3].running_mean.uniform_(-0.5, 0.5)
        model[3].running_var.uniform_(0.5, 1.5)
    cm = ember.compile(model, example_inputs=(torch.randn(1, 8, 9, 10),))
    assert sum("conv2d_nchwc" in k.ops for k in cm.kernels) >= 4  # the regions (some alike: one kernel)
    assert not any("layout_transform" in k.ops for k in cm.kernels)  # NCHW in and out, blocked between
    for _ in range(2):
        x = torch.randn(1, 8, 9, 10)
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(np.asarray(cm(x)), want, rtol=1e-4, atol=1e-4)

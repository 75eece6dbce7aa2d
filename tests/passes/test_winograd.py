"""The winograd pass (ember/passes/winograd.py): which blocked 3x3 convolutions become
conv2d_winograd and with which tile (the per-layer rule), the residual add and ReLU taken into
the operator only where nothing else reads the convolution's result, the pass disabled by name;
the compiled graph against the unoptimized one on fresh random inputs."""

import numpy as np
import pytest
from pass_check import ops

import ember
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.pipeline import run_pipeline
from ember.passes.winograd import choose_tile
from ember.testing import random_array

LEVEL = 2


def conv(g, x, out_channels, k=3, **attrs):
    w = g.add_constant(random_array((out_channels, x.shape[1], k, k)) / np.float32(3 * x.shape[1] ** 0.5), "w")
    b = g.add_constant(random_array((out_channels,)), "b")
    return add_op(g, "conv2d", [x, w, b], {"padding": (k // 2,) * 4, **attrs})[0]


def op(g, name, *inputs, **attrs):
    return add_op(g, name, list(inputs), attrs)[0]


def block_graph() -> Graph:
    """A first conv (on the plain input: direct), conv-relu, conv-add-relu (a residual block),
    the sum of two convs then relu on 16 x 16, a max pool, then on 8 x 8 a conv whose result two
    operators read, a strided conv, and a global mean."""
    g = Graph("blocks")
    x = g.add_input("x", TensorType((1, 16, 16, 16)))
    a = op(g, "relu", conv(g, op(g, "relu", conv(g, x, 16)), 16))
    b = op(g, "relu", op(g, "add", conv(g, a, 16), a))
    b = op(g, "relu", op(g, "add", conv(g, b, 16), conv(g, b, 16)))  # the first conv takes the add
    p = op(g, "max_pool2d", b, kernel=(2, 2), strides=(2, 2))
    c = conv(g, p, 32)
    d = op(g, "add", op(g, "relu", c), c)  # c read twice: its relu stays outside
    e = op(g, "relu", conv(g, d, 32, strides=(2, 2)))  # strided: direct
    g.set_outputs([op(g, "mean", e, axes=(2, 3), keepdims=False)])
    return g


@pytest.fixture(scope="module")
def optimized():
    return run_pipeline(block_graph(), LEVEL)


def test_rule_on_resnet18_layers():
    assert choose_tile(64, 64, 56, 56) == 4
    assert choose_tile(256, 256, 14, 14) == 4
    assert choose_tile(512, 512, 7, 7) == 2  # F(4x4)'s two tiles a side: half their products wasted
    assert choose_tile(512, 512, 3, 3) is None  # too few tiles to pay for the transforms
    assert choose_tile(8, 64, 56, 56) is None  # too few channels


def test_the_pass_picks_and_fuses(optimized):
    wino = [n for n in optimized.nodes if n.op == "conv2d_winograd"]
    assert [(n.inputs[1].shape[0], n.attrs["residual"], n.attrs["relu"]) for n in wino] == [
        (36, False, True), (36, True, True), (36, False, False), (36, True, True), (16, False, False)]
    assert all(optimized.is_constant(n.inputs[1]) for n in wino)
    assert ops(optimized).count("conv2d_nchwc") == 2  # the first and the strided one
    assert ops(optimized).count("relu") == 3  # theirs and the shared conv's


def test_disabled_by_name():
    out = run_pipeline(block_graph(), LEVEL, disabled_passes=["winograd"])
    assert "conv2d_winograd" not in ops(out) and ops(out).count("conv2d_nchwc") == 7


def test_compiled_matches_unoptimized():
    g = block_graph()
    cm = ember.compile(g, opt_level=LEVEL)
    assert any("conv2d_winograd" in k.ops for k in cm.kernels)
    x = random_array((1, 16, 16, 16))
    want = ember.compile(g, opt_level=0)(x)
    np.testing.assert_allclose(cm(x), want, rtol=1e-4, atol=1e-4)

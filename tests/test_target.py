"""The target is one object: named or given, it decides the code generator, the compiler and
flags, the SIMD width of the kernels and of the layout pass, the alignment and the tuning key."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.codegen.c import CRenderer
from ember.graph import Graph, TensorType
from ember.lowering import partition
from ember.ops.nodes import add_op
from ember.passes.plan_memory import ALIGN as PLAN_ALIGN
from ember.runtime.model import ALIGN as RUNTIME_ALIGN
from ember.target import ALIGN, Target, as_target
from ember.testing import random_array


def conv_graph() -> Graph:
    """Two 3x3 convolutions on 16 channels with a relu between: the layout pass blocks them."""
    g = Graph("conv")
    y = g.add_input("x", TensorType((1, 16, 8, 8)))
    for k in range(2):
        w = g.add_constant(random_array((16, 16, 3, 3)), f"w{k}")
        (y,) = add_op(g, "relu", add_op(g, "conv2d", [y, w], {"padding": (1, 1, 1, 1)}))
    g.set_outputs([y])
    return g


def test_targets_by_name_and_by_value():
    assert as_target("c") == Target() and as_target(Target()) == Target()
    assert Target().vector_bytes in (16, 32, 64) and Target().key.startswith("c | ")
    python = as_target("python")
    assert python.vector_bytes is None and python.lanes == 1 and python.key == "python" and python.cc is None
    cuda = as_target("cuda")
    assert cuda.vector_bytes is None and cuda.key == "cuda" and cuda.cc is None
    assert as_target("c", cflags="-O1 -fopenmp -shared -fPIC").cflags == "-O1 -fopenmp -shared -fPIC"
    assert CRenderer.ALIGN == PLAN_ALIGN == RUNTIME_ALIGN == ALIGN  # one alignment


def test_bad_targets_are_config_errors():
    with pytest.raises(ember.ConfigError, match="unknown target 'metal'"):
        as_target("metal")
    with pytest.raises(ember.ConfigError, match="target 'cuda' has no C compiler"):
        as_target("cuda", cc="gcc")
    with pytest.raises(ember.ConfigError, match="cc and cflags are for target 'c'"):
        as_target("python", cc="gcc")
    with pytest.raises(ember.ConfigError, match="target must be one of"):
        as_target(3)


def test_the_layout_pass_blocks_channels_by_the_targets_width():
    def blocks(vector_bytes):  # the output channel block of each convolution's packed weights
        graph = partition(conv_graph(), 2, target=Target(vector_bytes=vector_bytes)).graph
        return {n.inputs[1].shape[-1] for n in graph.nodes if n.op == "conv2d_nchwc"}

    assert blocks(16) == {4} and blocks(32) == {8}


def test_a_compiled_model_is_built_for_its_target():
    g = conv_graph()
    x = random_array((1, 16, 8, 8))
    want = ember.compile(g, opt_level=0)(x)
    narrow = ember.compile(g, target=Target(vector_bytes=16))
    assert narrow.spec.target["vector_bytes"] == 16 and narrow.spec.target["target"] == "c"
    np.testing.assert_allclose(narrow(x), want, rtol=1e-4, atol=1e-4)

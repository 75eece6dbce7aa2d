"""Fused conv2d and matmul epilogues (bias, activation, batch-norm scale and shift, residual add)
write their output with vector stores while the accumulator tile stays in registers: the conv's
tile of channel vectors is transposed in registers and stored along the output columns (with a
tail of columns, each column's channel vector is stored with the channels' stride). The fused
kernels compute what the NumPy references compute."""

import re

import numpy as np
import pytest

import ember
from ember.graph import Graph, TensorType
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.passes.fuse import FUSE_LEVEL
from ember.testing import random_array

RTOL = ATOL = 1e-4


def conv_bias_relu(width: int, channels: int = 32) -> Graph:
    g = Graph("conv_bias_relu")
    x = g.add_input("x", TensorType((1, 16, 10, width)))
    w = g.add_constant(random_array((channels, 16, 3, 3)), "w")
    (y,) = add_op(g, "conv2d", [x, w], {"padding": (1, 1, 1, 1)})
    (y,) = add_op(g, "add", [y, g.add_constant(random_array((1, channels, 1, 1)), "b")])
    g.set_outputs(add_op(g, "relu", [y]))
    return g


def conv_scale_shift_residual_relu(width: int) -> Graph:
    """conv2d -> batch-norm scale and shift (per channel) -> add(residual) -> relu."""
    g = Graph("conv_bn_residual_relu")
    x = g.add_input("x", TensorType((1, 16, 8, width)))
    residual = g.add_input("residual", TensorType((1, 32, 8, width)))
    (y,) = add_op(g, "conv2d", [x, g.add_constant(random_array((32, 16, 3, 3)), "w")], {"padding": (1, 1, 1, 1)})
    (y,) = add_op(g, "mul", [y, g.add_constant(random_array((1, 32, 1, 1)) + 1.5, "scale")])
    (y,) = add_op(g, "add", [y, g.add_constant(random_array((1, 32, 1, 1)), "shift")])
    (y,) = add_op(g, "add", [y, residual])
    g.set_outputs(add_op(g, "relu", [y]))
    return g


def matmul_bias_gelu() -> Graph:
    g = Graph("matmul_bias_gelu")
    x = g.add_input("x", TensorType((24, 64)))
    (y,) = add_op(g, "matmul", [x, g.add_constant(random_array((64, 48)), "w")])
    (y,) = add_op(g, "add", [y, g.add_constant(random_array((48,)), "b")])
    g.set_outputs(add_op(g, "gelu", [y]))
    return g


def kernel_source(source: str, name: str) -> str:
    start = source.index(f"void {name}(")
    return source[start:source.index("\n}\n", start)]


def output_stores(kernel: str) -> list[str]:
    """The statements of a kernel that write its output (its one non-const pointer)."""
    (out,) = re.findall(r"[(,] ?float\* restrict (\w+)", kernel.split("\n", 1)[0])
    return [line.strip() for line in kernel.splitlines() if re.search(rf"\b{out}\b(\[.*\] =| \+)", line)
            and not line.lstrip().startswith("void")]


def compile_fused(g: Graph, ops: tuple[str, ...]):
    cm = ember.compile(g, opt_level=FUSE_LEVEL)
    assert [k.ops for k in cm.kernels] == [ops]
    return cm, kernel_source(cm.source, cm.kernels[0].name)


def check_matches_reference(cm, g: Graph):
    inputs = [random_array(v.shape, v.dtype) for v in g.inputs]
    (want,) = evaluate(g, *inputs)
    np.testing.assert_allclose(cm(*inputs), want, rtol=RTOL, atol=ATOL)


def check_vector_stores_from_registers(kernel: str, accumulator: str):
    stores = output_stores(kernel)
    assert stores and all(s.startswith("ember_store_float32x") for s in stores), stores[:3]
    assert f"/* {accumulator}: in registers */" in kernel


# (width, channels): the tile's columns, and the transposes that write them (one lane unused of 8;
# 16 x 16; 24 columns as 16 + 8)
TILES = {(16, 32): ["16x8"], (14, 32): ["16x8"], (16, 16): ["16x16"], (24, 16): ["16x16", "16x8"]}


@pytest.mark.parametrize("width, channels", TILES)
def test_conv_bias_relu_stores_vectors(width, channels):
    g = conv_bias_relu(width, channels)
    cm, kernel = compile_fused(g, ("conv2d", "add", "relu"))
    check_vector_stores_from_registers(kernel, "conv_local")
    for shape in TILES[width, channels]:  # the channel-vector tile, transposed in registers
        assert f"ember_column_float32x{shape}(" in kernel
    check_matches_reference(cm, g)


@pytest.mark.parametrize("width", [16, 28])
def test_conv_scale_shift_residual_relu_stores_vectors(width):
    g = conv_scale_shift_residual_relu(width)
    cm, kernel = compile_fused(g, ("conv2d", "mul", "add", "add", "relu"))
    check_vector_stores_from_registers(kernel, "conv_local")
    check_matches_reference(cm, g)


def test_conv_with_a_column_tail_still_matches():
    """13 columns have no tile without a tail: the columns stay unrolled, and the epilogue runs on
    each column's vector of channels from the registers, stored with a channel's stride."""
    g = conv_bias_relu(13)
    cm, kernel = compile_fused(g, ("conv2d", "add", "relu"))
    assert not output_stores(kernel) and "ember_scatter_float32x16(" in kernel  # no scalar store left
    assert "/* conv_local: in registers */" in kernel
    check_matches_reference(cm, g)


def test_matmul_bias_gelu_stores_vectors():
    g = matmul_bias_gelu()
    cm, kernel = compile_fused(g, ("gemm", "gelu"))  # the bias is the gemm's own (passes.flatten_products)
    check_vector_stores_from_registers(kernel, "matmul_local")
    check_matches_reference(cm, g)

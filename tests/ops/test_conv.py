"""Convolutions (ember/ops/conv.py) against their NumPy references and PyTorch on the C target:
strides, asymmetric padding, dilations, groups (depthwise too), bias, output channels that do not
fill a 16-channel block, conv1d, conv_transpose2d; a symbolic batch; tiny cases on the
interpreter; the register-tiled schedule with an elementwise epilogue fused after the conv, and
its full tiles unguarded where the last one has a tail; and the errors of bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import ember
from ember import te
from ember.graph.core import TensorType
from ember.ops import OpTypeError, get, infer_types
from ember.schedules.apply import compute_node
from ember.schedules.cpu import schedule_for
from ember.target import Target
from ember.te.tensor import input_tensors_of
from ember.testing import assert_close, check_op, check_op_sizes
from ember.tir.expr import as_int
from ember.tir.functor import collect
from ember.tir.stmt import IfThenElse

RNG = np.random.default_rng()
TOL = {"rtol": 1e-4, "atol": 1e-4}


def rand(*shape) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


def torch_pads(attrs):
    """F.conv2d takes symmetric padding: pad the input explicitly for ONNX-style pads."""
    pads = attrs.get("padding", (0, 0, 0, 0))
    return lambda x: F.pad(x, (pads[1], pads[3], pads[0], pads[2]))


# (x shape, w shape, with bias, attributes)
CONV2D = [
    ((1, 3, 8, 8), (16, 3, 3, 3), False, {"padding": (1, 1, 1, 1)}),
    ((2, 5, 9, 11), (20, 5, 3, 2), True, {"padding": (1, 0, 2, 1), "strides": (2, 1), "dilations": (1, 2)}),
    ((2, 8, 9, 11), (12, 2, 3, 3), True, {"padding": (1, 1, 1, 1), "groups": 4}),
    ((1, 16, 10, 16), (16, 1, 3, 3), False, {"padding": (1, 1, 1, 1), "groups": 16}),
    ((1, 6, 7, 7), (6, 1, 3, 3), True, {"padding": (1, 1, 1, 1), "groups": 6, "strides": (2, 2)}),
    ((1, 32, 28, 28), (64, 32, 3, 3), True, {"padding": (1, 1, 1, 1)}),
    ((1, 64, 14, 14), (32, 64, 1, 1), False, {}),
    ((1, 16, 12, 12), (16, 4, 3, 3), False, {"padding": (1, 1, 1, 1), "groups": 4}),  # 4-lane columns
    # grouped, in blocks of output channels: a block spanning groups (ResNeXt's 8 per group), and
    # blocks inside one group; 6 groups of 4 do not make whole blocks of 16 (the per-group form)
    ((1, 64, 10, 10), (64, 8, 3, 3), True, {"padding": (1, 1, 1, 1), "groups": 8}),
    ((1, 64, 9, 9), (64, 32, 3, 3), False, {"padding": (1, 1, 1, 1), "groups": 2, "strides": (2, 2)}),
    ((1, 24, 6, 6), (24, 4, 3, 3), False, {"groups": 6}),
]


@pytest.mark.parametrize("x_shape, w_shape, bias, attrs", CONV2D)
def test_conv2d_against_torch(x_shape, w_shape, bias, attrs):
    x, w = rand(*x_shape), rand(*w_shape)
    inputs = [x, w] + ([rand(w_shape[0])] if bias else [])
    pad = torch_pads(attrs)

    def torch_fn(x, w, b=None):
        return F.conv2d(pad(x), w, b, stride=attrs.get("strides", 1), dilation=attrs.get("dilations", 1),
                        groups=attrs.get("groups", 1))

    check_op("conv2d", inputs, attrs, **TOL, torch_fn=torch_fn)


def test_grouped_conv1d_against_torch():
    """wav2vec2's positional convolution, small: groups of 16 output channels, a long kernel."""
    x, w, b = rand(1, 32, 40), rand(32, 16, 9), rand(32)
    check_op("conv1d", [x, w, b], {"padding": (4, 4), "groups": 2}, **TOL,
             torch_fn=lambda x, w, b: F.conv1d(x, w, b, padding=4, groups=2))


def test_conv1d_against_torch():
    x, w, b = rand(2, 4, 20), rand(8, 4, 5), rand(8)
    attrs = {"padding": (2, 1), "strides": (2,), "dilations": (2,)}
    check_op("conv1d", [x, w, b], attrs, **TOL,
             torch_fn=lambda x, w, b: F.conv1d(F.pad(x, (2, 1)), w, b, stride=2, dilation=2))


@pytest.mark.parametrize("x_shape, w_shape, bias, attrs, torch_kwargs", [
    ((2, 4, 5, 6), (4, 6, 3, 3), True, {"padding": (1, 1, 1, 1), "strides": (2, 2), "output_padding": (1, 1)},
     {"stride": 2, "padding": 1, "output_padding": 1}),
    ((2, 4, 5, 6), (4, 3, 3, 2), False, {"strides": (2, 1), "groups": 2, "dilations": (2, 1)},
     {"stride": (2, 1), "groups": 2, "dilation": (2, 1)}),
    ((1, 8, 4, 4), (8, 16, 4, 4), False, {"strides": (2, 2), "padding": (1, 1, 1, 1)}, {"stride": 2, "padding": 1}),
    ((1, 6, 4, 5), (6, 1, 3, 3), True, {"strides": (2, 2), "padding": (1, 1, 1, 1), "groups": 6},
     {"stride": 2, "padding": 1, "groups": 6}),  # depthwise
    ((1, 16, 5, 5), (16, 8, 3, 3), True, {"strides": (2, 2), "groups": 2}, {"stride": 2, "groups": 2}),
])
def test_conv_transpose2d_against_torch(x_shape, w_shape, bias, attrs, torch_kwargs):
    inputs = [rand(*x_shape), rand(*w_shape)] + ([rand(w_shape[1] * attrs.get("groups", 1))] if bias else [])
    check_op("conv_transpose2d", inputs, attrs, **TOL,
             torch_fn=lambda x, w, b=None: F.conv_transpose2d(x, w, b, **torch_kwargs))


def test_conv2d_symbolic_batch():
    w, b = rand(16, 3, 3, 3), rand(16)
    attrs = {"padding": (1, 1, 1, 1), "strides": (2, 2)}
    types = [TensorType(("batch", 3, 10, 10)), TensorType(w.shape), TensorType(b.shape)]
    check_op_sizes("conv2d", types, attrs, [[rand(1, 3, 10, 10), w, b], [rand(3, 3, 10, 10), w, b]], **TOL,
                   torch_fn=lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1))


@pytest.mark.parametrize("op, x_shape, w_shape, attrs", [
    ("conv2d", (1, 2, 4, 4), (3, 2, 3, 3), {"padding": (1, 0, 0, 1)}),
    ("conv2d", (1, 4, 5, 4), (4, 2, 2, 2), {"groups": 2, "strides": (2, 1)}),
    ("conv1d", (1, 8, 9), (8, 2, 3), {"groups": 4, "padding": (1, 1)}),
    ("conv_transpose2d", (1, 2, 3, 3), (2, 3, 2, 2), {"strides": (2, 2)}),
])
def test_tiny_convs_on_the_interpreter(op, x_shape, w_shape, attrs):
    check_op(op, [rand(*x_shape), rand(*w_shape)], attrs, **TOL, targets=("c", "python"))


@pytest.mark.parametrize("op, x_shape, w_shape, attrs", [
    ("conv2d", (1, 5, 9, 9), (20, 5, 3, 3), {"padding": (1, 1, 1, 1)}),  # 20 channels: 3 blocks of 8, the last cut
    ("conv2d", (1, 12, 8, 8), (12, 1, 3, 3), {"groups": 12, "strides": (2, 2)}),  # depthwise
    ("conv1d", (2, 3, 17), (9, 3, 4), {"padding": (2, 1)}),
    ("conv_transpose2d", (1, 6, 5, 5), (6, 10, 3, 3), {"strides": (2, 2)}),
])
def test_convs_packed_for_an_avx2_target(op, x_shape, w_shape, attrs):
    """The weights are packed in blocks of the target's lanes: 8 output channels for AVX2."""
    avx2 = Target.x86("avx2")
    if avx2.missing():
        pytest.skip(f"this machine lacks {avx2.missing()}")
    in_types = [TensorType(x_shape), TensorType(w_shape)]
    bound, out_types = infer_types(op, in_types, attrs)
    _, (out,) = compute_node(op, in_types, bound, out_types, target=avx2)
    packed = [op.output(0) for op in input_tensors_of([out]) if op.name in ("w_packed", "conv")]
    assert len(packed) == 2 and {as_int(t.shape[-1]) for t in packed} == {8}
    check_op(op, [rand(*x_shape), rand(*w_shape)], attrs, **TOL, targets=(avx2,))


def test_conv2d_with_a_fused_relu_epilogue():
    """The conv schedule tiles the epilogue's output and keeps the accumulation in its tile."""
    x, w, b = rand(1, 8, 12, 12), rand(32, 8, 3, 3), rand(32)
    in_types = [TensorType(a.shape) for a in (x, w, b)]
    attrs, out_types = infer_types("conv2d", in_types, {"padding": (1, 1, 1, 1)})
    inputs, (conv,) = compute_node("conv2d", in_types, attrs, out_types)
    relu = te.compute(conv.shape, lambda *i: te.max(conv[i], te.const(0.0)), name="relu")
    s = te.create_schedule(relu.op)
    schedule_for(get("conv2d"))(s, [relu], Target())
    assert "conv_local" in str(ember.lower(s, [*inputs, relu]))  # the accumulator tile
    f = ember.build(s, [*inputs, relu])
    out = np.empty(out_types[0].shape, "float32")
    f(x, w, b, out)
    expected = F.conv2d(*map(torch.from_numpy, (x, w, b)), padding=1).relu().numpy()
    assert_close(out, expected, **TOL, what="conv2d + relu")


def test_a_tile_with_a_tail_of_columns_runs_its_full_tiles_unguarded():
    """29 output columns in tiles of 12: the tiles' guards are tested once per tile (a copy
    without them for the full tiles), not on every step of the reduction."""
    x, w = rand(1, 8, 59), rand(32, 8, 3)
    in_types = [TensorType(a.shape) for a in (x, w)]
    attrs, out_types = infer_types("conv1d", in_types, {"strides": (2,)})
    inputs, (out,) = compute_node("conv1d", in_types, attrs, out_types)
    s = te.create_schedule(out.op)
    schedule_for(get("conv1d"))(s, [out], Target())
    func = ember.lower(s, [*inputs, out])
    assert collect(func.body, lambda n: isinstance(n, IfThenElse) and n.else_case is not None)
    got = np.empty(out_types[0].shape, "float32")
    ember.build(s, [*inputs, out])(x, w, got)
    assert_close(got, F.conv1d(torch.from_numpy(x), torch.from_numpy(w), stride=2).numpy(), **TOL, what="conv1d")


@pytest.mark.parametrize("op, shapes, attrs, message", [
    ("conv2d", [(1, 3, 8, 8), (4, 2, 3, 3)], {}, "x has 3 channels"),
    ("conv2d", [(1, 4, 8, 8), (5, 2, 3, 3)], {"groups": 2}, "groups=2 does not divide"),
    ("conv2d", [(1, 4, 8), (6, 4, 3, 3)], {}, "must be rank 4"),
    ("conv2d", [(1, 3, 8, 8), (4, 3, 3, 3), (5,)], {}, "bias of shape (5,)"),
    ("conv2d", [(1, 3, 2, 2), (4, 3, 3, 3)], {}, "larger than the padded input"),
    ("conv2d", [(1, 3, 8, 8), (4, 3, 3, 3)], {"padding": (1, 1)}, "padding (1, 1) must be 4 integers"),
    ("conv2d", [(1, 3, 8, 8), (4, 3, 3, 3)], {"strides": (0, 1)}, "must be >= 1"),
    ("conv2d", [(1, 3, "h", 8), (4, 3, 3, 3)], {}, "only have a symbolic batch"),
    ("conv1d", [(1, 3, 8), (4, 3, 3)], {"groups": 0}, "groups must be a positive integer"),
    ("conv_transpose2d", [(1, 3, 4, 4), (4, 2, 3, 3)], {}, "x has 3 channels but w"),
    ("conv_transpose2d", [(1, 4, 4, 4), (4, 2, 3, 3)], {"strides": (2, 2), "output_padding": (2, 0)},
     "output_padding (2, 0)"),
])
def test_conv_errors(op, shapes, attrs, message):
    dtypes = ["float32"] * len(shapes)
    with pytest.raises(OpTypeError) as e:
        infer_types(op, [TensorType(s, d) for s, d in zip(shapes, dtypes)], attrs)
    assert op in str(e.value) and message in str(e.value)


def test_conv_needs_floats():
    with pytest.raises(OpTypeError, match="conv2d needs a floating-point input"):
        infer_types("conv2d", [TensorType((1, 3, 8, 8), "int32"), TensorType((4, 3, 3, 3), "int32")])

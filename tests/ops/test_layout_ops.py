"""Blocked channel layouts (ember/ops/layout.py): layout_transform against NumPy reshapes and
transposes, conv2d_nchwc (dense, plain NCHW input, depthwise, NCHW output, a symbolic batch, a
fused epilogue), max_pool2d_nchwc and avg_pool2d_nchwc against PyTorch, and the errors of bad layouts and shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import ember
from ember import te
from ember.graph.core import TensorType
from ember.ops import OpTypeError, get, infer_types
from ember.ops.layout import convert_layout, grouped_weights
from ember.schedules.apply import compute_node
from ember.schedules.cpu import schedule_for
from ember.target import Target
from ember.testing import assert_close, check_op, check_op_sizes
from ember.tir.functor import collect
from ember.tir.stmt import For

RNG = np.random.default_rng()
TOL = {"rtol": 1e-4, "atol": 1e-4}


def rand(*shape) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


def nchwc(x: np.ndarray, b: int) -> np.ndarray:
    """NCHW -> NCHW{b}c by hand: (N, C/b, b, H, W) with the block axis moved last."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def oihw_io(w: np.ndarray, ib: int, ob: int) -> np.ndarray:
    """OIHW -> OIHW{ib}i{ob}o by hand."""
    o, i, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(o // ob, ob, i // ib, ib, kh, kw).transpose(0, 2, 4, 5, 3, 1))


# -- layout_transform ----------------------------------------------------------------------------


@pytest.mark.parametrize("src, dst, shape, expected", [
    ("NCHW", "NCHW16c", (2, 32, 5, 7), lambda x: nchwc(x, 16)),
    ("NCHW", "NCHW8c", (1, 24, 3, 4), lambda x: nchwc(x, 8)),
    ("OIHW", "OIHW8i16o", (32, 16, 3, 3), lambda w: oihw_io(w, 8, 16)),
    ("OIHW", "OIHW1i16o", (16, 3, 7, 7), lambda w: oihw_io(w, 1, 16)),
    ("NCHW", "NHWC", (2, 3, 4, 5), lambda x: x.transpose(0, 2, 3, 1)),
])
def test_layout_transform_against_numpy(src, dst, shape, expected):
    x = rand(*shape)
    check_op("layout_transform", [x], {"src": src, "dst": dst}, rtol=0, atol=0, torch_fn=lambda t: expected(t.numpy()))


@pytest.mark.parametrize("src, dst", [("NCHW16c", "NCHW"), ("NCHW16c", "NCHW8c"), ("NCHW8c", "NCHW16c")])
def test_layout_transform_between_blocks(src, dst):
    x = rand(2, 32, 3, 5)
    blocked = convert_layout(x, "NCHW", src)
    out = check_op("layout_transform", [blocked], {"src": src, "dst": dst}, rtol=0, atol=0)[0]
    np.testing.assert_array_equal(convert_layout(out, dst, "NCHW"), x)


def test_layout_transform_symbolic_batch():
    x = rand(3, 16, 4, 4)
    check_op_sizes("layout_transform", [TensorType(("n", 16, 4, 4))], {"src": "NCHW", "dst": "NCHW16c"},
                   [[x[:1]], [x]], rtol=0, atol=0, torch_fn=lambda t: nchwc(t.numpy(), 16))


@pytest.mark.parametrize("shape, attrs, message", [
    ((1, 24, 4, 4), {"src": "NCHW", "dst": "NCHW16c"}, "axis C of size 24 does not split into blocks of 16"),
    ((1, 8, 4, 4), {"src": "NCHW", "dst": "NCDW"}, "different primal axes"),
    ((1, 8, 4, 4), {"src": "NCHW", "dst": "NCHWc"}, "the block c needs a positive size"),
    ((1, 8, 4, 4), {"src": "NCHW", "dst": "NCHW8C"}, "the primal axis C takes no size"),
    ((1, 8, 4, 4), {"src": "NCHW", "dst": "NCHW8c8c"}, "names an axis twice"),
    ((1, 8, 4, 4), {"src": "NCHW", "dst": "NHW8c"}, "block(s) ['c'] of no primal axis"),
    ((1, 8, 4, 4), {"src": "NCH", "dst": "NCH"}, "is not in layout 'NCH'"),
    ((1, 8, 4, 4, 2), {"src": "NCHW16c", "dst": "NCHW"}, "must be 16 in layout 'NCHW16c'"),
    ((1, 8, 4, 4), {"src": "NCHW", "dst": "NCHW-8c"}, "must be axis letters"),
])
def test_layout_transform_errors(shape, attrs, message):
    with pytest.raises(OpTypeError, match="^layout_transform: ") as e:
        infer_types("layout_transform", [TensorType(shape)], attrs)
    assert message in str(e.value)


# -- conv2d_nchwc --------------------------------------------------------------------------------


def torch_conv(x, w, b, attrs, groups):
    pads = attrs.get("padding", (0, 0, 0, 0))
    x = F.pad(torch.from_numpy(x), (pads[1], pads[3], pads[0], pads[2]))
    return F.conv2d(x, torch.from_numpy(w), None if b is None else torch.from_numpy(b),
                    stride=attrs.get("strides", 1), dilation=attrs.get("dilations", 1), groups=groups).numpy()


# (x shape, w shape, groups, input block (1: plain NCHW), output block, attributes)
CONVS = [
    ((1, 32, 9, 11), (16, 32, 3, 3), 1, 16, 16, {"padding": (1, 1, 1, 1)}),
    ((2, 16, 12, 12), (32, 16, 3, 3), 1, 8, 16, {"padding": (1, 0, 2, 1), "strides": (2, 1), "dilations": (1, 2)}),
    ((1, 3, 20, 20), (16, 3, 7, 7), 1, 1, 16, {"padding": (3, 3, 3, 3), "strides": (2, 2)}),  # a first layer
    ((1, 16, 8, 8), (32, 16, 1, 1), 1, 16, 32, {"strides": (2, 2)}),
    ((1, 32, 10, 10), (32, 1, 3, 3), 32, 16, 16, {"padding": (1, 1, 1, 1)}),  # depthwise
    ((2, 24, 9, 9), (24, 1, 3, 3), 24, 8, 8, {"padding": (1, 1, 1, 1), "strides": (2, 2)}),
    # depthwise, its padded tile per output tile: uneven pads, a partial column tile, dilated rows
    ((1, 16, 11, 33), (16, 1, 5, 5), 16, 16, 16, {"padding": (2, 1, 2, 3), "strides": (1, 2), "dilations": (2, 1)}),
    # depthwise, stride 1: a tile of two output rows, a partial column tile
    ((1, 16, 6, 29), (16, 1, 3, 3), 16, 16, 16, {"padding": (1, 1, 1, 1)}),
    ((1, 16, 7, 30), (16, 16, 3, 3), 1, 16, 16, {"padding": (1, 1, 1, 1)}),  # a partial column tile
    ((1, 16, 5, 29), (32, 16, 3, 3), 1, 16, 16, {"padding": (1, 1, 1, 1)}),  # a tile of two blocks, partial
    ((1, 8, 6, 11), (24, 8, 1, 1), 1, 8, 8, {}),  # a tile of three blocks, a partial column tile
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x_shape, w_shape, groups, ib, ob, attrs", CONVS)
def test_conv2d_nchwc_against_torch(x_shape, w_shape, groups, ib, ob, attrs, bias):
    x, w = rand(*x_shape), rand(*w_shape)
    b = rand(w_shape[0]) if bias else None
    xb = nchwc(x, ib) if ib > 1 else x
    wb = oihw_io(w, 1 if groups > 1 else ib, ob)
    attrs = {**attrs, "groups": groups}
    out = check_op("conv2d_nchwc", [xb, wb] + ([b] if bias else []), attrs, **TOL,
                   torch_fn=lambda *_: nchwc(torch_conv(x, w, b, attrs, groups), ob))[0]
    plain = check_op("conv2d_nchwc", [xb, wb] + ([b] if bias else []), {**attrs, "out_layout": "NCHW"}, **TOL)[0]
    assert_close(plain, convert_layout(out, f"NCHW{ob}c", "NCHW"), **TOL, what="NCHW output")


@pytest.mark.parametrize("k", [1, 3])
def test_conv2d_nchwc_sums_over_in_channels_only(k):
    """24 channels in two blocks of 16: the last 8 lanes (random here, not zeros) are never read."""
    x, w, b = rand(1, 24, 6, 13), rand(32, 24, k, k), rand(32)
    xb = nchwc(np.concatenate([x, rand(1, 8, 6, 13)], axis=1), 16)
    wb = oihw_io(np.concatenate([w, rand(32, 8, k, k)], axis=1), 16, 16)
    attrs = {"padding": (k // 2,) * 4, "in_channels": 24}
    check_op("conv2d_nchwc", [xb, wb, b], attrs, **TOL, torch_fn=lambda *_: nchwc(torch_conv(x, w, b, attrs, 1), 16))


# grouped (x shape, w shape, groups, block, attributes): blocks spanning 4 and 2 groups (ResNeXt's
# 4 and 8 channels a group), a block inside a group of 16, two input blocks a group of 32; RegNet's
# groups of 8 in blocks of 8; partial column tiles
GROUPED = [
    ((1, 64, 6, 13), (64, 4, 3, 3), 16, 16, {"padding": (1, 1, 1, 1)}),
    ((1, 32, 7, 9), (32, 8, 3, 3), 4, 16, {"padding": (1, 1, 1, 1), "strides": (2, 2)}),
    ((1, 32, 5, 7), (32, 16, 3, 3), 2, 16, {"padding": (1, 1, 1, 1)}),
    ((1, 64, 5, 6), (64, 32, 3, 3), 2, 16, {"padding": (1, 1, 1, 1)}),
    ((1, 24, 5, 11), (24, 8, 3, 3), 3, 8, {"padding": (1, 1, 1, 1)}),
]


@pytest.mark.parametrize("x_shape, w_shape, groups, block, attrs", GROUPED)
def test_grouped_conv2d_nchwc_against_torch(x_shape, w_shape, groups, block, attrs):
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[0])
    attrs = {**attrs, "groups": groups}
    check_op("conv2d_nchwc", [nchwc(x, block), grouped_weights(w, groups, block), b], attrs, **TOL,
             torch_fn=lambda *_: nchwc(torch_conv(x, w, b, attrs, groups), block))


def test_tiny_cases_on_the_interpreter():
    x, w = rand(1, 8, 4, 5), rand(8, 8, 3, 3)
    check_op("layout_transform", [x], {"src": "NCHW", "dst": "NCHW4c"}, rtol=0, atol=0, targets=("c", "python"))
    check_op("conv2d_nchwc", [nchwc(x, 4), oihw_io(w, 4, 4)], {"padding": (1, 0, 0, 1)}, **TOL,
             targets=("c", "python"))


def test_conv2d_nchwc_symbolic_batch():
    x, w, b = rand(3, 32, 6, 6), rand(16, 32, 3, 3), rand(16)
    types = [TensorType(("n", 2, 6, 6, 16)), TensorType((1, 2, 3, 3, 16, 16)), TensorType((16,))]
    check_op_sizes("conv2d_nchwc", types, {"padding": (1, 1, 1, 1)},
                   [[nchwc(x[:1], 16), oihw_io(w, 16, 16), b], [nchwc(x, 16), oihw_io(w, 16, 16), b]], **TOL,
                   torch_fn=lambda xb, wb, bb: nchwc(torch_conv(convert_layout(xb.numpy(), "NCHW16c", "NCHW"), w, b,
                                                                {"padding": (1, 1, 1, 1)}, 1), 16))


def test_conv2d_nchwc_with_a_fused_epilogue():
    """The schedule tiles the epilogue's output (bias per blocked channel, relu) and keeps the
    accumulation in its tile."""
    x, w, bias = rand(1, 16, 12, 12), rand(32, 16, 3, 3), rand(32)
    xb, wb, bb = nchwc(x, 16), oihw_io(w, 16, 16), bias.reshape(1, 2, 1, 1, 16)
    in_types = [TensorType(xb.shape), TensorType(wb.shape)]
    attrs, out_types = infer_types("conv2d_nchwc", in_types, {"padding": (1, 1, 1, 1)})
    inputs, (conv,) = compute_node("conv2d_nchwc", in_types, attrs, out_types)
    b = te.placeholder(bb.shape, name="b")
    relu = te.compute(conv.shape, lambda n, c, h, w_, k: te.max(conv[n, c, h, w_, k] + b[0, c, 0, 0, k], te.const(0.0)),
                      name="relu")
    s = te.create_schedule(relu.op)
    schedule_for(get("conv2d_nchwc"))(s, [relu], Target())
    assert "conv_nchwc_local" in str(ember.lower(s, [*inputs, b, relu]))  # the accumulator tile
    f = ember.build(s, [*inputs, b, relu])
    out = np.empty(out_types[0].shape, "float32")
    f(xb, wb, bb, out)
    expected = np.maximum(torch_conv(x, w, bias, {"padding": (1, 1, 1, 1)}, 1), 0)
    assert_close(out, nchwc(expected, 16), **TOL, what="conv2d_nchwc + bias + relu")


def test_depthwise_padding_is_copied_per_tile():
    """A depthwise convolution pads the input rows and columns each register tile reads into a
    local tile (no padded copy of the whole input, which stride 2 over a large map paid in
    cache misses)."""
    x, w = rand(1, 32, 15, 15), rand(32, 1, 3, 3)
    xb, wb = nchwc(x, 16), oihw_io(w, 1, 16)
    attrs, out_types = infer_types("conv2d_nchwc", [TensorType(xb.shape), TensorType(wb.shape)],
                                   {"padding": (1, 1, 1, 1), "strides": (2, 2), "groups": 32})
    inputs, (conv,) = compute_node("conv2d_nchwc", [TensorType(xb.shape), TensorType(wb.shape)], attrs, out_types)
    s = te.create_schedule(conv.op)
    schedule_for(get("conv2d_nchwc"))(s, [conv], Target())
    lowered = str(ember.lower(s, [*inputs, conv]))
    assert "x_padded_local" in lowered and "x_padded[" not in lowered
    out = np.empty(out_types[0].shape, "float32")
    ember.build(s, [*inputs, conv])(xb, wb, out)
    expected = torch_conv(x, w, None, {"padding": (1, 1, 1, 1), "strides": (2, 2)}, 32)
    assert_close(out, nchwc(expected, 16), **TOL, what="depthwise conv2d_nchwc, stride 2")


@pytest.mark.parametrize("hw, cin, cout, blocks_first", [(3, 64, 128, True), (16, 32, 32, False)])
def test_a_convolution_whose_weights_outweigh_its_input_runs_blocks_outermost(hw, cin, cout, blocks_first):
    """Where the weights outweigh the input (a 1x1 over 7 x 7 from 1024 channels), the tiles of a
    pair of output blocks go over every row before the next pair, each block's weights read from
    memory once; elsewhere the rows stay outermost."""
    xb, wb = nchwc(rand(1, cin, hw, hw), 16), oihw_io(rand(cout, cin, 1, 1), 16, 16)
    types = [TensorType(xb.shape), TensorType(wb.shape)]
    attrs, out_types = infer_types("conv2d_nchwc", types, {})
    inputs, (conv,) = compute_node("conv2d_nchwc", types, attrs, out_types)
    s = te.create_schedule(conv.op)
    schedule_for(get("conv2d_nchwc"))(s, [conv], Target())
    (loop,) = collect(ember.lower(s, [*inputs, conv]).body, lambda x: isinstance(x, For) and x.kind == "parallel")
    assert loop.loop_var.name.startswith("ax1_0_ax0_ax2" if blocks_first else "ax0_ax2_ax1_0"), loop.loop_var.name
    out = np.empty(out_types[0].shape, "float32")
    ember.build(s, [*inputs, conv])(xb, wb, out)
    assert_close(out, get("conv2d_nchwc").reference([xb, wb], attrs)[0], **TOL, what="conv2d_nchwc")


@pytest.mark.parametrize("shapes, attrs, message", [
    ([(1, 2, 8, 8, 16), (2, 1, 3, 3, 16, 16)], {}, "must read 2 blocks of 16 input channels"),
    ([(1, 2, 8, 8, 16), (2, 2, 3, 3, 16, 16), (16,)], {}, "bias of shape (16,) must be (32,)"),
    ([(1, 2, 8, 8, 16), (2, 1, 3, 3, 1, 16)], {"groups": 2}, "groups=2 must be 1, or the 32 channels"),
    ([(1, 2, 8, 8, 16), (2, 2, 3, 3, 16, 16)], {"out_layout": "NHWC"}, "out_layout must be 'NCHWc'"),
    ([(1, 32, 8), (2, 2, 3, 3, 16, 16)], {}, "x must be N, C/ib, H, W, ib"),
    ([(1, 2, "h", 8, 16), (2, 2, 3, 3, 16, 16)], {}, "may only have a symbolic batch dimension"),
    ([(1, 2, 2, 2, 16), (2, 2, 3, 3, 16, 16)], {}, "larger than the padded input"),
    ([(1, 2, 4, 4, 16), (2, 2, 1, 1, 16, 16)], {"in_channels": 33}, "in_channels=33 must be a count"),
    ([(1, 16, 4, 4), (2, 16, 1, 1, 1, 16)], {"in_channels": 8}, "for a blocked x and groups 1"),
])
def test_conv2d_nchwc_errors(shapes, attrs, message):
    with pytest.raises(OpTypeError) as e:
        infer_types("conv2d_nchwc", [TensorType(s) for s in shapes], attrs)
    assert "conv2d_nchwc" in str(e.value) and message in str(e.value)


# -- max_pool2d_nchwc ----------------------------------------------------------------------------


@pytest.mark.parametrize("shape, block, attrs, torch_kwargs", [
    ((1, 32, 16, 16), 16, {"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)},
     {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((2, 16, 9, 11), 8, {"kernel": (2, 3), "strides": (2, 2), "ceil_mode": True},
     {"kernel_size": (2, 3), "stride": 2, "ceil_mode": True}),
    ((1, 8, 7, 7), 8, {"kernel": (3, 3), "dilations": (2, 1)}, {"kernel_size": 3, "stride": 3, "dilation": (2, 1)}),
])
def test_max_pool2d_nchwc_against_torch(shape, block, attrs, torch_kwargs):
    x = rand(*shape)
    check_op("max_pool2d_nchwc", [nchwc(x, block)], attrs, rtol=0, atol=0,
             torch_fn=lambda _: nchwc(F.max_pool2d(torch.from_numpy(x), **torch_kwargs).numpy(), block))


@pytest.mark.parametrize("shape, block, attrs, torch_kwargs", [
    ((1, 32, 8, 8), 16, {"kernel": (2, 2), "strides": (2, 2)}, {"kernel_size": 2, "stride": 2}),  # DenseNet's
    ((1, 16, 9, 11), 8, {"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1), "ceil_mode": True,
                         "count_include_pad": False},
     {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False}),
    ((1, 8, 7, 6), 8, {"kernel": (3, 2), "padding": (1, 0, 1, 0), "strides": (1, 1)},
     {"kernel_size": (3, 2), "stride": 1, "padding": (1, 0)}),
])
def test_avg_pool2d_nchwc_against_torch(shape, block, attrs, torch_kwargs):
    x = rand(*shape)
    check_op("avg_pool2d_nchwc", [nchwc(x, block)], attrs, **TOL,
             torch_fn=lambda _: nchwc(F.avg_pool2d(torch.from_numpy(x), **torch_kwargs).numpy(), block))


def test_blocked_pools_need_a_blocked_input():
    for op in ("max_pool2d_nchwc", "avg_pool2d_nchwc"):
        with pytest.raises(OpTypeError, match=f"{op}: x must be N, C/b, H, W, b"):
            infer_types(op, [TensorType((1, 16, 8, 8))], {"kernel": (2, 2)})

"""depthwise_conv2d_nhwc: a depthwise convolution (groups = C = OC) over channels-last
activations, what ember.passes.channels_last makes of MobileNet's depthwise layers between its
channels-last 1x1 products, so that they read and write NHWC where a conv2d would be transposed to
NCHW and back around each:

    out[n, y, z, c] = sum over (ky, kx) of x[n, y*sh - pt + ky*dh, z*sw - pl + kx*dw, c] * w[ky, kx, c]  (+ b[c])

x (N, H, W, C), w (KH, KW, C) (the conv2d's (C, 1, KH, KW) transposed once at compile time), 0
in the padding; sums in float32 for half operands. An output element a thread on a GPU (the
default schedule of a reduction), consecutive threads on consecutive channels: each tap's loads
of x and w are coalesced.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import as_int, cast
from .common import check_float, result_dtype
from .conv import conv_reference
from .conv_gemm import COLUMN_ATTRS, out_size, window_of
from .registry import OpDef, OpTypeError, register


def _infer(types, attrs):
    x, w = types[:2]
    dtype = result_dtype("depthwise_conv2d_nhwc", *types)
    check_float("depthwise_conv2d_nhwc", x)
    if x.rank != 4 or w.rank != 3 or not x.is_static or not w.is_static:
        raise OpTypeError(f"depthwise_conv2d_nhwc: x (N, H, W, C) and w (KH, KW, C) of static shapes, got {x.shape} "
                          f"and {w.shape}")
    n, h, wd, c = x.shape
    if tuple(w.shape) != (*attrs["kernel"], c) or (len(types) == 3 and tuple(types[2].shape) != (c,)):
        raise OpTypeError(f"depthwise_conv2d_nhwc: w {w.shape} must be (KH, KW, C) = {(*attrs['kernel'], c)} and "
                          f"the bias ({c},)")
    oh, ow = out_size((n, c, h, wd), attrs)
    return [TensorType((n, oh, ow, c), dtype)]


def depthwise_weights(w):
    """conv2d's depthwise weights (C, 1, KH, KW) as depthwise_conv2d_nhwc's (KH, KW, C)."""
    return w[:, 0].transpose(1, 2, 0)


def _reference(inputs, attrs):
    x, w = inputs[:2]
    (_, strides, dilations, begin, end) = window_of(attrs)
    w4 = w.transpose(2, 0, 1)[:, None]
    out = conv_reference(x.transpose(0, 3, 1, 2), w4, inputs[2] if len(inputs) == 3 else None, strides, begin,
                         end, dilations, x.shape[3])
    return [np.ascontiguousarray(out.transpose(0, 2, 3, 1))]


def _compute(inputs, attrs, out_types):
    x, w = inputs[:2]
    (kh, kw), (sh, sw), (dh, dw), (pt, pl), (pb, pr) = window_of(attrs)
    h, wd = (as_int(d) for d in x.shape[1:3])
    ky, kx = te.reduce_axis((0, kh), name="ky"), te.reduce_axis((0, kw), name="kx")
    acc_dtype = dt.compute_dtype(x.dtype)

    def tap(n, y, z, c):
        i, j = y * sh - pt + ky * dh, z * sw - pl + kx * dw
        value = cast(acc_dtype, x[n, i, j, c])
        if any((pt, pl, pb, pr)):
            value = te.if_then_else(te.all(i >= 0, i < h, j >= 0, j < wd), value, te.const(0, acc_dtype))
        return te.sum(value * cast(acc_dtype, w[ky, kx, c]), axis=[ky, kx])

    acc = te.compute(out_types[0].shape, tap, name="depthwise")
    bias = inputs[2] if len(inputs) == 3 else None
    return [te.compute(out_types[0].shape, lambda n, y, z, c: cast(
        x.dtype, acc[n, y, z, c] if bias is None else acc[n, y, z, c] + cast(acc_dtype, bias[c])), name="conv")]


register(OpDef(
    name="depthwise_conv2d_nhwc",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="out_elementwise_fusable",
    attrs=COLUMN_ATTRS,
    num_inputs=(2, 3),
    doc="Depthwise 2-D convolution over channels-last x (N, H, W, C), w (KH, KW, C).",
    takes_prologue=False,
))

"""conv2d_gemm: a 2-D convolution of one group as a matrix product (implicit GEMM), what a GPU's
Tensor Cores compute (ember.passes.conv_gemm writes it for a model in half precision):

    out[n, o, p] = sum over q of w[o, q] * cols[n, q, p]  (+ bias[o])

w the weights reshaped once to (OC, C*KH*KW), q = (c, ky, kx); p = (oh, ow) an output position,
and cols[n, q, p] the input element that tap q of position p reads (im2col: x[n, c, oh*sh - pt +
ky*dh, ow*sw - pl + kx*dw], 0 in the padding). The output is the convolution's, (N, OC, OH, OW),
out[n, o, oh, ow] the product's [n, o, oh*OW + ow]. cols is a stage of the kernel, never a tensor in memory:
the GPU schedule computes it as it copies a tile of it into shared memory (ember.schedules.gpu.
matmul), so the columns cost what reading the input costs. Sums accumulate in float32 for
float16/bfloat16 operands.

conv2d_nhwc_gemm is the same product over channels-last activations (ember.passes.channels_last
writes it for a GPU model in half precision):

    out[n, p, o] = sum over q of cols[n, p, q] * w[o, q]  (+ bias[o])

x (N, H, W, C), w (OC, KH*KW*C) with q = (ky, kx, c): the taps of a position are KH*KW runs of C
contiguous channels, so a tile of cols copied 8 halves at a time reads 16 contiguous bytes of x
where 8 divides C (one cp.async, zero-filled in the padding), where NCHW's columns gather one
element at a time. The output is channels-last too, (N, OH, OW, OC).
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import as_int, cast
from .common import check_float, result_dtype
from .conv import conv_reference, window_out
from .registry import REQUIRED, OpDef, OpTypeError, register

COLUMNS = "im2col"  # the tag of the columns' stage


def window_of(attrs):
    kh, kw = attrs["kernel"]
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
    pt, pl, pb, pr = attrs["padding"]
    return (kh, kw), (sh, sw), (dh, dw), (pt, pl), (pb, pr)


def out_size(x_shape, attrs) -> tuple[int, int]:
    """(OH, OW) of the window over x (N, C, H, W)."""
    kernel, strides, dilations, begin, end = window_of(attrs)
    return tuple(window_out("conv2d_gemm", *a) for a in zip(x_shape[2:], kernel, strides, begin, end, dilations))


def _infer(types, attrs, op: str = "conv2d_gemm", layout: str = "(N, C, H, W)"):
    x, w = types[:2]
    dtype = result_dtype(op, *types)
    check_float(op, x)
    if x.rank != 4 or w.rank != 2 or any(isinstance(d, str) for d in (*x.shape, *w.shape)):
        raise OpTypeError(f"{op}: x {layout} and w (OC, C*KH*KW) of static shapes, got {x.shape} and {w.shape}")
    kh, kw = window_of(attrs)[0]
    n, c = x.shape[:2]
    oc, q = w.shape
    if q != c * kh * kw:
        raise OpTypeError(f"{op}: w {w.shape} must have C*KH*KW = {c * kh * kw} columns for x {x.shape} and "
                          f"kernel {(kh, kw)}")
    if len(types) == 3 and tuple(types[2].shape) != (oc,):
        raise OpTypeError(f"{op}: bias of shape {types[2].shape} must be ({oc},)")
    oh, ow = out_size(x.shape, attrs)
    return [TensorType((n, oc, oh, ow), dtype)]


def _reference(inputs, attrs):
    x, w = inputs[:2]
    (kh, kw), strides, dilations, begin, end = window_of(attrs)
    w4 = w.reshape(w.shape[0], x.shape[1], kh, kw)
    return [conv_reference(x, w4, inputs[2] if len(inputs) == 3 else None, strides, begin, end, dilations, 1)]


def column_reader(x, attrs, channels_last: bool = False):
    """(column(b, k, p): the element of x (N, C, H, W) that tap k = (c, ky, kx) of output position
    p reads, 0 in the padding; (OH, OW)), for a stage of columns; `channels_last`: of x (N, H, W,
    C), tap k = (ky, kx, c)."""
    (kh, kw), (sh, sw), (dh, dw), (pt, pl), (pb, pr) = window_of(attrs)
    if channels_last:
        n, h, wd, c = (as_int(d) for d in x.shape)
    else:
        n, c, h, wd = (as_int(d) for d in x.shape)
    oh, ow = out_size((n, c, h, wd), attrs)

    def column(b, k, p):
        if channels_last:
            ky, kx, channel = k // c // kw, k // c % kw, k % c
        else:
            ky, kx, channel = k // kw % kh, k % kw, k // (kh * kw)
        y = p // ow * sh - pt + ky * dh
        z = p % ow * sw - pl + kx * dw
        value = x[b, y, z, channel] if channels_last else x[b, channel, y, z]
        if not any((pt, pl, pb, pr)):
            return value
        return te.if_then_else(te.all(y >= 0, y < h, z >= 0, z < wd), value, te.const(0, x.dtype))

    return column, (oh, ow)


def _compute(inputs, attrs, out_types):
    x, w = inputs[:2]
    n = as_int(x.shape[0])
    oc, q = (as_int(d) for d in w.shape)
    column, (oh, ow) = column_reader(x, attrs)
    positions = oh * ow
    cols = te.compute((n, q, positions), column, name="cols", tag=COLUMNS)
    acc_dtype = dt.compute_dtype(x.dtype)
    r = te.reduce_axis((0, q), name="q")
    acc = te.compute((n, oc, positions),
                     lambda b, o, p: te.sum(cast(acc_dtype, w[o, r]) * cast(acc_dtype, cols[b, r, p]), axis=r),
                     name="matmul")
    bias = inputs[2] if len(inputs) == 3 else None

    def element(b, o, y, z):
        v = acc[b, o, y * ow + z]
        return cast(x.dtype, v if bias is None else v + cast(acc_dtype, bias[o]))

    return [te.compute((n, oc, oh, ow), element, name="conv")]


COLUMN_ATTRS = {"kernel": REQUIRED, "strides": (1, 1), "padding": (0, 0, 0, 0), "dilations": (1, 1)}


register(OpDef(
    name="conv2d_gemm",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="out_elementwise_fusable",
    attrs=COLUMN_ATTRS,
    num_inputs=(2, 3),
    doc="2-D convolution of one group as w (OC, C*KH*KW) @ im2col(x).",
    takes_prologue=False,
))


# -- channels last ---------------------------------------------------------------------------------


def _nchw(t: TensorType) -> TensorType:
    n, h, w, c = t.shape
    return TensorType((n, c, h, w), t.dtype)


def _infer_nhwc(types, attrs):
    x = types[0]
    if x.rank != 4:
        raise OpTypeError(f"conv2d_nhwc_gemm: x (N, H, W, C), got {x.shape}")
    (out,) = _infer([_nchw(x), *types[1:]], attrs, "conv2d_nhwc_gemm", "(N, H, W, C)")
    n, oc, oh, ow = out.shape
    return [TensorType((n, oh, ow, oc), out.dtype)]


def nhwc_weights(w):
    """Weights (OC, C, KH, KW) as conv2d_nhwc_gemm's (OC, KH*KW*C): q = (ky, kx, c)."""
    return w.transpose(0, 2, 3, 1).reshape(w.shape[0], -1)


def _reference_nhwc(inputs, attrs):
    x, w = inputs[:2]
    (kh, kw) = attrs["kernel"]
    c = x.shape[3]
    flat = w.reshape(w.shape[0], kh, kw, c).transpose(0, 3, 1, 2).reshape(w.shape[0], -1)
    out = _reference([x.transpose(0, 3, 1, 2), flat, *inputs[2:]], attrs)[0]
    return [np.ascontiguousarray(out.transpose(0, 2, 3, 1))]


def _compute_nhwc(inputs, attrs, out_types):
    x, w = inputs[:2]
    n = as_int(x.shape[0])
    oc, q = (as_int(d) for d in w.shape)
    column, (oh, ow) = column_reader(x, attrs, channels_last=True)
    cols = te.compute((n, oh * ow, q), lambda b, p, k: column(b, k, p), name="cols", tag=COLUMNS)
    acc_dtype = dt.compute_dtype(x.dtype)
    r = te.reduce_axis((0, q), name="q")
    acc = te.compute((n, oh * ow, oc),
                     lambda b, p, o: te.sum(cast(acc_dtype, cols[b, p, r]) * cast(acc_dtype, w[o, r]), axis=r),
                     name="matmul")
    bias = inputs[2] if len(inputs) == 3 else None

    def element(b, y, z, o):
        v = acc[b, y * ow + z, o]
        return cast(x.dtype, v if bias is None else v + cast(acc_dtype, bias[o]))

    return [te.compute((n, oh, ow, oc), element, name="conv")]


register(OpDef(
    name="conv2d_nhwc_gemm",
    infer=_infer_nhwc,
    reference=_reference_nhwc,
    compute=_compute_nhwc,
    pattern="out_elementwise_fusable",
    attrs=COLUMN_ATTRS,
    num_inputs=(2, 3),
    doc="2-D convolution of one group over channels-last x (N, H, W, C) as im2col(x) @ w^T, w (OC, KH*KW*C).",
    takes_prologue=False,
))

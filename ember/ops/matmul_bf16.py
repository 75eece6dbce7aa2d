"""`gemm_bf16(a, w, c?; beta)`: a @ W + beta * c with W held in bf16, packed in the bf16 units'
layout, and a rounded to bf16 on the way in: the products of bf16, exact in fp32, summed in fp32.
`conv2d_bf16(x, w, bias?; kernel, strides, padding, dilations)`: a 2-d convolution (groups 1) as
the same product, of the weights (OC, C, KH, KW) as an (OC, C * KH * KW) matrix in pairs along
its columns (w: (OC, K / 2, 2), K padded with zeros to an even number) by the windows of x
packed as the units' B operand (im2col: a column per output pixel, in blocks of 16, a row per
input channel and tap, zeros where a tap falls in the padding), so that the product's rows are
the output channels and its columns the pixels: NCHW as it comes out. What
`ember.compile(..., precision="bf16")` makes of linear layers and convolutions
(ember.passes.bf16_weights).

    a  (M, K) float32 or bfloat16
    w  (N / 16, K / 2, 16, 2) bfloat16: W (K, N) in pairs along k, column after column
       ([N / 16][K / 2][16][2], ember.intrinsics.tiles.pack: AVX512-BF16's and AMX's B operand)
    c  broadcast to (M, N), added in fp32 (times beta)
    -> (M, N) of a's dtype

The te stages, both operators: the activations in bf16 (a's rows in pairs; a convolution's
windows packed), a stage of its own tagged CAST (the units read it from memory), the tile
product (tagged ANCHOR: ember.intrinsics.tiles.product, (M, N / 16, 16) fp32, what a unit's
intrinsic describes) and the result (the columns back in a row with c; a convolution's pixels
with its bias). ember.schedules.cpu.matmul_bf16 maps the product onto the best unit the target has.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..intrinsics.tiles import LANES, product
from ..tir import dtype as dt
from ..tir.expr import as_int, cast
from .common import broadcast_index
from .conv import conv_reference, window_attrs, window_out
from .registry import OpDef, OpTypeError, register

ANCHOR = "gemm_bf16"
CAST = "gemm_bf16_cast"
GROUP = 2  # bf16 values of k per lane of the units


def _infer(types, attrs):
    a, w = types[:2]
    if a.rank != 2 or not dt.is_float(a.dtype) or w.rank != 4 or w.dtype != "bfloat16" or w.shape[2:] != (LANES, GROUP):
        raise OpTypeError(f"gemm_bf16: a must be 2-D floating point and w (N / {LANES}, K / {GROUP}, {LANES}, {GROUP}) "
                          f"bfloat16, got {a.dtype}{list(a.shape)} and {w.dtype}{list(w.shape)}")
    m, k = a.shape
    if k != w.shape[1] * GROUP:
        raise OpTypeError(f"gemm_bf16: a has {k} columns, w {w.shape[1]} pairs of rows")
    n = w.shape[0] * LANES
    if len(types) == 3:
        c = types[2]
        if c.rank > 2 or any(d not in (1, want) for d, want in zip(c.shape[::-1], (n, m))):
            raise OpTypeError(f"gemm_bf16: c of shape {c.shape} does not broadcast to the result {(m, n)}")
    return [TensorType((m, n), a.dtype)]


def unpack(w: np.ndarray) -> np.ndarray:
    """The (K, N) matrix of weights packed (N / 16, K / 2, 16, 2)."""
    blocks, pairs = w.shape[:2]
    return w.transpose(1, 3, 0, 2).reshape(pairs * GROUP, blocks * LANES)


def _reference(inputs, attrs):
    a, w = inputs[:2]
    a16 = a.astype(dt.to_numpy("bfloat16")).astype(np.float64)
    out = a16 @ unpack(w).astype(np.float64)
    if len(inputs) == 3:
        out = out + attrs["beta"] * inputs[2].astype(np.float64)
    return [out.astype(np.float32).astype(a.dtype)]


def _compute(inputs, attrs, out_types):
    a, w = inputs[:2]
    c = inputs[2] if len(inputs) == 3 else None
    m, k = a.shape[0], as_int(a.shape[1])
    pairs = te.compute((m, k // GROUP, GROUP), lambda i, p, g: a[i, p * GROUP + g].astype("bfloat16"),
                       name="a_bf16", tag=CAST)
    acc = product(pairs, w, "float32", name="gemm_bf16", tag=ANCHOR)
    beta = attrs["beta"]

    def element(i, j):
        v = acc[i, j // LANES, j % LANES]
        if c is not None:
            cv = cast("float32", c[broadcast_index((i, j), c.shape)])
            v = v + (cv if beta == 1 else cv * beta)
        return cast(a.dtype, v)

    return [te.compute(out_types[0].shape, element, name="gemm_bf16_out")]


def _conv_geometry(x_shape, attrs):
    """(kernel, strides, pads_begin, dilations, (OH, OW)) of conv2d_bf16 over x of shape x_shape."""
    kernel = tuple(attrs["kernel"])
    strides, pads_b, pads_e, dilations = window_attrs("conv2d_bf16", attrs, 2)
    out = tuple(window_out("conv2d_bf16", *a) for a in zip(x_shape[2:], kernel, strides, pads_b, pads_e, dilations))
    return kernel, strides, pads_b, dilations, out


def _infer_conv(types, attrs):
    x, w = types[:2]
    if x.rank != 4 or not dt.is_float(x.dtype) or w.rank != 3 or w.dtype != "bfloat16" or w.shape[2] != GROUP:
        raise OpTypeError(f"conv2d_bf16: x must be NCHW floating point and w (OC, K / {GROUP}, {GROUP}) bfloat16, "
                          f"got {x.dtype}{list(x.shape)} and {w.dtype}{list(w.shape)}")
    kernel, *_, out = _conv_geometry(x.shape, attrs)
    taps = x.shape[1] * kernel[0] * kernel[1]
    if w.shape[1] != -(-taps // GROUP):
        raise OpTypeError(f"conv2d_bf16: x's {x.shape[1]} channels x {kernel} taps need {-(-taps // GROUP)} pairs "
                          f"of columns of w, it has {w.shape[1]}")
    oc = w.shape[0]
    if len(types) == 3 and tuple(types[2].shape) != (oc,):
        raise OpTypeError(f"conv2d_bf16: bias of shape {types[2].shape} must be ({oc},)")
    return [TensorType((x.shape[0], oc) + out, x.dtype)]


def _reference_conv(inputs, attrs):
    x, w = inputs[:2]
    kernel, strides, pads_b, dilations, _ = _conv_geometry(x.shape, attrs)
    c = x.shape[1]
    weights = w.reshape(w.shape[0], -1)[:, :c * kernel[0] * kernel[1]].reshape(-1, c, *kernel).astype(np.float64)
    x16 = x.astype(dt.to_numpy("bfloat16")).astype(np.float64)
    _, pads_e = window_attrs("conv2d_bf16", attrs, 2)[1:3]
    out = conv_reference(x16, weights, inputs[2] if len(inputs) == 3 else None, strides, pads_b, pads_e, dilations, 1)
    return [out.astype(np.float32).astype(x.dtype)]


def _compute_conv(inputs, attrs, out_types):
    x, w = inputs[:2]
    bias = inputs[2] if len(inputs) == 3 else None
    n, c, h, wd = (as_int(d) for d in x.shape)
    (kh, kw), strides, pads_b, dilations, (oh, ow) = _conv_geometry((n, c, h, wd), attrs)
    taps, pixels = c * kh * kw, n * oh * ow

    def window(pb, kp, l, g):
        p, k = pb * LANES + l, kp * GROUP + g
        ch, tap = k // (kh * kw), k % (kh * kw)
        b, q = p // (oh * ow), p % (oh * ow)
        y = q // ow * strides[0] - pads_b[0] + tap // kw * dilations[0]
        z = q % ow * strides[1] - pads_b[1] + tap % kw * dilations[1]
        inside = te.all(p < pixels, k < taps, y >= 0, y < h, z >= 0, z < wd)
        return te.if_then_else(inside, x[b, ch, y, z].astype("bfloat16"), te.const(0, "bfloat16"))  # (read if inside)

    cols = te.compute((-(-pixels // LANES), as_int(w.shape[1]), LANES, GROUP), window, name="x_windows_bf16",
                      tag=CAST)
    acc = product(w, cols, "float32", name="conv2d_bf16", tag=ANCHOR)

    def element(b, o, y, z):
        p = (b * oh + y) * ow + z
        v = acc[o, p // LANES, p % LANES]
        return cast(x.dtype, v if bias is None else v + cast("float32", bias[o]))

    return [te.compute(out_types[0].shape, element, name="conv2d_bf16_out")]


register(OpDef(
    name="conv2d_bf16",
    infer=_infer_conv,
    reference=_reference_conv,
    compute=_compute_conv,
    pattern="out_elementwise_fusable",
    attrs={"kernel": (1, 1), "strides": (1, 1), "padding": (0, 0, 0, 0), "dilations": (1, 1)},
    num_inputs=(2, 3),
    doc="2-d convolution (groups 1) as the bf16 product of W ((OC, K / 2, 2)) by x's windows, summed in fp32.",
))

register(OpDef(
    name="gemm_bf16",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="out_elementwise_fusable",
    attrs={"beta": 1.0},
    num_inputs=(2, 3),
    doc="a @ W + beta * c with W in bf16 (packed (N / 16, K / 2, 16, 2)) and a rounded to bf16, summed in fp32.",
))

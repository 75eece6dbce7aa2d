"""deform_conv2d(x, w, offset, bias?, mask?; strides, padding, dilations, groups, offset_groups):
ONNX DeformConv, a 2-d convolution whose every kernel tap reads x at its place in the window
moved by a learned offset: tap (kh, kw) of output (oh, ow) samples x bilinearly at
(oh * stride - pad + kh * dilation + offset_h, ow * ... + offset_w), each of the four corners
outside the image counting 0 (GridSample's zero padding, align_corners), times `mask`. offset is
(N, offset_groups * KH * KW * 2, OH, OW) (per group, per tap, h then w), mask (N, offset_groups *
KH * KW, OH, OW); input channel c belongs to offset group c // (C / offset_groups). A mask
needs a bias before it (zeros will do).

The te compute samples every (channel, tap, output position) once into a PACK stage of columns,
then reduces them against the weights as a grouped convolution does (tag "deform_conv").
Pattern `opaque`.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import as_int, cast, max_, min_
from .common import check_float
from .conv import window_attrs, window_out
from .hints import PACK
from .registry import OpDef, OpTypeError, register

ANCHOR = "deform_conv"

def _infer(types, attrs):
    x, w, offset = types[:3]
    check_float("deform_conv2d", x)
    if x.rank != 4 or w.rank != 4 or offset.rank != 4:
        raise OpTypeError(f"deform_conv2d: x, w and offset must be rank 4, got {x.shape}, {w.shape}, {offset.shape}")
    if not TensorType(tuple(x.shape[1:]) + tuple(w.shape)).is_static:
        raise OpTypeError(f"deform_conv2d: x {x.shape} (but its batch) and w {w.shape} must have known sizes")
    groups, og = attrs["groups"], attrs["offset_groups"]
    oc, cg, kh, kw = w.shape
    if cg * groups != x.shape[1] or oc % groups or x.shape[1] % og:
        raise OpTypeError(f"deform_conv2d: w {w.shape} with groups={groups} and offset_groups={og} do not fit "
                          f"x of {x.shape[1]} channels")
    strides, pads_b, pads_e, dilations = window_attrs("deform_conv2d", attrs, 2)
    out = tuple(window_out("deform_conv2d", *a) for a in zip(x.shape[2:], (kh, kw), strides, pads_b, pads_e,
                                                              dilations))
    if tuple(offset.shape[1:]) != (og * kh * kw * 2, *out):
        raise OpTypeError(f"deform_conv2d: offset {offset.shape} must be (N, {og * kh * kw * 2}, {out[0]}, {out[1]})")
    if len(types) > 3 and tuple(types[3].shape) != (oc,):
        raise OpTypeError(f"deform_conv2d: bias {types[3].shape} must be ({oc},)")
    if len(types) > 4 and tuple(types[4].shape[1:]) != (og * kh * kw, *out):
        raise OpTypeError(f"deform_conv2d: mask {types[4].shape} must be (N, {og * kh * kw}, {out[0]}, {out[1]})")
    return [TensorType((x.shape[0], oc) + out, x.dtype)]

def _corners(y, xx, lo_int, floor, to_float):
    """[(row, column, weight)] of the four corners of a bilinear sample at (y, xx)."""
    y0, x0 = lo_int(floor(y)), lo_int(floor(xx))
    ly, lx = y - to_float(y0), xx - to_float(x0)
    return [(y0, x0, (1.0 - ly) * (1.0 - lx)), (y0, x0 + 1, (1.0 - ly) * lx),
            (y0 + 1, x0, ly * (1.0 - lx)), (y0 + 1, x0 + 1, ly * lx)]

def _reference(inputs, attrs):
    x, w, offset = inputs[:3]
    bias = inputs[3] if len(inputs) > 3 else None
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    og = attrs["offset_groups"]
    (sh, sw), (ph, pw), _, (dh, dw) = window_attrs("deform_conv2d", attrs, 2)
    oh, ow = offset.shape[2:]
    off = offset.astype(np.float64).reshape(n, og, kh, kw, 2, oh, ow)
    mask = (inputs[4].astype(np.float64).reshape(n, og, kh, kw, oh, ow) if len(inputs) > 4
            else np.ones((n, og, kh, kw, oh, ow)))
    xs = x.astype(np.float64)
    cols = np.zeros((n, c, kh, kw, oh, ow))
    group_of = np.arange(c) // (c // og)
    for i in range(kh):
        for j in range(kw):
            y = (np.arange(oh) * sh - ph + i * dh)[:, None] + off[:, :, i, j, 0]  # (n, og, oh, ow)
            xx = (np.arange(ow) * sw - pw + j * dw)[None, :] + off[:, :, i, j, 1]
            for r, q, wt in _corners(y, xx, lambda v: v.astype(np.int64), np.floor, lambda v: v):
                inside = (r >= 0) & (r < h) & (q >= 0) & (q < wd)
                rr, qq = np.clip(r, 0, h - 1), np.clip(q, 0, wd - 1)
                nn = np.arange(n)[:, None, None, None]
                value = xs[nn, np.arange(c)[None, :, None, None], rr[:, group_of], qq[:, group_of]]
                cols[:, :, i, j] += np.where(inside, wt, 0.0)[:, group_of] * value
            cols[:, :, i, j] *= mask[:, group_of, i, j]
    groups = attrs["groups"]
    ocg = oc // groups
    out = np.zeros((n, oc, oh, ow))
    for g in range(groups):
        out[:, g * ocg:(g + 1) * ocg] = np.einsum("nckhij,ockh->noij", cols[:, g * cg:(g + 1) * cg],
                                                  w[g * ocg:(g + 1) * ocg].astype(np.float64))
    if bias is not None:
        out += bias.astype(np.float64).reshape(1, oc, 1, 1)
    return [out.astype(x.dtype)]

def _compute(inputs, attrs, out_types):
    x, w, offset = inputs[:3]
    bias = inputs[3] if len(inputs) > 3 else None
    mask = inputs[4] if len(inputs) > 4 else None
    c, h, wd = (as_int(d) for d in x.shape[1:])
    oc, cg, kh, kw = (as_int(d) for d in w.shape)
    og, groups = attrs["offset_groups"], attrs["groups"]
    (sh, sw), (ph, pw), _, (dh, dw) = window_attrs("deform_conv2d", attrs, 2)
    oh, ow = out_types[0].shape[2:]
    acc = dt.compute_dtype(x.dtype)

    def to_float(v):
        return cast(acc, v)

    def column(n, ch, i, j, y, q):
        g = ch // (c // og)
        tap = (g * kh + i) * kw + j
        row = to_float(y * sh - ph + i * dh) + to_float(offset[n, tap * 2, y, q])
        col = to_float(q * sw - pw + j * dw) + to_float(offset[n, tap * 2 + 1, y, q])
        total = None
        for r, s, weight in _corners(row, col, lambda v: cast("int64", v), te.floor, to_float):
            inside = te.all(r >= 0, r < h, s >= 0, s < wd)
            value = to_float(x[n, ch, min_(max_(r, 0), h - 1), min_(max_(s, 0), wd - 1)])
            term = te.if_then_else(inside, weight * value, te.const(0.0, acc))
            total = term if total is None else total + term
        return total if mask is None else total * to_float(mask[n, g * kh * kw + i * kw + j, y, q])

    cols = te.compute((x.shape[0], c, kh, kw, oh, ow), column, name="deform_columns", tag=PACK)
    ic, ri, rj = te.reduce_axis((0, cg), name="ic"), te.reduce_axis((0, kh), name="ki"), te.reduce_axis((0, kw),
                                                                                                       name="kj")
    ocg = oc // groups
    out = te.compute((x.shape[0], oc, oh, ow), lambda n, o, y, q: te.sum(
        cols[n, o // ocg * cg + ic, ri, rj, y, q] * to_float(w[o, ic, ri, rj]), axis=[ic, ri, rj]),
        name="deform_conv", tag=ANCHOR)
    return [te.compute(out.shape, lambda n, o, y, q: cast(
        x.dtype, out[n, o, y, q] if bias is None else out[n, o, y, q] + to_float(bias[o])), name="deform_conv_out")]

register(OpDef(
    name="deform_conv2d",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="opaque",
    attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilations": (1, 1), "groups": 1, "offset_groups": 1},
    num_inputs=(3, 5),
    doc="ONNX DeformConv: a 2-d convolution whose taps sample x bilinearly at learned offsets, masked.",
))

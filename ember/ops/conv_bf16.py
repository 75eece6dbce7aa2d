"""`conv2d_nchwc_bf16(x, w, bias?; strides, padding, dilations, out_layout)`: conv2d_nchwc
(ember.ops.layout, groups 1) with its weights in bf16 and x rounded to bf16, the products summed
in fp32: what `ember.compile(..., precision="bf16")` makes of a blocked convolution where the
target's bf16 unit pays (ember.passes.bf16_convs). A direct convolution, no im2col:

    x     (N, CB, H, W, ib) float (NCHW{ib}c), or plain (N, C, H, W) (then CB = 1, ib = C)
    w     (OC / 16, CB, KH, KW, IP, 16, 2) bfloat16, IP = ceil(ib / 2): the weights of a block of
          16 output channels in pairs of input channels (AVX512-BF16's operand: `pack`), the
          pair past an odd ib's last channel zero
    bias  (OC,) fp32
    ->    (N, OC / 16, OH, OW, 16) (NCHW16c), or (N, OC, OH, OW) with out_layout="NCHW"

The te stages: x padded and rounded to bf16 in its own blocks, 2 * IP channels a pixel (tagged
CAST, computed once per call: a quarter of the fp32 input's bytes for the tile to read); the sum
over blocks, kernel rows, kernel columns and pairs (tagged ANCHOR: what
ember.intrinsics.conv_bf16 describes, MR columns x NV blocks a call); the result with its bias in
x's dtype, which fusion extends with the epilogue (ReLU, a residual add).
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..intrinsics.conv_bf16 import reduce_axes, summed
from ..intrinsics.tiles import LANES
from ..tir import dtype as dt
from ..tir.expr import as_int, cast
from .common import te_shape
from .conv import conv_reference, window_attrs, window_out
from .layout import blocked, convert_layout
from .registry import OpDef, OpTypeError, register

ANCHOR = "conv_nchwc_bf16"
CAST = "conv_nchwc_bf16_cast"
OP = "conv2d_nchwc_bf16"


def pack(weights: np.ndarray, in_block: int) -> np.ndarray:
    """OIHW float weights as w (see the module doc) for an input in blocks of `in_block` channels
    (the input's channels for a plain one)."""
    oc, c, kh, kw = weights.shape
    ip = -(-in_block // 2)
    w = np.zeros((oc // LANES, LANES, c // in_block, 2 * ip, kh, kw), dt.to_numpy("bfloat16"))
    w[:, :, :, :in_block] = weights.reshape(oc // LANES, LANES, c // in_block, in_block, kh, kw)
    w = w.reshape(oc // LANES, LANES, c // in_block, ip, 2, kh, kw)
    return np.ascontiguousarray(w.transpose(0, 2, 5, 6, 3, 1, 4))


def unpack(w: np.ndarray, in_block: int) -> np.ndarray:
    """The OIHW weights of w packed for an input in blocks of `in_block` channels."""
    ocb, cb, kh, kw, ip = w.shape[:5]
    return w.transpose(0, 5, 1, 4, 6, 2, 3).reshape(ocb * LANES, cb, 2 * ip, kh, kw)[:, :, :in_block] \
        .reshape(ocb * LANES, cb * in_block, kh, kw)


def _geometry(x_shape, attrs, kernel):
    strides, pads_b, pads_e, dilations = window_attrs(OP, attrs, 2)
    if min(pads_b + pads_e) < 0:
        raise OpTypeError(f"{OP}: padding {attrs['padding']} must not be negative")
    out = tuple(window_out(OP, *a) for a in zip(x_shape[2:4], kernel, strides, pads_b, pads_e, dilations))
    return strides, pads_b, pads_e, dilations, out


def _in_block(x) -> int:
    return x.shape[4] if len(x.shape) == 5 else x.shape[1]


def _infer(types, attrs):
    x, w = types[:2]
    if x.rank not in (4, 5) or not dt.is_float(x.dtype) or not TensorType(x.shape[1:]).is_static:
        raise OpTypeError(f"{OP}: x must be floating point (N, C / ib, H, W, ib) or (N, C, H, W) of known sizes "
                          f"but N, got {x.dtype}{list(x.shape)}")
    ib = _in_block(x)
    cb = x.shape[1] if x.rank == 5 else 1
    if w.rank != 7 or w.dtype != "bfloat16" or w.shape[1] != cb or w.shape[4] != -(-ib // 2) or w.shape[5:] != (
            LANES, 2):
        raise OpTypeError(f"{OP}: w must be (OC / {LANES}, {cb}, KH, KW, {-(-ib // 2)}, {LANES}, 2) bfloat16 for x "
                          f"{list(x.shape)}, got {w.dtype}{list(w.shape)}")
    oc = w.shape[0] * LANES
    if len(types) == 3 and tuple(types[2].shape) != (oc,):
        raise OpTypeError(f"{OP}: bias of shape {types[2].shape} must be ({oc},)")
    *_, out = _geometry(x.shape, attrs, w.shape[2:4])
    if attrs["out_layout"] == "NCHW":
        return [TensorType((x.shape[0], oc) + out, x.dtype)]
    if attrs["out_layout"] != "NCHWc":
        raise OpTypeError(f"{OP}: out_layout must be 'NCHWc' (blocks of {LANES}) or 'NCHW', got "
                          f"{attrs['out_layout']!r}")
    return [TensorType((x.shape[0], w.shape[0]) + out + (LANES,), x.dtype)]


def _reference(inputs, attrs):
    x, w = inputs[:2]
    ib = _in_block(x)
    plain = x if x.ndim == 4 else convert_layout(x, blocked("NCHW", "C", ib), "NCHW")
    x16 = plain.astype(dt.to_numpy("bfloat16")).astype(np.float64)
    strides, pads_b, pads_e, dilations, _ = _geometry(x.shape, attrs, w.shape[2:4])
    out = conv_reference(x16, unpack(w, ib).astype(np.float64), inputs[2] if len(inputs) == 3 else None, strides,
                         pads_b, pads_e, dilations, 1).astype(np.float32).astype(x.dtype)
    return [out if attrs["out_layout"] == "NCHW" else convert_layout(out, "NCHW", f"NCHW{LANES}c")]


def _compute(inputs, attrs, out_types):
    x, w = inputs[:2]
    bias = inputs[2] if len(inputs) == 3 else None
    ocb, cb, kh, kw, ip = (as_int(d) for d in w.shape[:5])
    ib, (h, wd) = as_int(_in_block(x)), (as_int(d) for d in x.shape[2:4])
    strides, pads_b, pads_e, dilations, (oh, ow) = _geometry((None, None, h, wd), attrs, (kh, kw))

    def padded(n, c, y, z, i):
        y, z = y - pads_b[0], z - pads_b[1]
        inside = te.all(y >= 0, y < h, z >= 0, z < wd, *([i < ib] if ib < 2 * ip else []))
        at = (n, c, y, z, i) if x.ndim == 5 else (n, i, y, z)
        return te.if_then_else(inside, x[at].astype("bfloat16"), te.const(0, "bfloat16"))

    shape = (x.shape[0], cb, h + pads_b[0] + pads_e[0], wd + pads_b[1] + pads_e[1], 2 * ip)
    xp = te.compute(shape, padded, name="x_bf16", tag=CAST)
    ax = reduce_axes(cb, kh, kw, ip)
    q, r, s, k, g = (ax[n] for n in "qrskg")
    pair = g if ip == 1 else k * 2 + g

    def product(n, o, y, z, lane):
        a = xp[n, q, y * strides[0] + r * dilations[0], z * strides[1] + s * dilations[1], pair]
        return te.sum(a.astype("float32") * w[o, q, r, s, k, lane, g].astype("float32"), axis=summed(ax))

    acc = te.compute((x.shape[0], ocb, oh, ow, LANES), product, name="conv_nchwc_bf16", tag=ANCHOR,
                     attrs={"strides": strides, "dilations": dilations})
    plain = attrs["out_layout"] == "NCHW"

    def finish(*i):  # (n, c, h, w, lane), or (n, c, h, w) when plain
        value = acc[i[0], i[1] // LANES, i[2], i[3], i[1] % LANES] if plain else acc[i]
        channel = i[1] if plain else i[1] * LANES + i[4]
        return cast(x.dtype, value if bias is None else value + cast("float32", bias[channel]))

    return [te.compute(te_shape(out_types[0], inputs), finish, name="conv_nchwc_bf16_out")]


register(OpDef(
    name=OP,
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="out_elementwise_fusable",
    attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilations": (1, 1), "out_layout": "NCHWc"},
    num_inputs=(2, 3),
    doc="conv2d_nchwc (groups 1) with W in bf16 packed (OC/16, CB, KH, KW, IP, 16, 2) and x rounded to bf16, "
        "summed in fp32; out NCHW16c or NCHW.",
    takes_prologue=False,
))

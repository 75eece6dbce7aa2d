"""`qdepthwise`: an int8 depthwise convolution (one filter per channel, MobileNet's) over uint8
NHWC activations, whose float32 output is the NHWC rows (N * OH * OW, C) that ember.quantize
chains convolutions in (ember.quantization.rewrite).

qdepthwise(x, w, bias, scale) takes x (N, H, W, C) uint8, w (KH, KW, C) int8 (symmetric, one
scale per channel), an int32 bias (C,) and a float32 scale (C,); row (n, oh, ow) of the output
is float32(sum over the taps of x * w + bias) * scale, the sums in int32. The padding holds
`pad_value`, the activations' zero point, whose cost -za * (the channel's weight sum) the bias
carries as qgemm's does (ember.ops.quantized), so that a padded tap counts as zero. The taps read
a padded copy of x (PADDED, which the CPU schedule computes per register tile: the rows and
columns of the window the tile's output columns read), so that none tests the bounds, each
widened to int32 as a tap loads it; the sums are vectors of int32 over the channels
(schedules/cpu/qdepthwise.py), which the 3x3 windows leave too few products per channel for
VNNI's groups of 4 to pay.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir.expr import as_int, cast
from .hints import PACK
from .registry import OpDef, OpTypeError, register

ANCHOR = "qdepthwise"  # the tag of the int32 sums' stage
PADDED = "qdepthwise_padded"  # the name of the padded input's stage


def _sizes(x: TensorType, w: TensorType, attrs) -> tuple[int, int]:
    """(OH, OW) of a qdepthwise over x with weights w."""
    if x.rank != 4 or not all(isinstance(d, int) for d in x.shape):
        raise OpTypeError(f"qdepthwise: takes a static (N, H, W, C) input, got shape {x.shape}")
    if w.rank != 3 or w.shape[2] != x.shape[3]:
        raise OpTypeError(f"qdepthwise: the weights must be (KH, KW, {x.shape[3]}), got {w.shape}")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = (attrs[a] for a in ("strides", "dilations", "pads"))
    oh = (x.shape[1] + pt + pb - dh * (w.shape[0] - 1) - 1) // sh + 1
    ow = (x.shape[2] + pl + pr - dw * (w.shape[1] - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise OpTypeError(f"qdepthwise: a {w.shape[0]}x{w.shape[1]} window does not fit the padded input {x.shape}")
    return oh, ow


def _infer(types, attrs):
    x, w, bias, scale = types
    if (x.dtype, w.dtype, bias.dtype, scale.dtype) != ("uint8", "int8", "int32", "float32"):
        raise OpTypeError(f"qdepthwise: takes uint8 x, int8 weights, an int32 bias and a float32 scale, got "
                          f"{x.dtype}, {w.dtype}, {bias.dtype}, {scale.dtype}")
    oh, ow = _sizes(x, w, attrs)
    c = x.shape[3]
    if bias.shape != (c,) or scale.shape != (c,):
        raise OpTypeError(f"qdepthwise: the bias and the scale must have shape ({c},), got {bias.shape} and "
                          f"{scale.shape}")
    return [TensorType((x.shape[0] * oh * ow, c), "float32")]


def _reference(inputs, attrs):
    x, w, bias, scale = inputs
    kh, kw, c = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = (attrs[a] for a in ("strides", "dilations", "pads"))
    oh, ow = _sizes(TensorType(x.shape, "uint8"), TensorType(w.shape, "int8"), attrs)
    padded = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=attrs["pad_value"]).astype(np.int32)
    acc = np.zeros((x.shape[0], oh, ow, c), np.int32)
    for i in range(kh):
        for j in range(kw):
            y, z = i * dh, j * dw
            acc += padded[:, y: y + sh * (oh - 1) + 1: sh, z: z + sw * (ow - 1) + 1: sw] * w[i, j].astype(np.int32)
    return [(acc.reshape(-1, c) + bias).astype(np.float32) * scale]


def _compute(inputs, attrs, out_types):
    x, w, bias, scale = inputs
    n, h, wd, c = (as_int(d) for d in x.shape)
    kh, kw = (as_int(d) for d in w.shape[:2])
    oh, ow = _sizes(TensorType((n, h, wd, c), "uint8"), TensorType((kh, kw, c), "int8"), attrs)
    (sh, sw), (dh, dw), (pt, pl, _, _) = (attrs[a] for a in ("strides", "dilations", "pads"))
    reach = ((oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1)
    fill = te.const(attrs["pad_value"], "uint8")

    def pad(b, y, z, ch):
        hy, wz = y - pt, z - pl
        inside = te.all(hy >= 0, hy < h, wz >= 0, wz < wd)
        return te.if_then_else(inside, x[b, te.max(te.min(hy, h - 1), 0), te.max(te.min(wz, wd - 1), 0), ch], fill)

    # the weights widened to int32 once, in a stage of their own; the window's bytes per tap, a
    # widening load each (vpmovzxbd), which costs less than widening and storing the window of
    # every tile (3 x 9 positions for 7 outputs; MobileNetV2's depthwise layers 611 -> 510 us)
    padded = te.compute((n, *reach, c), pad, name=PADDED, tag=PACK)
    wide = te.compute(tuple(w.shape), lambda i, j, ch: cast("int32", w[i, j, ch]), name="qdepthwise_w", tag=PACK)
    i, j = te.reduce_axis((0, kh), name="kh"), te.reduce_axis((0, kw), name="kw")
    acc = te.compute((n * oh * ow, c), lambda r, ch: te.sum(
        cast("int32", padded[r // (oh * ow), r // ow % oh * sh + i * dh, r % ow * sw + j * dw, ch]) * wide[i, j, ch],
        axis=[i, j]), name="qdepthwise_acc", tag=ANCHOR, attrs={"ow": ow})
    return [te.compute((n * oh * ow, c), lambda r, ch: cast("float32", acc[r, ch] + bias[ch]) * scale[ch],
                       name="qdepthwise")]


register(OpDef(
    name="qdepthwise",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="out_elementwise_fusable",
    num_inputs=(4, 4),
    takes_prologue=False,  # (a quantization before it would run once per tap)
    attrs={"strides": (1, 1), "dilations": (1, 1), "pads": (0, 0, 0, 0), "pad_value": 0},
    doc="An int8 depthwise convolution of uint8 NHWC x by (KH, KW, C) int8 weights, int32 sums plus bias times "
        "scale, as float32 NHWC rows (N * OH * OW, C); pad_value (the zero point) in the padding.",
))

"""Quantized products: `qgemm`, an int8 GEMM with its requantization in the epilogue,
`im2col`, the rows of a convolution's patches that turn it into one, and `qconv`, the two as one
operator (qgemm(im2col(x), ...), ember.passes.gather_patches), whose kernel gathers the patches
from x as its row tiles need them rather than reading all of them from memory.

qgemm(a, w, bias, scale?) multiplies a (M, K) uint8 by int8 weights given in AVX512-VNNI's
layout, (N / 16, K / 4, 16, 4) (`pack`: 16 columns by K-groups of 4, the order `vpdpbusd` reads
them in), accumulates in int32 and adds an int32 bias (N,). The bias carries what the zero points
of the activations cost, as MLAS folds it: sum_k (a - za) * w = sum_k a * w - za * sum_k w, so
the product runs on the raw bytes and the bias holds -za * sum_k w (plus the layer's own bias in
units of the product's scale); the weights are symmetric (zero point 0). The epilogue
(`out_dtype`):
- "int32": acc + bias (ONNX's MatMulInteger, ConvInteger);
- "float32": float32(acc + bias) * scale (a dequantized output, one scale per column or one);
- "uint8"/"int8": ONNX's requantization, clip(rint(float64(acc + bias) * scale) + zero_point, lo,
  hi), in float64 as onnx's reference computes it, so that the result is bit-exact; lo and hi
  default to the type's range, and a fused ReLU raises lo to the zero point.

im2col(x) of an NHWC input (N, H, W, C) is (N * OH * OW, KH * KW * Cp), Cp = C rounded up to
a multiple of 4 (so that K is whole K-groups of VNNI): row (n, oh, ow) holds the patch
x[n, oh * s - p + kh * d, ow * s - p + kw * d, c] in the order (kh, kw, c), channels innermost
(each tap a contiguous run of the input's channels, which its schedule copies as a vector), and
`pad_value` (the activations' zero point, so that a padded element counts as zero) outside the
input and in the channels past C: the left operand of qgemm against `conv_weights(w)`. Where Cp
is narrower than a vector (a first layer's 3 channels), the taps read a padded copy of x (a PACK
stage holding pad_value around and past C), so that the KW taps of a kernel row are one plain copy
of KW * Cp bytes (where the dilation along W is 1), not KW * Cp tests of the bounds.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..errors import ShapeError
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import as_int, cast
from .hints import PACK
from .registry import REQUIRED, OpDef, OpTypeError, register

ANCHOR = "qgemm"
IM2COL = "im2col"  # the tag of im2col's stage, whose attribute "run" is the bytes of one contiguous copy
GROUP = 4  # VNNI's K-group: 4 bytes of a row per 32-bit lane
LANES = 16  # int32 lanes of a 512-bit vector: the columns of one packed panel
OUT_DTYPES = ("int32", "float32", "uint8", "int8")


def pack(w: np.ndarray) -> np.ndarray:
    """int8 weights (K, N), K a multiple of GROUP and N of LANES, in VNNI's layout
    (N / 16, K / 4, 16, 4)."""
    k, n = w.shape
    if k % GROUP or n % LANES:
        raise ShapeError(f"pack: weights of shape {w.shape} need K a multiple of {GROUP} and N of {LANES}")
    return np.ascontiguousarray(w.reshape(k // GROUP, GROUP, n // LANES, LANES).transpose(2, 0, 3, 1))


def unpack(wp: np.ndarray) -> np.ndarray:
    """The (K, N) weights of a VNNI-packed (N / 16, K / 4, 16, 4) array."""
    groups, kg = wp.shape[:2]
    return wp.transpose(1, 3, 0, 2).reshape(kg * GROUP, groups * LANES)


def fold_weights(w: np.ndarray, bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """int8 weights (K, N) and an int32 bias (N,) (None: zeros) as qgemm takes them: K padded with
    zero rows to whole K-groups and N with zero columns to whole panels, the weights packed
    (`pack`). Returns (packed weights, bias, column sums): the sums are what an activation
    zero point za costs, bias - za * sums the bias of a qgemm over the raw activations."""
    k, n = w.shape
    kp, np_ = -(-k // GROUP) * GROUP, -(-n // LANES) * LANES
    wp = np.zeros((kp, np_), np.int8)
    wp[:k, :n] = w
    full = np.zeros(np_, np.int32)
    if bias is not None:
        full[:n] = bias
    return pack(wp), full, wp.astype(np.int32).sum(0, dtype=np.int32)


def _range(dtype: str) -> tuple[int, int]:
    return dt.int_range(dtype) if dtype in ("uint8", "int8") else (None, None)


def _bounds(attrs) -> tuple[int, int]:
    lo, hi = _range(attrs["out_dtype"])
    return (lo if attrs["lo"] is None else attrs["lo"]), (hi if attrs["hi"] is None else attrs["hi"])


def _infer_qgemm(types, attrs):
    a, w, bias = types[:3]
    out = attrs["out_dtype"]
    if out not in OUT_DTYPES:
        raise OpTypeError(f"qgemm: out_dtype must be one of {OUT_DTYPES}, got {out!r}")
    if a.dtype != "uint8" or w.dtype != "int8" or bias.dtype != "int32":
        raise OpTypeError(f"qgemm: takes uint8 activations, int8 weights and an int32 bias, got {a.dtype}, "
                          f"{w.dtype}, {bias.dtype}")
    if a.rank != 2 or w.rank != 4 or tuple(w.shape[2:]) != (LANES, GROUP):
        raise OpTypeError(f"qgemm: a must be (M, K) and w packed as (N / {LANES}, K / {GROUP}, {LANES}, {GROUP}), "
                          f"got shapes {a.shape} and {w.shape}")
    n = w.shape[0] * LANES
    if a.shape[1] != w.shape[1] * GROUP:
        raise OpTypeError(f"qgemm: a has K = {a.shape[1]} columns, the weights {w.shape[1] * GROUP}")
    if bias.shape != (n,):
        raise OpTypeError(f"qgemm: the bias must have shape ({n},), got {bias.shape}")
    if out != "int32":
        if len(types) != 4 or types[3].dtype != "float32" or types[3].shape not in ((), (n,)):
            raise OpTypeError(f"qgemm: out_dtype {out} takes a float32 scale of shape () or ({n},)")
    elif len(types) != 3:
        raise OpTypeError("qgemm: out_dtype int32 takes no scale")
    lo, hi = _bounds(attrs)
    if out in ("uint8", "int8") and not _range(out)[0] <= lo <= hi <= _range(out)[1]:
        raise OpTypeError(f"qgemm: the clip [{lo}, {hi}] leaves the range of {out}")
    return [TensorType((a.shape[0], n), out)]


def _reference_qgemm(inputs, attrs):
    a, w = inputs[:2]
    return [epilogue(a.astype(np.int32) @ unpack(w).astype(np.int32), inputs[2:], attrs)]


def epilogue(acc: np.ndarray, inputs, attrs) -> np.ndarray:
    """qgemm's epilogue in NumPy on its int32 sums `acc`: inputs are the bias and the scale, if
    any; the same roundings as the kernel's (a float32 product, float64 requantization)."""
    acc = acc + inputs[0]
    out = attrs["out_dtype"]
    if out == "int32":
        return acc
    if out == "float32":
        return acc.astype(np.float32) * inputs[1]
    lo, hi = _bounds(attrs)
    y = np.rint(acc.astype(np.float64) * inputs[1].astype(np.float64)) + attrs["zero_point"]
    return np.clip(y, lo, hi).astype(out)


def _compute_qgemm(inputs, attrs, out_types):
    a = inputs[0]
    m, k = (as_int(d) for d in a.shape)
    # the rows as a stage of their own, which the intrinsic reads from memory: where a
    # quantization fuses before the product, it runs once there (the schedule inlines a plain copy)
    rows = te.compute((m, k), lambda i, q: a[i, q], name="qgemm_rows", tag=PACK)
    return [product(rows, inputs[1:], attrs)]


def product(a: te.Tensor, inputs, attrs) -> te.Tensor:
    """qgemm's stages over the rows `a` (M, K), a stage the intrinsic reads from memory: inputs are
    the packed weights, the bias and the scale, if any."""
    w, bias = inputs[:2]
    scale = inputs[2] if len(inputs) == 3 else None
    m, k = (as_int(d) for d in a.shape)
    n = as_int(w.shape[0]) * LANES
    ko = te.reduce_axis((0, k // GROUP), name="ko")
    ki = te.reduce_axis((0, GROUP), name="ki")
    # accumulated in panels of 16 columns, the shape the intrinsic writes (schedules/cpu/quantized)
    acc = te.compute((m, n // LANES, LANES), lambda i, jo, ji: te.sum(
        cast("int32", a[i, ko * GROUP + ki]) * cast("int32", w[jo, ko, ji, ki]), axis=[ko, ki]),
        name="qgemm_acc", tag=ANCHOR)
    out = attrs["out_dtype"]
    lo, hi = _bounds(attrs)

    def element(i, j):
        v = acc[i, j // LANES, j % LANES] + bias[j]
        if out == "int32":
            return v
        s = scale[()] if scale.ndim == 0 else scale[j]
        if out == "float32":
            return cast("float32", v) * s
        y = te.round(cast("float64", v) * cast("float64", s)) + te.const(float(attrs["zero_point"]), "float64")
        y = te.min(te.max(y, te.const(float(lo), "float64")), te.const(float(hi), "float64"))
        return cast(out, y)

    return te.compute((m, n), element, name="qgemm")


register(OpDef(
    name="qgemm",
    infer=_infer_qgemm,
    reference=_reference_qgemm,
    compute=_compute_qgemm,
    pattern="out_elementwise_fusable",
    attrs={"out_dtype": "int32", "zero_point": 0, "lo": None, "hi": None},
    num_inputs=(3, 4),
    doc="uint8 a (M, K) times VNNI-packed int8 weights, int32 sums plus bias, then the epilogue of out_dtype "
        "(int32; float32 times scale; uint8/int8 requantized by scale and zero_point, clipped to [lo, hi]).",
))


def conv_weights(w: np.ndarray) -> np.ndarray:
    """A convolution's weights (Cout, C, KH, KW) as the (KH * KW * Cp, Cout) matrix that multiplies
    im2col's rows: C padded with zeros to Cp, a multiple of GROUP."""
    cout, c, kh, kw = w.shape
    padded = np.zeros((cout, -(-c // GROUP) * GROUP, kh, kw), w.dtype)
    padded[:, :c] = w
    return np.ascontiguousarray(padded.transpose(2, 3, 1, 0).reshape(-1, cout))


def _im2col_shape(x: TensorType, attrs) -> tuple[int, int, int]:
    """(OH, OW, Cp) of im2col over x."""
    if x.rank != 4 or not all(isinstance(d, int) for d in x.shape):
        raise OpTypeError(f"im2col: takes a static (N, H, W, C) input, got shape {x.shape}")
    _, h, w, c = x.shape
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = (attrs[a] for a in ("kernel", "strides", "dilations", "pads"))
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise OpTypeError(f"im2col: a {kh}x{kw} kernel does not fit the padded input of shape {x.shape}")
    return oh, ow, -(-c // GROUP) * GROUP


def _infer_im2col(types, attrs):
    (x,) = types
    oh, ow, cp = _im2col_shape(x, attrs)
    kh, kw = attrs["kernel"]
    return [TensorType((x.shape[0] * oh * ow, kh * kw * cp), x.dtype)]


def _reference_im2col(inputs, attrs):
    (x,) = inputs
    n, _, _, c = x.shape
    oh, ow, cp = _im2col_shape(TensorType(x.shape, x.dtype.name), attrs)
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = (attrs[a] for a in ("kernel", "strides", "dilations", "pads"))
    fill = attrs["pad_value"]
    padded = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, cp - c)), constant_values=fill)
    out = np.empty((n, oh, ow, kh, kw, cp), x.dtype)
    for i in range(kh):
        for j in range(kw):
            y, z = i * dh, j * dw
            out[:, :, :, i, j] = padded[:, y: y + sh * (oh - 1) + 1: sh, z: z + sw * (ow - 1) + 1: sw]
    return [out.reshape(n * oh * ow, kh * kw * cp)]


def _compute_im2col(inputs, attrs, out_types):
    (x,) = inputs
    shape = tuple(as_int(d) for d in x.shape)
    _, h, w, c = shape
    oh, ow, cp = _im2col_shape(TensorType(shape, x.dtype), attrs)
    (_, kw), (sh, sw), (dh, dw), (pt, pl, _, _) = (attrs[a] for a in ("kernel", "strides", "dilations", "pads"))
    fill = te.const(attrs["pad_value"], x.dtype)

    def bounded(b, hy, wz, ch):
        """x at (b, hy, wz, ch), the fill outside it."""
        inside = te.all(hy >= 0, hy < h, wz >= 0, wz < w, *([ch < c] if cp != c else []))
        return te.if_then_else(inside, x[b, te.max(te.min(hy, h - 1), 0), te.max(te.min(wz, w - 1), 0),
                                         te.min(ch, c - 1) if cp != c else ch], fill)

    if cp >= LANES:
        def element(r, q):
            b, y, z = r // (oh * ow), r // ow % oh, r % ow
            tap, ch = q // cp, q % cp  # (a schedule splits q by cp: tap and ch are then loops of their own)
            return bounded(b, y * sh - pt + tap // kw * dh, z * sw - pl + tap % kw * dw, ch)

        run = cp
    else:  # taps narrower than a vector (a first layer's 3 channels): tests per tap cost more than
        # the copy, so the taps read a padded copy of x, (N, H', W' * Cp), in which the KW taps of
        # a kernel row are one run of KW * Cp bytes where the dilation along W is 1
        kh = attrs["kernel"][0]
        reach = ((oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1)
        padded = te.compute((shape[0], reach[0], reach[1] * cp),
                            lambda b, y, zc: bounded(b, y - pt, zc // cp - pl, zc % cp), name="im2col_padded",
                            tag=PACK, attrs={"channels": cp})
        run = kw * cp if dw == 1 else cp

        def element(r, q):
            b, y, z = r // (oh * ow), r // ow % oh, r % ow
            col = z * sw * cp + q % run if dw == 1 else (z * sw + q // cp % kw * dw) * cp + q % cp
            return padded[b, y * sh + q // (kw * cp) * dh, col]

    return [te.compute(tuple(out_types[0].shape), element, name="im2col", tag=IM2COL, attrs={"run": run})]


register(OpDef(
    name="im2col",
    infer=_infer_im2col,
    reference=_reference_im2col,
    compute=_compute_im2col,
    pattern="opaque",  # (never fused with its producer: it reads each element up to KH * KW times)
    attrs={"kernel": REQUIRED, "strides": (1, 1), "dilations": (1, 1), "pads": (0, 0, 0, 0), "pad_value": 0},
    doc="A convolution's patches of an NHWC input as rows (N * OH * OW, KH * KW * Cp), Cp = C rounded up to 4, "
        "pad_value outside the input: the left operand of qgemm.",
))


def _infer_qconv(types, attrs):
    try:
        return _infer_qgemm([*_infer_im2col(types[:1], attrs), *types[1:]], attrs)
    except OpTypeError as e:  # (said of the operator the model has)
        raise OpTypeError(f"qconv, qgemm over im2col's patches: {e}") from None


def _reference_qconv(inputs, attrs):
    return _reference_qgemm([*_reference_im2col(inputs[:1], attrs), *inputs[1:]], attrs)


def _compute_qconv(inputs, attrs, out_types):
    x = inputs[0]
    (rows,) = _infer_im2col([TensorType(tuple(as_int(d) for d in x.shape), x.dtype)], attrs)
    return [product(_compute_im2col([x], attrs, [rows])[0], inputs[1:], attrs)]


register(OpDef(
    name="qconv",
    infer=_infer_qconv,
    reference=_reference_qconv,
    compute=_compute_qconv,
    pattern="out_elementwise_fusable",
    takes_prologue=False,  # (a quantization before it would run once per tap)
    attrs={"out_dtype": "int32", "zero_point": 0, "lo": None, "hi": None, "kernel": REQUIRED, "strides": (1, 1),
           "dilations": (1, 1), "pads": (0, 0, 0, 0), "pad_value": 0},
    num_inputs=(3, 4),
    doc="qgemm(im2col(x), w, bias, scale?) of an NHWC uint8 x, the patches gathered by the kernel a row tile at a "
        "time rather than written to memory first; the attributes of both.",
))

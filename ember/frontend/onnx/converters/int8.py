"""The integer products of ONNX's quantization operators (MatMulInteger, QLinearMatMul,
ConvInteger, QLinearConv) on ember's int8 kernel, `qgemm` (ember/ops/quantized.py), where their
operands fit it: uint8 activations with one zero point (a constant, or computed at run time by
DynamicQuantizeLinear), int8 constant weights with zero point 0 (symmetric, per tensor or per
output channel: what ONNX Runtime's quantizer writes), a 2-D weight (a convolution: 2-D). The
weights are packed at import, the activations' zero point folded into the bias; a convolution
is im2col (of the input in NHWC; a 1x1 one of stride 1 reads the NHWC rows as
they are, which the previous convolution's rows are once the transposes between cancel) then
qgemm, its (N * OH * OW, C) rows taken back to NCHW (a grouped one: an im2col and a qgemm per
group over its channels, the groups' rows concatenated); a depthwise one (a group per channel) is
qdepthwise, whose float32 rows hold the int32 sums exactly for the caller's requantization. Each
builder returns None where the operands do not fit; the caller then keeps ONNX's arithmetic on
wider types (quantize.py)."""

from __future__ import annotations

import numpy as np

from ....ops.quantized import conv_weights, fold_weights
from ..node import NodeContext, Tensor
from .nn import _window


def _weights(cx: NodeContext, w: Tensor, zero: Tensor | None) -> np.ndarray | None:
    """The constant int8 weights of zero point 0, else None."""
    if not isinstance(w, np.ndarray) or w.dtype != np.int8:
        return None
    if zero is not None and (not isinstance(zero, np.ndarray) or zero.any()):
        return None
    return w


def _fits(cx: NodeContext, x: Tensor, zero: Tensor | None) -> bool:
    """uint8 activations of a static shape and one zero point (or none)."""
    t = cx.type(x)
    return (t.dtype == "uint8" and all(isinstance(d, int) for d in t.shape)
            and (zero is None or cx.type(zero).shape in ((), (1,))))


def _qgemm(cx: NodeContext, rows: Tensor, zero: Tensor | None, w: np.ndarray, bias: np.ndarray | None, out: str,
           scale: Tensor | None, zero_point: int = 0) -> Tensor:
    """qgemm of uint8 rows (M, K) by weights (K, N): (M, N), padded columns cut off."""
    n = w.shape[1]
    packed, folded, sums = fold_weights(w, bias)
    if rows_k := packed.shape[1] * 4 - cx.type(rows).shape[1]:  # whole K-groups: zero columns, zero weights
        rows = cx.op("pad", [rows], {"pads": (0, 0, 0, rows_k)})
    bias_in: Tensor = folded
    if zero is not None:
        za = cx.op("cast", [cx.op("reshape", [zero], {"shape": ()})], {"dtype": "int32"})
        bias_in = cx.op("sub", [folded, cx.op("mul", [za, sums])])
    inputs = [rows, packed, bias_in]
    if out != "int32":
        if cx.type(scale).shape not in ((), (n,)):
            scale = cx.op("reshape", [scale], {"shape": ()})
        if cx.type(scale).shape == (n,) and len(folded) != n:
            scale = cx.op("pad", [scale], {"pads": (0, len(folded) - n), "value": 1.0})
        inputs.append(scale)
    y = cx.op("qgemm", inputs, {"out_dtype": out, "zero_point": zero_point})
    return y if len(folded) == n else cx.op("slice", [y], {"starts": (0,), "ends": (n,), "axes": (1,)})


def matmul(cx: NodeContext, a: Tensor, a_zero: Tensor | None, w: Tensor, w_zero: Tensor | None, out: str,
           scale: Tensor | None = None, zero_point: int = 0, bias: Tensor | None = None) -> Tensor | None:
    """a (..., K) @ w (K, N) (+ an int32 bias (N,)) on qgemm, or None where the operands do not fit it."""
    weights = _weights(cx, w, w_zero)
    if (weights is None or weights.ndim != 2 or not _fits(cx, a, a_zero) or cx.type(a).rank < 2
            or not (bias is None or isinstance(bias, np.ndarray) and bias.shape == weights.shape[1:])):
        return None
    shape = cx.type(a).shape
    rows = cx.op("reshape", [a], {"shape": (int(np.prod(shape[:-1])), shape[-1])})
    y = _qgemm(cx, rows, a_zero, weights, bias, out, scale, zero_point)
    return cx.op("reshape", [y], {"shape": (*shape[:-1], weights.shape[1])})


def conv(cx: NodeContext, x: Tensor, x_zero: Tensor | None, w: Tensor, w_zero: Tensor | None,
         bias: Tensor | None, out: str, scale: Tensor | None = None, zero_point: int = 0) -> Tensor | None:
    """A 2-D convolution as im2col then qgemm, or None where it does not fit. A grouped one (more
    than one channel a group: a depthwise one is qdepthwise's) is one im2col and qgemm per group,
    over its slice of the NHWC channels, the groups' rows concatenated."""
    weights = _weights(cx, w, w_zero)
    groups = cx.attr("group", 1)
    if (weights is None or weights.ndim != 4 or not _fits(cx, x, x_zero) or cx.type(x).rank != 4
            or not (bias is None or isinstance(bias, np.ndarray)) or weights.shape[0] % groups
            or cx.type(x).shape[1] != weights.shape[1] * groups or (groups > 1 and weights.shape[1] == 1)):
        return None
    kernel = weights.shape[2:]
    strides, dilations, pads = _window(cx, x, kernel)
    if x_zero is not None and not isinstance(x_zero, np.ndarray) and any(pads):
        return None  # padding must read as the zero point, which only the run knows
    fill = int(x_zero.reshape(-1)[0]) if isinstance(x_zero, np.ndarray) else 0
    n, c, h, wd = cx.type(x).shape
    cout, cg, og = weights.shape[0], c // groups, weights.shape[0] // groups
    nhwc = cx.op("transpose", [x], {"perm": (0, 2, 3, 1)})
    if groups > 1 and scale is not None and cx.type(scale).shape not in ((), (1,)):
        scale = cx.op("reshape", [scale], {"shape": (cout,)})
    ys = []
    for g in range(groups):
        part = nhwc if groups == 1 else cx.op("slice", [nhwc], {"starts": (g * cg,), "ends": ((g + 1) * cg,),
                                                                "axes": (3,)})
        if tuple(kernel) == (1, 1) and tuple(strides) == (1, 1) and not any(pads):  # its patches are the rows
            cols = cx.op("reshape", [part], {"shape": (n * h * wd, cg)})
        else:
            cols = cx.op("im2col", [part], {"kernel": kernel, "strides": strides, "dilations": dilations,
                                            "pads": pads, "pad_value": fill})
        outs = slice(g * og, (g + 1) * og)
        s = scale if groups == 1 or scale is None or cx.type(scale).shape != (cout,) else cx.op(
            "slice", [scale], {"starts": (outs.start,), "ends": (outs.stop,), "axes": (0,)})
        ys.append(_qgemm(cx, cols, x_zero, conv_weights(weights[outs]), None if bias is None else bias[outs], out,
                         s, zero_point))
    y = ys[0] if groups == 1 else cx.op("concat", ys, {"axis": 1})
    oh = (h + pads[0] + pads[2] - dilations[0] * (kernel[0] - 1) - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - dilations[1] * (kernel[1] - 1) - 1) // strides[1] + 1
    return nchw(cx, y, (n, oh, ow, cout))


def depthwise(cx: NodeContext, x: Tensor, x_zero: Tensor | None, w: Tensor, w_zero: Tensor | None,
              bias: Tensor | None) -> tuple[Tensor, tuple[int, ...]] | None:
    """A depthwise 2-D convolution (one group per channel) on qdepthwise: the int32 sums of (x -
    x_zero) by w plus the bias, as float32 NHWC rows (N * OH * OW, C) (exact: the sums of a window
    under 2^24), and (N, OH, OW, C) for `nchw`; or None where it does not fit. The caller's
    requantization of the rows fuses into the kernel."""
    weights = _weights(cx, w, w_zero)
    channels = cx.type(x).shape[1] if cx.type(x).rank == 4 else None
    if (weights is None or weights.ndim != 4 or weights.shape[1] != 1 or not _fits(cx, x, x_zero)
            or not cx.attr("group", 1) == channels == weights.shape[0] > 1
            or not (bias is None or isinstance(bias, np.ndarray))
            or not (x_zero is None or isinstance(x_zero, np.ndarray))):
        return None
    c, kernel = weights.shape[0], weights.shape[2:]
    if np.prod(kernel) * 255 * 128 >= 1 << 24:
        return None  # (a window whose sums float32 would round)
    strides, dilations, pads = _window(cx, x, kernel)
    fill = int(x_zero.reshape(-1)[0]) if x_zero is not None else 0
    taps = np.ascontiguousarray(weights[:, 0].transpose(1, 2, 0))  # (KH, KW, C)
    folded = (np.zeros(c, np.int32) if bias is None else bias.astype(np.int32)) \
        - fill * taps.astype(np.int32).sum((0, 1), dtype=np.int32)
    nhwc = cx.op("transpose", [x], {"perm": (0, 2, 3, 1)})
    rows = cx.op("qdepthwise", [nhwc, taps, folded.astype(np.int32), np.ones(c, np.float32)],
                 {"strides": strides, "dilations": dilations, "pads": pads, "pad_value": fill})
    n, _, h, wd = cx.type(x).shape
    oh = (h + pads[0] + pads[2] - dilations[0] * (kernel[0] - 1) - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - dilations[1] * (kernel[1] - 1) - 1) // strides[1] + 1
    return rows, (n, oh, ow, c)


def nchw(cx: NodeContext, rows: Tensor, shape: tuple[int, ...]) -> Tensor:
    """NHWC rows (N * OH * OW, C) as the NCHW tensor of `shape` (N, OH, OW, C)."""
    return cx.op("transpose", [cx.op("reshape", [rows], {"shape": shape})], {"perm": (0, 3, 1, 2)})

"""ONNX Runtime's quantized operators of the com.microsoft domain that its QOperator models hold
and that ember's QDQ fusion (qdq.py) writes: QGemm, QLinearAdd, QLinearGlobalAveragePool.

QGemm runs on qgemm (int8.py), as QLinearMatMul does, with its int32 bias C folded into qgemm's;
only its form on the int8 kernel is taken (uint8 A, constant int8 B of zero point 0, alpha 1, no
transA), anything else is an UnsupportedOpError naming what ember takes. QLinearAdd and
QLinearGlobalAveragePool compute what their QDQ form computes in float32 (DequantizeLinear, the
float operator, QuantizeLinear: quantize.py's arithmetic), so a QDQ model's Add fused into one is
bit-exact against onnx's reference evaluator of the QDQ model. A 4-D operand (N, C, H, W) is
taken to NHWC first (an add to its rows (N * H * W, C)) and the result back to NCHW: those
transposes cancel against the ones around the int8 convolutions, whose rows are NHWC, so that a
residual add reads and extends the producing convolution's qgemm rows and fuses into its
kernel's epilogue.
"""

from __future__ import annotations

import numpy as np

from ..node import NodeContext, Tensor
from ..registry import converts
from . import int8
from .quantize import _requantized, dequantize, quantize

NHWC, NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def _static4(cx: NodeContext, x: Tensor) -> bool:
    t = cx.type(x)
    return t.rank == 4 and all(isinstance(d, int) for d in t.shape)


def _out_dtype(cx: NodeContext, zero_point: Tensor | None) -> str:
    return "uint8" if zero_point is None else cx.type(zero_point).dtype


@converts("QLinearAdd", domain="com.microsoft")
def _qlinear_add(cx: NodeContext):
    a, a_scale, a_zero, b, b_scale, b_zero, c_scale, c_zero = (cx.optional(k) for k in range(8))
    shape = cx.type(a).shape
    rows = _static4(cx, a) and shape == cx.type(b).shape
    if rows:  # the NHWC rows (N * H * W, C) of a convolution's qgemm: its epilogue's loops
        n, c, h, w = shape
        a, b = (cx.op("reshape", [cx.op("transpose", [t], {"perm": NHWC})], {"shape": (n * h * w, c)})
                for t in (a, b))
    total = cx.op("add", [dequantize(cx, a, a_scale, a_zero), dequantize(cx, b, b_scale, b_zero)])
    y = quantize(cx, total, c_scale, c_zero, _out_dtype(cx, c_zero))
    return [int8.nchw(cx, y, (n, h, w, c)) if rows else y]


@converts("QLinearGlobalAveragePool", domain="com.microsoft")
def _qlinear_global_average(cx: NodeContext):
    x, x_scale, x_zero, y_scale, y_zero = (cx.optional(k) for k in range(5))
    channels_last = bool(cx.attr("channels_last", 0))
    rank = cx.type(x).rank
    if rank < 3:
        raise cx.error(f"the input must be N, C, spatial... (or channels last), got rank {rank}")
    nhwc = not channels_last and _static4(cx, x)
    if nhwc:
        x = cx.op("transpose", [x], {"perm": NHWC})
    spatial = tuple(range(1, rank - 1)) if channels_last or nhwc else tuple(range(2, rank))
    mean = cx.op("mean", [dequantize(cx, x, x_scale, x_zero)], {"axes": spatial, "keepdims": True})
    y = quantize(cx, mean, y_scale, y_zero, _out_dtype(cx, y_zero))
    return [cx.op("transpose", [y], {"perm": NCHW}) if nhwc else y]


@converts("QGemm", domain="com.microsoft")
def _qgemm(cx: NodeContext):
    a, a_scale, a_zero, b, b_scale, b_zero, c, y_scale, y_zero = (cx.optional(k) for k in range(9))
    if cx.attr("alpha", 1.0) != 1.0 or cx.attr("transA", 0) or not isinstance(b, np.ndarray) \
            or not (c is None or isinstance(c, np.ndarray)):
        raise cx.unsupported("QGemm other than alpha=1, transA=0 with constant B and C")
    if cx.attr("transB", 0):
        b = np.ascontiguousarray(b.T)
    if y_scale is None:  # float32 out: the sums times a_scale * b_scale
        y = int8.matmul(cx, a, a_zero, b, b_zero, "float32", cx.op("mul", [a_scale, b_scale]), bias=c)
    else:
        epilogue = _requantized(cx, a_scale, b_scale, y_scale, y_zero) if y_zero is not None else None
        y = None if epilogue is None else int8.matmul(cx, a, a_zero, b, b_zero, *epilogue, bias=c)
    if y is None:
        raise cx.unsupported("QGemm of operands other than uint8 A of one zero point and int8 B of zero point 0 "
                             "(ember's int8 kernel)")
    return [y]

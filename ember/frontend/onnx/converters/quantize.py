"""ONNX quantization operators, written with ember's casts, arithmetic, matmul and convolution:
QuantizeLinear, DequantizeLinear (per tensor, per axis, and blocked), DynamicQuantizeLinear,
MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv.

MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv run on ember's int8 kernel where their
operands fit it (int8.py: uint8 activations, constant int8 weights of zero point 0; a qgemm a
group); the rest as follows. The arithmetic is ONNX's reference arithmetic: dequantizing is (float32(x) - zero_point) *
scale, quantizing is rint(x / scale) + zero_point saturated to the integer type; the integer
matmuls accumulate in int32, and QLinearMatMul rescales the int32 sums in float64; the integer
convolutions run in float64 (exact: every sum of products of 8-bit values is an integer far below
2^53), as ember's convolutions are floating-point.

The quantized types are the integers (int2 to int16, uint2 to uint16) and the narrow floats,
as in ONNX's reference: quantizing to a float8 type is x / scale cast (saturated unless
saturate=0: ONNX's Cast), to float4_e2m1fn x / scale + zero_point cast (it saturates by
itself); a float8 or float4 zero point is not applied when dequantizing (ONNX requires it to be
0 for float8).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ....tir import dtype as dt
from ..node import NodeContext, Tensor, to_dtype
from ..registry import converts
from . import int8
from .elementwise import SATURATING
from .nn import _conv


def _per_axis(cx: NodeContext, v: Tensor, shape: tuple, axis: int, block: int) -> Tensor:
    """A scale or zero point broadcastable against an input of `shape`: a scalar as it is, a
    1-D one along `axis`, a blocked one (block > 0) repeated `block` times along `axis`."""
    vshape = cx.type(v).shape
    if len(vshape) == 0 or (len(vshape) == 1 and vshape[0] == 1):
        return cx.op("reshape", [v], {"shape": ()}) if vshape else v
    if not -len(shape) <= axis < len(shape):
        raise cx.error(f"axis {axis} is outside the input's {len(shape)} axes")
    axis %= len(shape)
    if not block:
        if len(vshape) != 1 or vshape[0] != shape[axis]:
            raise cx.error(f"a per-axis scale or zero point must be 1-D of the length of axis {axis} "
                           f"({shape[axis]}), got shape {vshape}")
        return cx.op("reshape", [v], {"shape": tuple(vshape[0] if d == axis else 1 for d in range(len(shape)))})
    blocks = vshape[axis]
    v = cx.op("unsqueeze", [v], {"axes": (axis + 1,)})
    v = cx.op("expand", [v], {"shape": (*vshape[:axis], blocks, block, *vshape[axis + 1:])})
    v = cx.op("reshape", [v], {"shape": (*vshape[:axis], blocks * block, *vshape[axis + 1:])})
    if blocks * block != shape[axis]:
        v = cx.op("slice", [v], {"starts": (0,), "ends": (shape[axis],), "axes": (axis,)})
    return v


def _saturate(cx: NodeContext, x: Tensor, dtype: str) -> Tensor:
    """x (integral values) clipped to the range of the integer `dtype` and cast to it."""
    if not dt.is_int(dtype):
        raise cx.unsupported(f"quantized type {dtype}")
    lo, hi = dt.int_range(dtype)
    return cx.op("cast", [cx.op("clip", [x], {"min": float(lo), "max": float(hi)})], {"dtype": dtype})


def _quantized_dtype(cx: NodeContext, zero_point: Tensor | None) -> str:
    if zero_point is not None:
        return cx.type(zero_point).dtype
    out = cx.attr("output_dtype", 0)
    return to_dtype(out, cx.where) if out else "uint8"


@converts("DequantizeLinear")
def _dequantize(cx: NodeContext):
    out = cx.type(cx.input(1)).dtype
    if cx.attr("output_dtype", 0):
        out = to_dtype(cx.attr("output_dtype"), cx.where)
    return [dequantize(cx, cx.input(0), cx.input(1), cx.optional(2), cx.attr("axis", 1), cx.attr("block_size", 0),
                       out)]


def dequantize(cx: NodeContext, x: Tensor, scale: Tensor, zero_point: Tensor | None, axis: int = 1, block: int = 0,
               out: str = "float32") -> Tensor:
    """DequantizeLinear's arithmetic: (float32(x) - zero_point) * scale, cast to `out`."""
    shape = cx.static_shape(x, "DequantizeLinear")
    y = cx.op("cast", [x], {"dtype": "float32"})
    if zero_point is not None and cx.type(zero_point).dtype != cx.type(x).dtype:
        raise cx.error(f"x is {cx.type(x).dtype} and its zero point {cx.type(zero_point).dtype}: ONNX gives both "
                       "one type")
    if zero_point is not None and not dt.is_float(cx.type(x).dtype):
        zero = cx.op("cast", [_per_axis(cx, zero_point, shape, axis, block)], {"dtype": "float32"})
        y = cx.op("sub", [y, zero])
    wide = scale if cx.type(scale).dtype == "float32" else cx.op("cast", [scale], {"dtype": "float32"})
    y = cx.op("mul", [y, _per_axis(cx, wide, shape, axis, block)])
    return y if out == "float32" else cx.op("cast", [y], {"dtype": out})


@converts("QuantizeLinear")
def _quantize(cx: NodeContext):
    zero_point = cx.optional(2)
    return [quantize(cx, cx.input(0), cx.input(1), zero_point, _quantized_dtype(cx, zero_point), cx.attr("axis", 1),
                     cx.attr("block_size", 0), bool(cx.attr("saturate", 1)))]


def quantize(cx: NodeContext, x: Tensor, scale: Tensor, zero_point: Tensor | None, dtype: str, axis: int = 1,
             block: int = 0, saturate: bool = True) -> Tensor:
    """QuantizeLinear's arithmetic: rint(x / scale) + zero_point saturated to the integer `dtype`
    (x / scale cast to a narrow float one)."""
    shape = cx.static_shape(x, "QuantizeLinear")
    if cx.type(scale).dtype != cx.type(x).dtype:
        scale = cx.op("cast", [scale], {"dtype": cx.type(x).dtype})
    y = cx.op("div", [x, _per_axis(cx, scale, shape, axis, block)])
    if dtype in SATURATING:
        if saturate:
            top = float(dt.MINIFLOATS[dtype].value(dt.MINIFLOATS[dtype].max_code))
            y = cx.op("clip", [y], {"min": -top, "max": top})
        return cx.op("cast", [y], {"dtype": dtype})
    if dtype == "float4_e2m1fn":
        if zero_point is not None:
            zero = cx.op("cast", [_per_axis(cx, zero_point, shape, axis, block)], {"dtype": cx.type(y).dtype})
            y = cx.op("add", [y, zero])
        return cx.op("cast", [y], {"dtype": dtype})
    # clipped where int32 holds it before the cast (1e10 or an infinity wrapped to INT_MIN):
    # past the type's span no zero point brings a value back into range, so saturating after is exact
    if not dt.is_int(dtype):
        raise cx.unsupported(f"quantized type {dtype}")
    lo, hi = dt.int_range(dtype)
    y = cx.op("clip", [cx.op("round", [y])], {"min": float(lo - hi), "max": float(hi - lo)})
    y = cx.op("cast", [y], {"dtype": "int32"})
    if zero_point is not None:
        zero = cx.op("cast", [_per_axis(cx, zero_point, shape, axis, block)], {"dtype": "int32"})
        y = cx.op("add", [y, zero])
    return _saturate(cx, y, dtype)


@converts("DynamicQuantizeLinear")
def _dynamic_quantize(cx: NodeContext):
    """uint8 over the range of x widened to hold 0: scale = (max - min) / 255 (1/255 for a
    constant x), zero point = rint(clip(-min / scale, 0, 255))."""
    x = cx.input(0)
    zero = cx.scalar(0, x)
    low = cx.op("minimum", [cx.op("min", [x]), zero])
    high = cx.op("maximum", [cx.op("max", [x]), zero])
    span = cx.op("sub", [high, low])
    span = cx.op("where", [cx.op("equal", [span, zero]), cx.scalar(1, x), span])
    scale = cx.op("div", [span, cx.scalar(255, x)])
    zp = cx.op("round", [cx.op("clip", [cx.op("neg", [cx.op("div", [low, scale])])], {"min": 0.0, "max": 255.0})])
    y = cx.op("add", [cx.op("round", [cx.op("div", [x, scale])]), zp])
    return [_saturate(cx, y, "uint8"), scale, cx.op("cast", [zp], {"dtype": "uint8"})]


def _centered(cx: NodeContext, x: Tensor, zero_point: Tensor | None, row_axis: bool) -> Tensor:
    """x - zero_point in int32; a 1-D zero point of A runs along A's rows (one per row)."""
    y = cx.op("cast", [x], {"dtype": "int32"})
    if zero_point is None:
        return y
    zp = cx.op("cast", [zero_point], {"dtype": "int32"})
    zshape = cx.type(zp).shape
    if row_axis and len(zshape) == 1 and zshape[0] != 1:
        zp = cx.op("unsqueeze", [zp], {"axes": (1,)})
    return cx.op("sub", [y, zp])


def _requantized(cx: NodeContext, a_scale: Tensor, w_scale: Tensor, y_scale: Tensor, y_zero: Tensor):
    """(out dtype, a_scale * w_scale / y_scale, y's zero point) for the int8 kernel's epilogue
    (the factor in float32, as onnx's reference computes it), or None where the zero point is
    not one constant or a_scale is not one number."""
    if not isinstance(y_zero, np.ndarray) or y_zero.size != 1 or np.size(a_scale) != 1 \
            or len(cx.type(a_scale).shape) > 1:
        return None
    factor = cx.op("div", [cx.op("mul", [a_scale, w_scale]), y_scale])
    return cx.type(y_zero).dtype, factor, int(y_zero.reshape(-1)[0])


@converts("MatMulInteger")
def _matmul_integer(cx: NodeContext):
    y = int8.matmul(cx, cx.input(0), cx.optional(2), cx.input(1), cx.optional(3), "int32")
    if y is not None:
        return [y]
    a = _centered(cx, cx.input(0), cx.optional(2), row_axis=True)
    b = _centered(cx, cx.input(1), cx.optional(3), row_axis=False)
    return [cx.op("matmul", [a, b])]


@converts("QLinearMatMul")
def _qlinear_matmul(cx: NodeContext):
    a_scale, b_scale, y_scale, y_zero = (cx.input(k) for k in (1, 4, 6, 7))
    epilogue = _requantized(cx, a_scale, b_scale, y_scale, y_zero)
    if epilogue is not None:
        out, factor, zp = epilogue
        y = int8.matmul(cx, cx.input(0), cx.input(2), cx.input(3), cx.input(5), out, factor, zp)
        if y is not None:
            return [y]
    acc = cx.op("matmul", [_centered(cx, cx.input(0), cx.input(2), row_axis=True),
                           _centered(cx, cx.input(3), cx.input(5), row_axis=False)])
    if len(cx.type(a_scale).shape) == 1 and cx.type(a_scale).shape[0] != 1:
        a_scale = cx.op("unsqueeze", [a_scale], {"axes": (1,)})
    factor = cx.op("cast", [cx.op("div", [cx.op("mul", [a_scale, b_scale]), y_scale])], {"dtype": "float64"})
    y = cx.op("mul", [cx.op("cast", [acc], {"dtype": "float64"}), factor])
    y = cx.op("round", [cx.op("add", [y, cx.op("cast", [y_zero], {"dtype": "float64"})])])
    return [_saturate(cx, y, cx.type(y_zero).dtype)]


def _centered_conv(cx: NodeContext, x: Tensor, x_zero: Tensor | None, w: Tensor, w_zero: Tensor | None,
                   bias: Tensor | None) -> Tensor:
    """The convolution of x - x_zero with w - w_zero (one zero point per output channel, or one)
    plus an int32 bias, in float64."""
    def centered(t: Tensor, zero: Tensor | None, per_channel: bool) -> Tensor:
        t = cx.op("cast", [t], {"dtype": "float64"})
        if zero is None:
            return t
        zero = cx.op("cast", [zero], {"dtype": "float64"})
        zshape = cx.type(zero).shape
        if per_channel and len(zshape) == 1 and zshape[0] != 1:
            zero = cx.op("reshape", [zero], {"shape": (zshape[0],) + (1,) * (cx.type(t).rank - 1)})
        return cx.op("sub", [t, zero])

    inputs = [centered(x, x_zero, False), centered(w, w_zero, True)]
    if bias is not None:
        inputs.append(cx.op("cast", [bias], {"dtype": "float64"}))
    (y,) = _conv(dataclasses.replace(cx, inputs=inputs))
    return y


@converts("ConvInteger")
def _conv_integer(cx: NodeContext):
    y = int8.conv(cx, cx.input(0), cx.optional(2), cx.input(1), cx.optional(3), None, "int32")
    if y is not None:
        return [y]
    y = _centered_conv(cx, cx.input(0), cx.optional(2), cx.input(1), cx.optional(3), None)
    return [cx.op("cast", [y], {"dtype": "int32"})]


@converts("QLinearConv")
def _qlinear_conv(cx: NodeContext):
    x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero = (cx.input(k) for k in range(8))
    epilogue = _requantized(cx, x_scale, w_scale, y_scale, y_zero)
    if epilogue is not None:
        out, factor, zp = epilogue
        y = int8.conv(cx, x, x_zero, w, w_zero, cx.optional(8), out, factor, zp)
        if y is not None:
            return [y]
    depthwise = int8.depthwise(cx, x, x_zero, w, w_zero, cx.optional(8))
    if depthwise is not None:  # its NHWC rows requantized (per channel along the rows), then NCHW
        rows, shape = depthwise
        factor = cx.op("cast", [cx.op("div", [cx.op("mul", [x_scale, w_scale]), y_scale])], {"dtype": "float64"})
        y = cx.op("add", [cx.op("mul", [cx.op("cast", [rows], {"dtype": "float64"}), factor]),
                          cx.op("cast", [cx.op("reshape", [y_zero], {"shape": ()})], {"dtype": "float64"})])
        return [int8.nchw(cx, _saturate(cx, cx.op("round", [y]), cx.type(y_zero).dtype), shape)]
    acc = _centered_conv(cx, x, x_zero, w, w_zero, cx.optional(8))
    wshape = cx.type(w_scale).shape
    if len(wshape) == 1 and wshape[0] != 1:  # one scale per output channel
        w_scale = cx.op("reshape", [w_scale], {"shape": (wshape[0],) + (1,) * (cx.type(acc).rank - 2)})
    factor = cx.op("cast", [cx.op("div", [cx.op("mul", [x_scale, w_scale]), y_scale])], {"dtype": "float64"})
    y = cx.op("add", [cx.op("mul", [acc, factor]), cx.op("cast", [y_zero], {"dtype": "float64"})])
    return [_saturate(cx, cx.op("round", [y]), cx.type(y_zero).dtype)]

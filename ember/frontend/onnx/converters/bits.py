"""ONNX operators on bits: BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot, BitCast (ember's
bitwise and bitcast operators), and BitShift as arithmetic: a left shift multiplies by 2^s in
the unsigned type of the input's width (it wraps; a signed input is read as its bits), a right
shift floor-divides by 2^s (an arithmetic shift: signed inputs keep their sign). A shift by a
negative amount or by the width or more gives 0, or -1 for a negative input shifted right, as
ONNX's reference does."""

from __future__ import annotations

import numpy as np

from ....tir import dtype as dt
from ..node import NodeContext, to_dtype
from ..registry import converts


@converts("BitwiseAnd", "BitwiseOr", "BitwiseXor")
def _bitwise(cx: NodeContext):
    op = {"BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}[cx.node.op_type]
    return [cx.op(op, [cx.input(0), cx.input(1)])]


@converts("BitwiseNot")
def _bitwise_not(cx: NodeContext):
    return [cx.op("bitwise_not", [cx.input(0)])]


@converts("BitCast")
def _bitcast(cx: NodeContext):
    x, dtype = cx.input(0), to_dtype(cx.attr("to"), cx.where)
    return [x if cx.type(x).dtype == dtype else cx.op("bitcast", [x], {"dtype": dtype})]


def _power(cx: NodeContext, s, top: int, dtype: str):
    """2^clip(s, 0, top) in `dtype` (exact: computed in float64, top < 64)."""
    clamped = cx.op("clip", [s], {"min": 0, "max": top})
    return cx.op("cast", [cx.op("pow", [np.asarray(2.0), cx.op("cast", [clamped], {"dtype": "float64"})])],
                 {"dtype": dtype})


@converts("BitShift")
def _bit_shift(cx: NodeContext):
    x, s = cx.input(0), cx.input(1)
    dtype = cx.type(x).dtype
    if not dt.is_int(dtype):
        raise cx.error(f"BitShift takes integers, got {dtype}")
    width = dt.value_bits(dtype)
    zero = cx.scalar(0, x)
    signed = not dtype.startswith("u")
    if cx.attr("direction") == "LEFT":
        unsigned = f"uint{width}" if signed else dtype
        bits = cx.op("cast", [x], {"dtype": unsigned}) if signed else x
        shifted = cx.op("mul", [bits, _power(cx, s, width - 1, unsigned)])
        shifted = cx.op("cast", [shifted], {"dtype": dtype}) if signed else shifted
        valid, outside = cx.op("less", [s, cx.scalar(width, s)]), zero
    else:
        top = width - 2 if signed else width - 1  # 2^(width - 1) does not fit a signed type: s = width - 1 is the sign
        shifted = cx.op("floor_divide", [x, _power(cx, s, top, dtype)])
        valid = cx.op("less", [s, cx.scalar(top + 1, s)])
        outside = cx.op("where", [cx.op("less", [x, zero]), cx.scalar(-1, x), zero]) if signed else zero
    if signed:
        valid = cx.op("logical_and", [valid, cx.op("greater_equal", [s, cx.scalar(0, s)])])
    return [cx.op("where", [valid, shifted, outside])]

"""Elementwise ATen operators: activations, unary math, binary arithmetic with torch's type
promotion, comparisons, logic, where, casts and copies.

Torch has already worked out each node's result dtype (it is in the node's metadata, `b.out`):
arithmetic casts its tensor operands to it and makes Python-number operands constants of it;
comparisons compute in the promoted dtype of their operands.
"""

from __future__ import annotations

import torch

from ....tir import dtype as dt
from ..node import Unsupported, ember_dtype, torch_dtype
from ..registry import handles

UNARY = {  # ATen name -> ember operator
    "relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "log": "log", "sqrt": "sqrt",
    "rsqrt": "rsqrt", "neg": "neg", "abs": "abs", "reciprocal": "reciprocal", "sin": "sin", "cos": "cos",
    "erf": "erf", "floor": "floor", "ceil": "ceil", "round": "round", "logical_not": "logical_not",
    "silu": "silu", "hardswish": "hardswish", "hardsigmoid": "hardsigmoid", "asin": "asin", "acos": "acos",
    "atan": "atan", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
}


def _unary(op: str):
    def handler(b, x):
        return b.op(op, [b.v(x, b.out.dtype)])  # int -> float for sqrt and the like; anything -> bool for not

    handler.__name__ = op
    return handler


for _aten, _op in UNARY.items():
    handles(f"{_aten}.default")(_unary(_op))


@handles("sign.default")
def sign(b, x):
    """torch's sign of a float is (0 < x) - (x < 0): 0 for NaN and for -0, where ember's (NumPy's,
    ONNX's) keeps them."""
    dtype = b.out.dtype
    y = b.v(x, dtype)
    if not dt.is_float(dtype):
        return b.op("sign", [y])
    zero = b.scalar(0, dtype)
    above, below = (b.op("cast", [b.op(op, [y, zero])], dtype=dtype) for op in ("greater", "less"))
    return b.op("sub", [above, below])


@handles("log1p.default")
def log1p(b, x):
    y = b.v(x, b.out.dtype)
    return b.op("log", [b.op("add", [y, b.scalar(1, y.dtype)])])


@handles("expm1.default")
def expm1(b, x):
    y = b.v(x, b.out.dtype)
    return b.op("sub", [b.op("exp", [y]), b.scalar(1, y.dtype)])


@handles("gelu.default")
def gelu(b, x, *, approximate="none"):
    return b.op("gelu", [b.v(x)], approximate=approximate)


@handles("leaky_relu.default")
def leaky_relu(b, x, negative_slope=0.01):
    return b.op("leaky_relu", [b.v(x)], alpha=float(negative_slope))


@handles("elu.default")
def elu(b, x, alpha=1.0, scale=1.0, input_scale=1.0):
    if scale != 1 or input_scale != 1:
        raise Unsupported(f"elu with scale={scale}, input_scale={input_scale} (only 1 is supported)")
    return b.op("elu", [b.v(x)], alpha=float(alpha))


@handles("softplus.default")
def softplus(b, x, beta=1.0, threshold=20.0):
    return b.op("softplus", [b.v(x)], beta=float(beta), threshold=float(threshold))


@handles("hardtanh.default")
def hardtanh(b, x, min_val=-1.0, max_val=1.0):
    return b.op("clip", [b.v(x)], min=min_val, max=max_val)


@handles("clamp.default")
def clamp(b, x, min=None, max=None):
    if isinstance(min, str) or isinstance(max, str):  # a symbolic size as a bound (torch's SymInt): a value
        return clamp_tensor(b, x, min, max)
    return b.op("clip", [b.v(x, b.out.dtype)], min=min, max=max)


@handles("clamp.Tensor")
def clamp_tensor(b, x, min=None, max=None):
    dtype = b.out.dtype
    y = b.v(x, dtype)
    if min is not None:
        y = b.op("maximum", [y, b.operand(min, dtype)])
    if max is not None:
        y = b.op("minimum", [y, b.operand(max, dtype)])
    return y


# -- binary arithmetic ---------------------------------------------------------------------------
BINARY = {  # ATen overload -> ember operator
    "add.Tensor": "add", "add.Scalar": "add", "sub.Tensor": "sub", "sub.Scalar": "sub",
    "mul.Tensor": "mul", "mul.Scalar": "mul", "div.Tensor": "div", "div.Scalar": "div",
    "pow.Tensor_Tensor": "pow", "pow.Scalar": "pow",
    "maximum.default": "maximum", "minimum.default": "minimum", "max.other": "maximum", "min.other": "minimum",
    "remainder.Tensor": "mod", "remainder.Scalar": "mod",
}


def _binary(op: str):
    def handler(b, x, other, alpha=1):
        dtype = b.out.dtype
        y = b.operand(other, dtype)
        if alpha != 1:
            y = b.op("mul", [y, b.scalar(alpha, dtype)])
        return b.op(op, [b.operand(x, dtype), y])

    handler.__name__ = op
    return handler


for _aten, _op in BINARY.items():
    handles(_aten)(_binary(_op))


# torch computes a float power of 0.5 or -0.5 as sqrt or rsqrt (pow_tensor_scalar_optimized_kernel):
# NaN for -inf and -0 for -0, where C's pow gives inf and 0
POWER_FUNCTIONS = {0.5: "sqrt", -0.5: "rsqrt"}


@handles("pow.Tensor_Scalar")
def pow_scalar(b, x, exponent):
    dtype = b.out.dtype
    if dt.is_float(dtype) and not isinstance(exponent, bool) and exponent in POWER_FUNCTIONS:
        return b.op(POWER_FUNCTIONS[exponent], [b.v(x, dtype)])
    return _binary("pow")(b, x, exponent)


@handles("div.Tensor_mode")
def div_mode(b, x, other, *, rounding_mode=None):
    dtype = b.out.dtype
    a, c = b.operand(x, dtype), b.operand(other, dtype)
    if rounding_mode is None:
        return b.op("div", [a, c])
    if rounding_mode == "floor":
        return b.op("floor_divide", [a, c])
    if not dt.is_float(dtype):
        return b.op("trunc_divide", [a, c])
    q = b.op("div", [a, c])  # trunc(q) = sign(q) * floor(|q|)
    return b.op("mul", [b.op("sign", [q]), b.op("floor", [b.op("abs", [q])])])


@handles("floor_divide.default", "floor_divide.Scalar")
def floor_divide(b, x, other):
    return div_mode(b, x, other, rounding_mode="floor")


# -- comparisons and logic -----------------------------------------------------------------------
COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
           "ge": "greater_equal"}


def promoted_dtype(b, x, other) -> str:
    """torch's result dtype of a tensor and a tensor or Python number (rank matters: a 0-d tensor
    does not promote a higher-rank one within its kind)."""
    def probe(y):
        if isinstance(y, bool | int | float):
            return y
        if isinstance(y, str):  # a symbolic size (torch's SymInt): a Python int to torch's promotion
            return 0
        t = b.type_of(y)
        return torch.empty((1,) * t.rank, dtype=torch_dtype(t.dtype))

    return ember_dtype(torch.result_type(probe(x), probe(other)))


def _compare(op: str):
    def handler(b, x, other):
        dtype = promoted_dtype(b, x, other)
        return b.op(op, [b.operand(x, dtype), b.operand(other, dtype)])

    handler.__name__ = op
    return handler


for _aten, _op in COMPARE.items():
    handles(f"{_aten}.Tensor", f"{_aten}.Scalar")(_compare(_op))


def _logical(op: str):
    def handler(b, x, other):
        return b.op(op, [b.operand(x, "bool"), b.operand(other, "bool")])

    handler.__name__ = op
    return handler


handles("logical_and.default")(_logical("logical_and"))
handles("logical_or.default")(_logical("logical_or"))
handles("logical_xor.default")(_logical("not_equal"))


def _bitwise(logical: str, bitwise: str):
    """On bools the logical operator, on integers the bitwise one (ember's take one or the other)."""
    def handler(b, x, other):
        dtype = b.out.dtype
        if dtype == "bool":
            return _logical(logical)(b, x, other)
        return b.op(bitwise, [b.operand(x, dtype), b.operand(other, dtype)])

    handler.__name__ = bitwise
    return handler


handles("bitwise_and.Tensor", "bitwise_and.Scalar", "__and__.Tensor", "__and__.Scalar")(
    _bitwise("logical_and", "bitwise_and"))
handles("bitwise_or.Tensor", "bitwise_or.Scalar", "__or__.Tensor", "__or__.Scalar")(
    _bitwise("logical_or", "bitwise_or"))
handles("bitwise_xor.Tensor", "bitwise_xor.Scalar", "__xor__.Tensor", "__xor__.Scalar")(
    _bitwise("not_equal", "bitwise_xor"))


@handles("__lshift__.Tensor", "__lshift__.Scalar", "bitwise_left_shift.Tensor", "bitwise_left_shift.Tensor_Scalar")
def left_shift(b, x, other):
    """a << s = a * 2^s, wrapping (ember's integer pow: 2^s is 0 from the width on, as torch's shift)."""
    dtype = b.out.dtype
    a, s = b.operand(x, dtype), b.operand(other, dtype)
    return b.op("mul", [a, b.op("pow", [b.scalar(2, dtype), s])])


@handles("__rshift__.Tensor", "__rshift__.Scalar", "bitwise_right_shift.Tensor", "bitwise_right_shift.Tensor_Scalar")
def right_shift(b, x, other):
    """a >> s = a // 2^s (arithmetic); 2^s wraps to 0 from the width on, and a // 0 is 0 (unsigned:
    torch's 0); a signed shift by the width less one or more is the sign, -1 or 0."""
    dtype = b.out.dtype
    a, s = b.operand(x, dtype), b.operand(other, dtype)
    q = b.op("floor_divide", [a, b.op("pow", [b.scalar(2, dtype), s])])
    if dtype.startswith("uint"):
        return q
    zero = b.scalar(0, dtype)
    sign = b.op("where", [b.op("less", [a, zero]), b.scalar(-1, dtype), zero])
    return b.op("where", [b.op("greater_equal", [s, b.scalar(dt.bits(dtype) - 1, dtype)]), sign, q])


@handles("bitwise_not.default")
def bitwise_not(b, x):
    return b.op("logical_not" if b.out.dtype == "bool" else "bitwise_not", [b.v(x)])


@handles("where.self", "where.ScalarOther", "where.ScalarSelf", "where.Scalar")
def where(b, condition, x, other):
    dtype = b.out.dtype
    return b.op("where", [b.v(condition, "bool"), b.operand(x, dtype), b.operand(other, dtype)])


@handles("masked_fill.Scalar", "masked_fill.Tensor")
def masked_fill(b, x, mask, value):
    return where(b, mask, value, x)


# -- copies and casts ----------------------------------------------------------------------------
@handles("clone.default", "alias.default", "contiguous.default", "detach.default", "lift_fresh_copy.default")
def copy(b, x, **_):
    return x


@handles("type_as.default")
def type_as(b, x, other):
    return b.v(x, b.out.dtype)


@handles("_to_copy.default")
def to_copy(b, x, *, device=None, **_):
    if device is not None and torch.device(device).type != "cpu":
        raise Unsupported(f"a copy to device {device}")
    return b.v(x, b.out.dtype)


"""ONNX elementwise operators as ember operators: unary and binary arithmetic, comparisons and
logic, casts, activations (their forms before opset 13: legacy.py).

Most map to one ember operator of docs/operators.md; the rest are decomposed here into several
(HardSigmoid with other coefficients than PyTorch's, PRelu, Selu, Mish, ...). Integer Div
truncates toward zero (`trunc_divide`); Mod with fmod=1 is `fmod`.
"""

from __future__ import annotations

import math

import numpy as np

from ....tir import dtype as dt
from ..node import NodeContext, to_dtype
from ..registry import converts

# -- elementwise ----------------------------------------------------------------------------

UNARY = {
    "Neg": "neg", "Abs": "abs", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
    "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sign": "sign", "Sin": "sin", "Cos": "cos",
    "Tanh": "tanh", "Erf": "erf", "Sigmoid": "sigmoid", "Relu": "relu", "Not": "logical_not",
    "HardSwish": "hardswish", "Asin": "asin", "Acos": "acos", "Atan": "atan", "Asinh": "asinh", "Acosh": "acosh",
    "Atanh": "atanh",
}

BINARY = {
    "Add": "add", "Sub": "sub", "Mul": "mul", "Equal": "equal", "Less": "less",
    "LessOrEqual": "less_equal", "Greater": "greater", "GreaterOrEqual": "greater_equal",
    "And": "logical_and", "Or": "logical_or", "Xor": "not_equal",
}

VARIADIC = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}


@converts(*UNARY)
def _unary(cx: NodeContext):
    return [cx.op(UNARY[cx.node.op_type], [cx.input(0)])]


@converts(*BINARY)
def _binary(cx: NodeContext):
    return [cx.op(BINARY[cx.node.op_type], [cx.input(0), cx.input(1)])]


@converts(*VARIADIC)
def _variadic(cx: NodeContext):
    xs = [t for t in cx.inputs if t is not None]
    out = xs[0]
    for x in xs[1:]:
        out = cx.op(VARIADIC[cx.node.op_type], [out, x])
    if cx.node.op_type == "Mean":
        out = cx.op("div", [out, cx.scalar(len(xs), out)])
    return [out]


@converts("Pow")
def _pow(cx: NodeContext):
    """ONNX lets the exponent have its own type. An integer base to a float exponent is the float64
    power cast back (ONNX's reference: 2 ** 2.5 is 5, where an exponent cast to an integer gives
    4); otherwise the exponent takes the base's type."""
    x, y = cx.input(0), cx.input(1)
    xt, yt = cx.type(x).dtype, cx.type(y).dtype
    if dt.is_int(xt) and dt.is_float(yt):
        wide = [cx.op("cast", [v], {"dtype": "float64"}) for v in (x, y)]
        return [cx.op("cast", [cx.op("pow", wide)], {"dtype": xt})]
    if yt != xt:
        y = cx.op("cast", [y], {"dtype": xt})
    return [cx.op("pow", [x, y])]


@converts("Div")
def _div(cx: NodeContext):
    """Integer Div truncates toward zero (C's `/`); x / 0 == 0, as ember defines it (ops.binary)."""
    x, y = cx.input(0), cx.input(1)
    return [cx.op("div" if dt.is_float(cx.type(x).dtype) else "trunc_divide", [x, y])]


@converts("Mod")
def _mod(cx: NodeContext):
    """fmod=0: the sign of the divisor (Python's %); fmod=1: of the dividend (C's fmod)."""
    return [cx.op("fmod" if cx.attr("fmod", 0) else "mod", [cx.input(0), cx.input(1)])]


# the float8 types ONNX's Cast saturates to (saturate=1, its default): values past the largest
# finite one, infinities included, become it
SATURATING = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")


@converts("Cast", "CastLike")
def _cast(cx: NodeContext):
    """ember's cast is NumPy's astype (ml_dtypes' for the narrow types). ONNX's saturation is a
    clip to the largest finite value before it, in float32 where the input is neither float32,
    float16 nor float64 (as ONNX's reference clips); float8_e8m0fnu rounds by ONNX's rules
    (`to_e8m0`)."""
    x = cx.input(0)
    if cx.node.op_type == "Cast":
        dtype = to_dtype(cx.attr("to"), cx.where)
    else:
        dtype = cx.type(cx.input(1)).dtype
    src = cx.type(x).dtype
    if src == dtype:
        return [x]  # (a symbolic shape is int64)
    if dtype == "float8_e8m0fnu":
        return [to_e8m0(cx, x, bool(cx.attr("saturate", 1)), cx.attr("round_mode", "up"))]
    if dtype in SATURATING and cx.attr("saturate", 1) and src != "bool":
        if src not in ("float16", "float32", "float64"):
            x = cx.op("cast", [x], {"dtype": "float32"})
        top = float(dt.MINIFLOATS[dtype].value(dt.MINIFLOATS[dtype].max_code))
        x = cx.op("clip", [x], {"min": -top, "max": top})
    return [cx.op("cast", [x], {"dtype": dtype})]


def to_e8m0(cx: NodeContext, x, saturate: bool, round_mode: str):
    """x as float8_e8m0fnu by ONNX's rules (onnx.numpy_helper.to_float8e8m0): the biased exponent
    of float32(x) (its sign ignored), rounded up where any mantissa bit is set ("up"), by the
    guard, round and sticky bits ("nearest"), or not at all ("down"); NaN and inf give NaN, and
    `saturate` keeps the largest exponent from rounding up to NaN. On the bits: bitcast to uint32,
    shifts as divisions by powers of two."""
    if round_mode not in ("up", "down", "nearest"):
        raise cx.error(f"round_mode must be 'up', 'down' or 'nearest', got {round_mode!r}")
    if cx.type(x).dtype != "float32":
        x = cx.op("cast", [x], {"dtype": "float32"})
    bits = cx.op("bitcast", [x], {"dtype": "uint32"})

    def field(shift: int, width: int):
        return cx.op("mod", [cx.op("floor_divide", [bits, np.uint32(1 << shift)]), np.uint32(1 << width)])

    def test(op: str, a, b):
        return cx.op(op, [a, b])

    exponent = field(23, 8)
    normal = test("not_equal", exponent, np.uint32(255))
    if round_mode == "up":
        up = test("logical_and", test("greater", field(0, 23), np.uint32(0)), normal)
    elif round_mode == "nearest":
        guard = test("equal", field(22, 1), np.uint32(1))
        rest = test("logical_or", test("greater", field(0, 22), np.uint32(0)),
                    test("greater", exponent, np.uint32(0)))  # round, sticky, and ONNX's lsb
        up = test("logical_and", test("logical_and", guard, rest), normal)
    else:
        up = None
    if up is not None:
        if saturate:
            up = test("logical_and", up, test("not_equal", exponent, np.uint32(254)))
        exponent = cx.op("add", [exponent, cx.op("cast", [up], {"dtype": "uint32"})])
    return cx.op("bitcast", [cx.op("cast", [exponent], {"dtype": "uint8"})], {"dtype": "float8_e8m0fnu"})


@converts("Where")
def _where(cx: NodeContext):
    return [cx.op("where", [cx.input(0), cx.input(1), cx.input(2)])]


# -- activations ----------------------------------------------------------------------------


@converts("LeakyRelu")
def _leaky_relu(cx: NodeContext):
    return [cx.op("leaky_relu", [cx.input(0)], {"alpha": cx.attr("alpha", 0.01)})]


@converts("Elu")
def _elu(cx: NodeContext):
    return [cx.op("elu", [cx.input(0)], {"alpha": cx.attr("alpha", 1.0)})]


@converts("Gelu")
def _gelu(cx: NodeContext):
    return [cx.op("gelu", [cx.input(0)], {"approximate": cx.attr("approximate", "none")})]


@converts("Softplus")
def _softplus(cx: NodeContext):
    return [cx.op("softplus", [cx.input(0)])]


@converts("HardSigmoid")
def _hard_sigmoid(cx: NodeContext):
    x = cx.input(0)
    alpha, beta = cx.attr("alpha", 0.2), cx.attr("beta", 0.5)
    if math.isclose(alpha, 1 / 6, rel_tol=1e-6) and beta == 0.5:  # PyTorch's coefficients
        return [cx.op("hardsigmoid", [x])]
    y = cx.op("add", [cx.op("mul", [x, cx.scalar(alpha, x)]), cx.scalar(beta, x)])
    return [cx.op("clip", [y], {"min": 0.0, "max": 1.0})]


@converts("Clip")
def _clip(cx: NodeContext):
    x, bounds = cx.input(0), [cx.optional(1), cx.optional(2)]
    if all(b is None or isinstance(b, np.ndarray) for b in bounds):
        attrs = {k: b.item() for k, b in zip(("min", "max"), bounds) if b is not None}
        return [cx.op("clip", [x], attrs)]
    lo, hi = bounds  # bounds computed at run time
    out = x if lo is None else cx.op("maximum", [x, lo])
    return [out if hi is None else cx.op("minimum", [out, hi])]


@converts("PRelu")
def _prelu(cx: NodeContext):
    x, slope = cx.input(0), cx.input(1)
    return [cx.op("where", [cx.op("less", [x, cx.scalar(0, x)]), cx.op("mul", [x, slope]), x])]


@converts("Selu")
def _selu(cx: NodeContext):  # gamma * elu(x, alpha)
    x = cx.input(0)
    y = cx.op("elu", [x], {"alpha": cx.attr("alpha", 1.6732632423543772)})
    return [cx.op("mul", [y, cx.scalar(cx.attr("gamma", 1.0507009873554805), x)])]


@converts("Celu")
def _celu(cx: NodeContext):  # alpha * elu(x / alpha, 1)
    x = cx.input(0)
    alpha = cx.scalar(cx.attr("alpha", 1.0), x)
    return [cx.op("mul", [cx.op("elu", [cx.op("div", [x, alpha])]), alpha])]


@converts("Softsign")
def _softsign(cx: NodeContext):  # x / (1 + |x|)
    x = cx.input(0)
    return [cx.op("div", [x, cx.op("add", [cx.op("abs", [x]), cx.scalar(1, x)])])]


@converts("Mish")
def _mish(cx: NodeContext):  # x * tanh(softplus(x))
    x = cx.input(0)
    return [cx.op("mul", [x, cx.op("tanh", [cx.op("softplus", [x])])])]


@converts("ThresholdedRelu")
def _thresholded_relu(cx: NodeContext):
    x = cx.input(0)
    above = cx.op("greater", [x, cx.scalar(cx.attr("alpha", 1.0), x)])
    return [cx.op("where", [above, x, cx.scalar(0, x)])]


@converts("Shrink")
def _shrink(cx: NodeContext):  # x + bias below -lambd, x - bias above lambd, 0 between
    x = cx.input(0)
    lambd, bias = cx.scalar(cx.attr("lambd", 0.5), x), cx.scalar(cx.attr("bias", 0.0), x)
    above = cx.op("where", [cx.op("greater", [x, lambd]), cx.op("sub", [x, bias]), cx.scalar(0, x)])
    return [cx.op("where", [cx.op("less", [x, cx.op("neg", [lambd])]), cx.op("add", [x, bias]), above])]


@converts("IsNaN")
def _is_nan(cx: NodeContext):
    x = cx.input(0)
    return [cx.op("not_equal", [x, x])]


@converts("IsInf")
def _is_inf(cx: NodeContext):
    x = cx.input(0)
    signs = [s for s, attr in ((1, "detect_positive"), (-1, "detect_negative")) if cx.attr(attr, 1)]
    if not signs:
        return [cx.op("less", [x, x])]  # all false
    found = [cx.op("equal", [x, cx.scalar(s * np.inf, x)]) for s in signs]
    return [found[0] if len(found) == 1 else cx.op("logical_or", found)]


@converts("Tan")
def _tan(cx: NodeContext):
    x = cx.input(0)
    return [cx.op("div", [cx.op("sin", [x]), cx.op("cos", [x])])]


@converts("Sinh", "Cosh")
def _hyperbolic(cx: NodeContext):  # (exp(x) -+ exp(-x)) / 2
    x = cx.input(0)
    e, inverse = cx.op("exp", [x]), cx.op("exp", [cx.op("neg", [x])])
    y = cx.op("sub" if cx.node.op_type == "Sinh" else "add", [e, inverse])
    return [cx.op("mul", [y, cx.scalar(0.5, x)])]


@converts("Softmax", "LogSoftmax")
def _softmax(cx: NodeContext):
    op = "softmax" if cx.node.op_type == "Softmax" else "log_softmax"
    return [cx.op(op, [cx.input(0)], {"axis": cx.attr("axis", -1)})]

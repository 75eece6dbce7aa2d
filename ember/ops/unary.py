"""One-input elementwise operators: math (exp, log, erf, ...), activations (relu, gelu, silu,
softplus, ...), rounding, sign, logical_not, identity, clip and cast.

A table of (name, accepted dtypes, NumPy function, te expression) and one OpDef per row; the
operators with attributes read them in both functions. References compute floats in float64 and
round to the input's dtype; kernels compute float16 in float32 (the loop IR does that for every
value loaded from a float16 buffer).
"""

from __future__ import annotations

import math

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.gelu import SQRT_2_OVER_PI, erf, gelu
from .registry import REQUIRED, OpDef, OpTypeError, register

FLOAT = "float"  # floating-point inputs only
NUMBER = "number"  # integer or floating-point (not bool)
BOOL = "bool"
ANY = "any"

def _check_dtype(op: str, kind: str, dtype: str) -> None:
    ok = {
        FLOAT: dt.is_float(dtype),
        NUMBER: dt.is_float(dtype) or dt.is_int(dtype),
        BOOL: dt.is_bool(dtype),
        ANY: True,
    }[kind]
    if not ok:
        want = {FLOAT: "a floating-point", NUMBER: "a numeric (integer or floating-point)", BOOL: "a bool"}[kind]
        raise OpTypeError(f"{op} needs {want} input, got {dtype}")


# -- functions of attributes: (NumPy function, te function), each taking (x, attrs) ----------


def _gelu_np(x, attrs):
    return gelu(x, attrs["approximate"])


def _gelu_te(x, attrs):
    if attrs["approximate"] == "tanh":
        return 0.5 * x * (1.0 + te.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1.0 + te.erf(x * (1 / math.sqrt(2))))


def _softplus_np(x, attrs):
    beta, threshold = attrs["beta"], attrs["threshold"]
    with np.errstate(over="ignore"):  # the overflowing branch is not selected
        return np.where(x * beta > threshold, x, np.log1p(np.exp(beta * x)) / beta)


def _softplus_te(x, attrs):
    beta, threshold = float(attrs["beta"]), float(attrs["threshold"])
    return te.if_then_else(x * beta > threshold, x, te.log1p(te.exp(x * beta)) / beta)


def _clip_bounds(x_dtype: str, attrs):
    return [None if attrs[k] is None else (attrs[k] if dt.is_float(x_dtype) else int(attrs[k]))
            for k in ("min", "max")]


def _clip_np(x, attrs):
    lo, hi = _clip_bounds(x.dtype.name, attrs)
    out = x if lo is None else np.maximum(x, np.asarray(lo, x.dtype))
    return out if hi is None else np.minimum(out, np.asarray(hi, x.dtype))


def _clip_te(x, attrs):
    lo, hi = _clip_bounds(x.dtype, attrs)
    out = x if lo is None else te.max(x, te.const(lo, x.dtype))
    return out if hi is None else te.min(out, te.const(hi, x.dtype))


def _sign_te(x):
    one = 1.0 if dt.is_float(x.dtype) else 1
    return te.if_then_else(x > 0, one, te.if_then_else(x < 0, -one, x))  # keeps NaN and -0.0


def _hardsigmoid_np(x):
    return np.clip(x / 6 + 0.5, 0, 1)


def _hardsigmoid_te(x):
    # te.max/te.min take a Python number as float32: constants in x's dtype keep float16 float16
    return te.min(te.max(x * (1 / 6) + 0.5, te.const(0, x.dtype)), te.const(1, x.dtype))


def _sigmoid_np(x):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


# (name, accepted dtypes, NumPy function of x, te function of x); x is float64 in NumPy for
# floating-point inputs
TABLE = [
    ("neg", NUMBER, np.negative, lambda x: -x),
    ("abs", NUMBER, np.abs, te.abs),
    ("exp", FLOAT, np.exp, te.exp),
    ("log", FLOAT, np.log, te.log),
    ("sqrt", FLOAT, np.sqrt, te.sqrt),
    ("rsqrt", FLOAT, lambda x: 1 / np.sqrt(x), te.rsqrt),
    ("reciprocal", FLOAT, lambda x: 1 / x, lambda x: 1.0 / x),
    ("sin", FLOAT, np.sin, te.sin),
    ("cos", FLOAT, np.cos, te.cos),
    ("asin", FLOAT, np.arcsin, te.asin),
    ("acos", FLOAT, np.arccos, te.acos),
    ("atan", FLOAT, np.arctan, te.atan),
    ("asinh", FLOAT, np.arcsinh, te.asinh),
    ("acosh", FLOAT, np.arccosh, te.acosh),
    ("atanh", FLOAT, np.arctanh, te.atanh),
    ("tanh", FLOAT, np.tanh, te.tanh),
    ("erf", FLOAT, erf, te.erf),
    ("sigmoid", FLOAT, _sigmoid_np, te.sigmoid),
    ("relu", NUMBER, lambda x: np.maximum(x, np.zeros((), x.dtype)), lambda x: te.max(x, te.const(0, x.dtype))),
    ("silu", FLOAT, lambda x: x * _sigmoid_np(x), lambda x: x * te.sigmoid(x)),
    ("hardswish", FLOAT, lambda x: x * _hardsigmoid_np(x), lambda x: x * _hardsigmoid_te(x)),
    ("hardsigmoid", FLOAT, _hardsigmoid_np, _hardsigmoid_te),
    ("floor", FLOAT, np.floor, te.floor),
    ("ceil", FLOAT, np.ceil, te.ceil),
    ("round", FLOAT, np.rint, te.round),  # half to even, as C's rint in the default rounding mode
    ("sign", NUMBER, np.sign, _sign_te),
    ("logical_not", BOOL, np.logical_not, lambda x: ~x),
    ("identity", ANY, lambda x: x, lambda x: x),
]


def _number(op: str, attrs, key: str) -> None:
    v = attrs[key]
    if not isinstance(v, int | float) or isinstance(v, bool):
        raise OpTypeError(f"{op}: {key} must be a number, got {v!r}")


def _check_gelu(attrs, dtype: str) -> None:
    if attrs["approximate"] not in ("none", "tanh"):
        raise OpTypeError(f"gelu: approximate must be 'none' or 'tanh', got {attrs['approximate']!r}")


def _check_softplus(attrs, dtype: str) -> None:
    _number("softplus", attrs, "beta")
    _number("softplus", attrs, "threshold")
    if attrs["beta"] == 0:
        raise OpTypeError("softplus: beta must not be 0")


def _check_clip(attrs, dtype: str) -> None:
    for k in ("min", "max"):
        if attrs[k] is not None:
            _number("clip", attrs, k)
            if not dt.is_float(dtype) and float(attrs[k]) != int(attrs[k]):
                raise OpTypeError(f"clip: {k}={attrs[k]!r} is not an integer, and the input is {dtype}")


def _check_cast(attrs, dtype: str) -> None:
    target = attrs["dtype"]
    if not isinstance(target, str) or target not in dt.SCALAR_DTYPES:
        raise OpTypeError(f"cast: unknown dtype {target!r}; ember knows {', '.join(dt.SCALAR_DTYPES)}")


# name -> (accepted dtypes, attributes and defaults, NumPy function of (x, attrs),
#          te function of (x, attrs), attribute check of (attrs, input dtype))
WITH_ATTRS = {
    "gelu": (FLOAT, {"approximate": "none"}, _gelu_np, _gelu_te, _check_gelu),
    "softplus": (FLOAT, {"beta": 1.0, "threshold": 20.0}, _softplus_np, _softplus_te, _check_softplus),
    "leaky_relu": (FLOAT, {"alpha": 0.01}, lambda x, a: np.where(x > 0, x, x * a["alpha"]),
                   lambda x, a: te.if_then_else(x > 0, x, x * float(a["alpha"])),
                   lambda a, d: _number("leaky_relu", a, "alpha")),
    "elu": (FLOAT, {"alpha": 1.0}, lambda x, a: np.where(x > 0, x, a["alpha"] * np.expm1(x)),
            lambda x, a: te.if_then_else(x > 0, x, float(a["alpha"]) * te.expm1(x)),
            lambda a, d: _number("elu", a, "alpha")),
    "clip": (NUMBER, {"min": None, "max": None}, _clip_np, _clip_te, _check_clip),
    "cast": (ANY, {"dtype": REQUIRED}, lambda x, a: x.astype(a["dtype"]), lambda x, a: te.cast(a["dtype"], x),
             _check_cast),
}


def _out_dtype(name: str, attrs, dtype: str) -> str:
    return {"logical_not": "bool", "cast": attrs.get("dtype")}.get(name) or dtype


def _infer(name: str, kind: str, check_attrs):
    def infer(types: list[TensorType], attrs) -> list[TensorType]:
        (x,) = types
        _check_dtype(name, kind, x.dtype)
        if check_attrs is not None:
            check_attrs(attrs, x.dtype)
        return [TensorType(x.shape, _out_dtype(name, attrs, x.dtype))]

    return infer


def _reference(name: str, np_fn, with_attrs: bool):
    def reference(inputs, attrs):
        (x,) = inputs
        out_dtype = _out_dtype(name, attrs, x.dtype.name)
        if dt.is_float(x.dtype.name):
            x = x.astype("float64")
        # log(0), sqrt(-1), casts of NaN or of values past a narrow float's range: inf and NaN,
        # as kernels give them
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out = np_fn(x, attrs) if with_attrs else np_fn(x)
            return [np.asarray(out).astype(out_dtype)]

    return reference


def _compute(name: str, te_fn, with_attrs: bool):
    def compute(inputs, attrs, out_types):
        (x,) = inputs
        fn = (lambda e: te_fn(e, attrs)) if with_attrs else te_fn
        return [te.compute(x.shape, lambda *i: fn(x[i]), name=name)]

    return compute


def _register(name: str, kind: str, attrs: dict, np_fn, te_fn, check_attrs, doc: str) -> None:
    with_attrs = check_attrs is not None
    register(OpDef(
        name=name,
        infer=_infer(name, kind, check_attrs),
        reference=_reference(name, np_fn, with_attrs),
        compute=_compute(name, te_fn, with_attrs),
        pattern="elementwise",
        attrs=attrs,
        doc=doc,
    ))


for _name, _kind, _np_fn, _te_fn in TABLE:
    _register(_name, _kind, {}, _np_fn, _te_fn, None, f"Elementwise {_name}.")

for _name, (_kind, _attrs, _np_fn, _te_fn, _check) in WITH_ATTRS.items():
    _register(_name, _kind, _attrs, _np_fn, _te_fn, _check, f"Elementwise {_name}{_attrs}.")

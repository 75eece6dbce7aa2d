"""Tensor expressions: `placeholder`, `compute`, `extern`, `reduce_axis`, reducers, math, and schedules.

    A = te.placeholder((M, K), name="A")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
"""

from __future__ import annotations

from ..tir.expr import PrimExpr, Var, call, cast, const, convert, select, unify
from ..tir.expr import all_ as _all
from ..tir.expr import binary as _binary
from ..tir.tensor_intrin import call_extern
from .schedule import Stage, TESchedule, ThreadAxis
from .tensor import (
    CommReducer,
    ComputeOp,
    ExternOp,
    PlaceholderOp,
    TEError,
    Tensor,
    comm_reducer,
    compute,
    extern,
    placeholder,
    prod,
    reduce_axis,
    size_var,
    var,
)
from .tensor import max as max  # noqa: PLC0414  (te.max/te.min reduce, or combine two values)
from .tensor import min as min  # noqa: PLC0414
from .tensor import sum as sum  # noqa: PLC0414
from .tensor_intrin import decl_tensor_intrin, decl_tensor_intrinsic
from .to_tir import create_prim_func

hardware_intrinsic = call_extern  # a call of the C function that implements a hardware intrinsic


def create_schedule(ops) -> TESchedule:
    if not isinstance(ops, list | tuple):
        ops = [ops]
    return TESchedule(list(ops))


def thread_axis(tag: str) -> ThreadAxis:
    """A GPU index to bind an axis to: "blockIdx.x/y/z" or "threadIdx.x/y/z"."""
    return ThreadAxis(tag)


def if_then_else(cond, t, f) -> PrimExpr:
    return select(cond, t, f)


def all(*conds) -> PrimExpr:  # noqa: A001
    return _all(*conds)


def any(*conds) -> PrimExpr:  # noqa: A001
    out = convert(False)
    for c in conds:
        out = _binary("||", out, c)
    return out


def floordiv(a, b) -> PrimExpr:
    """Division rounding toward -inf (Python's and numpy's `//`). On integers, x // 0 == 0 and
    MIN // -1 == MIN (it wraps), as numpy gives; the generated code never traps."""
    return _binary("//", a, b)


def floormod(a, b) -> PrimExpr:
    """The remainder of floordiv, with the sign of the divisor (numpy's `%`); x % 0 == 0."""
    return _binary("%", a, b)


def truncdiv(a, b) -> PrimExpr:
    """Division rounding toward zero (C's `/` on integers); x / 0 == 0, MIN / -1 == MIN."""
    a, b = unify(a, b)
    q = _binary("//", a, b)
    return select(_floor_differs(a, b), q + 1, q)


def truncmod(a, b) -> PrimExpr:
    """The remainder of truncdiv, with the sign of the dividend (C's `%`, numpy.fmod); x % 0 == 0."""
    a, b = unify(a, b)
    r = _binary("%", a, b)
    return select(_floor_differs(a, b), r - b, r)


def _floor_differs(a, b) -> PrimExpr:
    """Where floor and truncating division differ: an inexact quotient of negative sign."""
    inexact = _binary("!=", _binary("%", a, b), 0)
    return inexact & _binary("!=", a < 0, b < 0)


def _unary(name):
    def f(x):
        return call(name, x)

    f.__name__ = name
    f.__doc__ = f"Elementwise {name}."
    return f


exp = _unary("exp")
log = _unary("log")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
tanh = _unary("tanh")
erf = _unary("erf")
sigmoid = _unary("sigmoid")
floor = _unary("floor")
ceil = _unary("ceil")
round = _unary("round")  # noqa: A001
trunc = _unary("trunc")
sin = _unary("sin")
cos = _unary("cos")
log2 = _unary("log2")
exp2 = _unary("exp2")
log1p = _unary("log1p")
expm1 = _unary("expm1")
asin = _unary("asin")
acos = _unary("acos")
atan = _unary("atan")
asinh = _unary("asinh")
acosh = _unary("acosh")
atanh = _unary("atanh")


def abs(x) -> PrimExpr:  # noqa: A001
    return call("abs", x)


def power(x, y) -> PrimExpr:
    return call("pow", x, y)


pow = power  # noqa: A001

__all__ = [
    "CommReducer", "ComputeOp", "ExternOp", "PlaceholderOp", "PrimExpr", "Stage", "TEError", "TESchedule", "Tensor",
    "Var", "abs", "acos", "acosh", "all", "any", "asin", "asinh", "atan", "atanh", "cast", "ceil", "comm_reducer",
    "call_extern", "compute", "const", "cos", "create_prim_func", "create_schedule", "decl_tensor_intrin",
    "decl_tensor_intrinsic", "erf", "exp", "exp2", "expm1", "extern", "floor",
    "floordiv", "floormod", "hardware_intrinsic", "if_then_else", "log",
    "log1p", "log2", "max", "min", "placeholder", "pow", "power", "prod", "reduce_axis", "round", "rsqrt",
    "select", "sigmoid", "sin", "size_var", "sqrt", "sum", "tanh", "thread_axis", "trunc", "truncdiv", "truncmod",
    "var",
]

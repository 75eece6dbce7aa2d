"""Arithmetic facts about loop-IR expressions: constant bounds, modular sets, constant folding.

Bounds and modular sets walk an expression bottom-up, memoized by node (the caller owns the
memo, one per query, since bounds depend on the variable bindings of the moment).

- Bounds are closed intervals (lo, hi); an unbounded side is -INF / INF (Python floats, while
  every finite bound stays an exact Python int). Integer division and modulo are floor
  division/modulo. int32/int64 arithmetic is assumed not to overflow (as in TVM); narrower
  integer types wrap, so a result interval that leaves their range widens to the whole range.
- A modular set (m, r) says the value is m*k + r for some integer k (m == 0: exactly r). It
  proves facts such as `(i*8 + 4) % 4 == 0` that intervals cannot.
- Constant folding follows C: integers wrap to their width, casts to integers truncate toward
  zero, float32 arithmetic is done in float32 (NumPy). Division by zero is left alone.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import numpy as np

from . import dtype as dt
from .expr import (
    COMPARE_OPS,
    LOGIC_OPS,
    Binary,
    Broadcast,
    Cast,
    Const,
    Not,
    PrimExpr,
    Ramp,
    Select,
    Var,
    const,
)

INF = math.inf
FULL = (-INF, INF)
Interval = tuple  # (lo, hi): int or -INF, int or INF


def dtype_range(dtype: str) -> Interval:
    """The values a dtype can hold; int64 (and floats) count as unbounded."""
    elem = dt.element_of(dtype)
    if elem == "bool":
        return (0, 1)
    if not dt.is_int(elem) or elem == "int64":
        return FULL
    return dt.int_range(elem)


def wrap(v: int, dtype: str) -> int:
    """v reduced to the two's-complement range of an integer dtype."""
    elem = dt.element_of(dtype)
    if elem == "bool":
        return int(bool(v))
    b = dt.value_bits(elem)
    v &= (1 << b) - 1
    return v - (1 << b) if not elem.startswith("u") and v >= 1 << (b - 1) else v


# -- interval arithmetic ----------------------------------------------------------------------


def is_finite(x) -> bool:
    return not isinstance(x, float)


def iadd(a: Interval, b: Interval) -> Interval:
    return (a[0] + b[0], a[1] + b[1])


def ineg(a: Interval) -> Interval:
    return (-a[1], -a[0])


def imul(a: Interval, b: Interval) -> Interval:
    if a == (0, 0) or b == (0, 0):
        return (0, 0)
    ps = [0 if x == 0 or y == 0 else x * y for x in a for y in b]
    return (min(ps), max(ps))


def _div(x, d):
    """floor(x / d) for d > 0, where either may be infinite."""
    if not is_finite(x):
        return x
    if not is_finite(d):
        return 0 if x >= 0 else -1
    return x // d


def idiv(a: Interval, b: Interval) -> Interval:
    if b[1] < 0:  # floor(x / d) == floor(-x / -d)
        a, b = ineg(a), ineg(b)
    if b[0] <= 0:
        return FULL
    lo = _div(a[0], b[0]) if a[0] < 0 else _div(a[0], b[1])
    hi = _div(a[1], b[0]) if a[1] >= 0 else _div(a[1], b[1])
    return (lo, hi)


def imod(a: Interval, b: Interval) -> Interval:
    if b[1] < 0:
        return (b[0] + 1, 0)
    if b[0] <= 0:
        return FULL
    if a[0] >= 0 and a[1] < b[0]:
        return a
    if b[0] == b[1] and is_finite(a[0]) and is_finite(a[1]) and a[0] // b[0] == a[1] // b[0]:
        return (a[0] % b[0], a[1] % b[0])
    return (0, min(a[1], b[1] - 1) if a[0] >= 0 else b[1] - 1)


def union(a: Interval, b: Interval) -> Interval:
    return (min(a[0], b[0]), max(a[1], b[1]))


def ibitwise(op: str, a: Interval, b: Interval) -> Interval:
    """&, |, ^ of two intervals: `&` with a non-negative operand lies between 0 and it; on two
    non-negative operands | and ^ stay within the bits of the larger bound; else anything."""
    known = [r[1] for r in (a, b) if r[0] >= 0 and is_finite(r[1])]
    if op == "&" and known:
        return (0, min(known))
    if len(known) < 2:
        return FULL
    return (0, (1 << max(known).bit_length()) - 1)


_INTERVAL_OPS = {
    "+": iadd,
    "-": lambda a, b: iadd(a, ineg(b)),
    "*": imul,
    "//": idiv,
    "%": imod,
    "min": lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    "max": lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    "&": lambda a, b: ibitwise("&", a, b),
    "|": lambda a, b: ibitwise("|", a, b),
    "^": lambda a, b: ibitwise("^", a, b),
}


def fit(r: Interval, dtype: str) -> Interval:
    """Clip an interval to what dtype holds; narrow types wrap, so leaving the range loses all."""
    lo, hi = dtype_range(dtype)
    if dt.bits(dtype) < 32 and (r[0] < lo or r[1] > hi):
        return (lo, hi)
    return (max(r[0], lo), min(r[1], hi))


def const_int_bound(e: PrimExpr, var_bound: Callable[[Var], Interval], memo: dict) -> Interval:
    """Interval of an integer (or bool) expression; over all lanes for vectors."""
    r = memo.get(e)
    if r is None:
        r = memo[e] = _bound(e, var_bound, memo)
    return r


def _bound(e: PrimExpr, vb, memo) -> Interval:
    if dt.is_float(e.dtype):
        return FULL

    def b(x):
        return const_int_bound(x, vb, memo)

    match e:
        case Const(v):
            return (int(v), int(v))
        case Var():
            return vb(e)
        case Binary(op, _, _, _) if op in COMPARE_OPS or op in LOGIC_OPS:
            return (0, 1)
        case Binary(op, x, y, dtype):
            return fit(_INTERVAL_OPS[op](b(x), b(y)), dtype)
        case Not():
            return (0, 1)
        case Select(_, t, f, _):
            return union(b(t), b(f))
        case Cast(dtype, v) if not dt.is_float(v.dtype):
            return fit(b(v), dtype)
        case Broadcast(v, _, _):
            return b(v)
        case Ramp(base, stride, lanes, _):
            return iadd(b(base), imul(b(stride), (0, lanes - 1)))
    return dtype_range(e.dtype)  # BufferLoad, Call, Cast from a float


# -- modular sets -----------------------------------------------------------------------------

ModSet = tuple  # (m, r): the value is m*k + r


def _norm(m: int, r: int) -> ModSet:
    return (m, r % m) if m else (0, r)


def madd(a: ModSet, b: ModSet, sign: int = 1) -> ModSet:
    return _norm(math.gcd(a[0], b[0]), a[1] + sign * b[1])


def mmul(a: ModSet, b: ModSet) -> ModSet:
    (m1, r1), (m2, r2) = a, b
    return _norm(math.gcd(m1 * m2, m1 * r2, m2 * r1), r1 * r2)


def munion(a: ModSet, b: ModSet) -> ModSet:
    return _norm(math.gcd(a[0], b[0], abs(a[1] - b[1])), a[1])


def modular_set(e: PrimExpr, memo: dict) -> ModSet:
    r = memo.get(e)
    if r is None:
        r = memo[e] = _modset(e, memo)
    return r


def _modset(e: PrimExpr, memo: dict) -> ModSet:
    def ms(x):
        return modular_set(x, memo)

    match e:
        case Const(v) if dt.is_int(e.dtype):
            return (0, int(v))
        case Binary("+" | "-" as op, x, y, _):
            return madd(ms(x), ms(y), 1 if op == "+" else -1)
        case Binary("*", x, y, _):
            return mmul(ms(x), ms(y))
        case Binary("//", x, Const(c), _) if c > 0:
            m, r = ms(x)
            return _norm(m // c, r // c) if m % c == 0 else (1, 0)
        case Binary("%", x, Const(c), _) if c > 0:
            m, r = ms(x)
            g = math.gcd(m, c)
            return (0, r % c) if g == c else _norm(g, r)
        case Binary("min" | "max", x, y, _):
            return munion(ms(x), ms(y))
        case Select(_, t, f, _):
            return munion(ms(t), ms(f))
    return (1, 0)


# -- constant folding -------------------------------------------------------------------------

_CMP = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}
_INT_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
            "%": operator.mod, "min": min, "max": max, "&": operator.and_, "|": operator.or_, "^": operator.xor}
_FLOAT_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
              "min": min, "max": max}


def const_value(e):
    """The value of a constant or a broadcast constant, else None."""
    match e:
        case Const(v) | Broadcast(Const(v)):
            return v
    return None


def const_like(v, dtype: str) -> PrimExpr:
    c = const(v, dt.element_of(dtype))
    lanes = dt.lanes_of(dtype)
    return c if lanes == 1 else Broadcast(c, lanes, dtype)


def fold_binary(op: str, a: Const, b: Const, dtype: str) -> Const | None:
    if dt.is_float(a.dtype):
        t = dt.to_numpy(a.dtype).type
        x, y = t(a.value), t(b.value)
        if op in _CMP:
            return const(bool(_CMP[op](x, y)))
        if op not in _FLOAT_OPS or (op == "/" and y == 0) or (op in ("min", "max") and
                                                              (np.isnan(x) or np.isnan(y))):
            return None
        with np.errstate(all="ignore"):
            return const(float(_FLOAT_OPS[op](x, y)), dtype)
    x, y = int(a.value), int(b.value)
    if op not in _INT_OPS and op not in _CMP and op not in LOGIC_OPS:
        return None
    if op in _CMP:
        return const(_CMP[op](x, y))
    if op in LOGIC_OPS:
        return const(bool(x and y) if op == "&&" else bool(x or y))
    if op in ("//", "%") and y == 0:
        return None
    return const(wrap(_INT_OPS[op](x, y), dtype), dtype)


def fold_cast(dtype: str, c: Const) -> Const | None:
    v = c.value
    if dt.is_float(c.dtype):
        v = float(dt.to_numpy(c.dtype).type(v))
        if dt.is_int(dtype) and not math.isfinite(v):
            return None
    if dt.is_bool(dtype):
        return const(bool(v), dtype)
    if dt.is_int(dtype):
        return const(wrap(math.trunc(v), dtype), dtype)  # C casts truncate toward zero
    with np.errstate(all="ignore"):
        return const(float(dt.to_numpy(dtype).type(v)), dtype)


def exact_identity(op: str, a: PrimExpr, b: PrimExpr, dtype: str) -> PrimExpr | None:
    """x+0, x*1, x*0 ... that hold exactly (for floats: only x*1, x/1, x-(+0.0))."""
    ca, cb = const_value(a), const_value(b)
    if dt.is_int(dtype):
        if (op in ("+", "-") and cb == 0) or (op in ("*", "//") and cb == 1):
            return a
        if (op == "+" and ca == 0) or (op == "*" and ca == 1):
            return b
        if (op == "*" and 0 in (ca, cb)) or (op == "%" and cb == 1):
            return const_like(0, dtype)
    elif dt.is_float(dtype):
        if (op in ("*", "/") and cb == 1) or (op == "-" and cb == 0 and repr(float(cb)) == "0.0"):
            return a
        if op == "*" and ca == 1:
            return b
    return None

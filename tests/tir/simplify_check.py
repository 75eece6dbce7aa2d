"""Helpers of the simplifier's tests: a reference evaluator (Python ints, floor division) that
says what an expression is worth, and the variables the tests share."""

from __future__ import annotations

import operator

from ember.tir.expr import Binary, Broadcast, Cast, Const, Not, Ramp, Select, Var
from ember.tir.functor import visit_expr

_OPS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
    "%": operator.mod, "min": min, "max": max, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
    "&&": lambda a, b: a and b, "||": lambda a, b: a or b,
}


def evaluate(e, env):
    """The value of e; vectors are lists, one value per lane."""
    match e:
        case Var():
            return env[e]
        case Const(v):
            return v
        case Ramp(base, stride, lanes):
            b, st_ = evaluate(base, env), evaluate(stride, env)
            return [b + k * st_ for k in range(lanes)]
        case Broadcast(v, lanes):
            return [evaluate(v, env)] * lanes
        case Binary(op, a, b, _):
            va, vb = evaluate(a, env), evaluate(b, env)
            if isinstance(va, list):
                return [_OPS[op](p, q) for p, q in zip(va, vb)]
            return _OPS[op](va, vb)
        case Not(a):
            return not evaluate(a, env)
        case Select(c, t, f):
            return evaluate(t, env) if evaluate(c, env) else evaluate(f, env)
        case Cast(_, v):
            return evaluate(v, env)
    raise TypeError(type(e).__name__)


def size(e) -> int:
    n = []
    visit_expr(e, n.append)
    return len(n)


def text(e) -> str:
    return str(e)


# the index variables the tests share (int64)
io, ii, x, y, i, j, n = (Var(s) for s in ("io", "ii", "x", "y", "i", "j", "n"))

"""The simplifier's rewrite rules (arith.py's Analyzer runs them): an expression rewritten
bottom-up over the linear forms and bounds of arith_linear.

- `a // d` and `a % d` (d a constant or a single symbolic term) pull out the terms of a that d
  divides, then decide the rest from its bounds: `(io*32 + ii) // 32 -> io` when ii in [0, 32).
- Comparisons and min/max look at the bounds of `a - b` in linear form.
- Everything else: constant folding (floor semantics, wrap-around for narrow integers, float32
  through NumPy so results match C: arith_bound), logic with constant sides, identities that are
  exact (floats are never reassociated, and `x * 0.0` is kept: x may be inf or nan), and vector
  rules (Broadcast op Broadcast, Ramp +- Broadcast, Ramp * Broadcast).

A node that simplifies to itself is returned as the same object, so identity says "unchanged".
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from . import dtype as dt
from .arith_bound import const_value, exact_identity, fold_binary, fold_cast, is_finite, wrap
from .arith_linear import INDEX_DTYPES, LinearForm, Linearizer
from .expr import (
    COMPARE_OPS,
    LOGIC_OPS,
    Binary,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    Const,
    Not,
    PrimExpr,
    Ramp,
    Select,
    Var,
    const,
)

if TYPE_CHECKING:
    from .arith import Analyzer

_SWAP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}  # a op b == b SWAP a
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


def _decide(op: str, lo, hi) -> bool | None:
    """The truth of `d op 0` for every d in [lo, hi], if it is the same for all."""
    yes, no = {
        "<": (hi < 0, lo >= 0), "<=": (hi <= 0, lo > 0), ">": (lo > 0, hi <= 0),
        ">=": (lo >= 0, hi < 0), "==": (lo == hi == 0, lo > 0 or hi < 0),
        "!=": (lo > 0 or hi < 0, lo == hi == 0),
    }[op]
    return True if yes else False if no else None


class Rewriter(Linearizer):
    """One simplification query: the rewrite of each node, memoized (bindings are fixed meanwhile)."""

    def __init__(self, ana: Analyzer):
        super().__init__(ana)
        self.memo: dict = {}  # node -> its simplification

    def simp(self, e: PrimExpr) -> PrimExpr:
        out = self.memo.get(e)
        if out is None:
            out = self._simp(e)
            if out is not e and self.key(out) == self.key(e):
                out = e  # nothing changed: keep the node (identity says "unchanged")
            self.memo[e] = out
            self.memo.setdefault(out, out)  # a simplified node is its own simplification
        return out

    def _simp(self, e: PrimExpr) -> PrimExpr:
        S = self.simp
        match e:
            case Const(v, dtype) if dt.is_int(dtype) and wrap(v, dtype) != v:
                return const(wrap(v, dtype), dtype)  # e.g. expr.cast("int8", 200) stores 200
            case Var() | Const():
                return e
            case Binary("+" | "-" | "*", _, _, dtype) if dtype in INDEX_DTYPES:
                return self.to_expr(self.lin(e), dtype)
            case Binary(op, a, b, dtype):
                return self._binary(op, S(a), S(b), dtype)
            case Not(a, dtype):
                return self._not(S(a), dtype)
            case Select(c, t, f, dtype):
                c = S(c)
                if isinstance(c, Const):
                    return S(t if c.value else f)
                t, f = S(t), S(f)
                return t if self.key(t) == self.key(f) else Select(c, t, f, dtype)
            case Cast(dtype, v):
                v = S(v)
                if isinstance(v, Const) and (r := fold_cast(dtype, v)) is not None:
                    return r
                if v.dtype == dtype:
                    return v
                if isinstance(v, Broadcast):
                    return Broadcast(S(Cast(dt.element_of(dtype), v.value)), v.lanes, dtype)
                return Cast(dtype, v)
            case Call(name, args, dtype):
                return Call(name, tuple(map(S, args)), dtype)
            case BufferLoad(buf, idx, dtype):
                return BufferLoad(buf, tuple(map(S, idx)), dtype)
            case Ramp(base, stride, lanes, dtype):
                return self._ramp(S(base), S(stride), lanes, dtype)
            case Broadcast(v, lanes, dtype):
                return Broadcast(S(v), lanes, dtype)
        raise TypeError(f"unknown expression node {type(e).__name__}")

    def _binary(self, op: str, a: PrimExpr, b: PrimExpr, dtype: str) -> PrimExpr:
        if isinstance(a, Const) and isinstance(b, Const) and (r := fold_binary(op, a, b, dtype)) is not None:
            return r
        if isinstance(a, Broadcast) and isinstance(b, Broadcast):
            inner = Binary(op, a.value, b.value, dt.with_lanes(dtype, 1))
            return Broadcast(self.simp(inner), a.lanes, dtype)
        if (isinstance(a, Ramp) or isinstance(b, Ramp)) and (r := self._vector(op, a, b, dtype)) is not None:
            return r
        if op in LOGIC_OPS:
            return self._logic(op, a, b, dtype)
        if a.dtype in INDEX_DTYPES:
            if op in ("//", "%"):
                return self._divmod(op, a, b, dtype)
            if op in COMPARE_OPS:
                return self._compare(op, a, b)
            if op in ("min", "max"):
                return self._minmax(op, a, b, dtype)
        if op in ("min", "max") and self.key(a) == self.key(b):
            return a
        r = exact_identity(op, a, b, dtype)
        return Binary(op, a, b, dtype) if r is None else r

    def _logic(self, op: str, a: PrimExpr, b: PrimExpr, dtype: str) -> PrimExpr:
        for x, y in ((a, b), (b, a)):
            if isinstance(x, Const):  # True && y -> y, False && y -> False; dually for ||
                return y if bool(x.value) == (op == "&&") else x
        return a if self.key(a) == self.key(b) else Binary(op, a, b, dtype)

    def _not(self, a: PrimExpr, dtype: str) -> PrimExpr:
        match a:
            case Const(v):
                return const(not v)
            case Not(x):
                return x
            case Binary(op, x, y, _) if op in ("==", "!=") or (op in COMPARE_OPS and dt.is_int(x.dtype)):
                return Binary(_NEGATE[op], x, y, a.dtype)  # for floats, not(x < y) is not x >= y (nan)
        return Not(a, dtype)

    def _compare(self, op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr:
        if not (self._exact(a) and self._exact(b)):
            return Binary(op, a, b, "bool")  # (a + c <= b + c is not a <= b where a + c wraps)
        d = self.lin(a).add(self.lin(b), -1)
        truth = _decide(op, *self.range(d))
        if truth is None and op in ("==", "!="):
            m, r = self.modset(d)
            if m and r % m:  # d is never 0
                truth = op == "!="
        if truth is not None:
            return const(truth)
        # canonical form: positive terms on the left, the constant on the right
        pos = LinearForm({k: t for k, t in d.terms.items() if t[0] > 0})
        neg = LinearForm({k: (-t[0], t[1]) for k, t in d.terms.items() if t[0] < 0})
        if pos.terms:
            lhs, rhs = pos, neg.add(LinearForm(const=d.const), -1)
        else:
            lhs, rhs, op = neg, LinearForm(const=d.const), _SWAP[op]
        return Binary(op, self.to_expr(lhs, a.dtype), self.to_expr(rhs, a.dtype), "bool")

    def _exact(self, e: PrimExpr) -> bool:
        """Whether int32 e computes its linear form exactly: it reads no tensor, as index arithmetic
        does (taken not to wrap), or its bounds lie in int32's range. Values read from tensors wrap
        as two's complement (docs/operators.md): x + 2**31 - 5 > x is False for x >= 5. (int64's
        values count as unbounded throughout.)"""
        if dt.element_of(e.dtype) != "int32":
            return True
        form = self.lin(e)
        if not any(isinstance(f, BufferLoad) for _, fs in form.terms.values() for f in fs):
            return True
        lo, hi = self.range(form)
        least, most = dt.int_range("int32")
        return least <= lo and hi <= most

    def _minmax(self, op: str, a: PrimExpr, b: PrimExpr, dtype: str) -> PrimExpr:
        if self.key(a) == self.key(b):
            return a
        lo, hi = self.range(self.lin(a).add(self.lin(b), -1))
        if hi <= 0:
            return a if op == "min" else b
        if lo >= 0:
            return b if op == "min" else a
        return Binary(op, a, b, dtype)

    def _divmod(self, op: str, a: PrimExpr, b: PrimExpr, dtype: str) -> PrimExpr:
        la, lb = self.lin(a), self.lin(b)
        mono = lb.monomial()
        if mono is None or mono[0] == 0:
            return Binary(op, a, b, dtype)
        dc, dfs = mono
        # a = d*q + rest, where q gathers the terms of a that d divides
        q, rest = LinearForm(), LinearForm()
        for c, fs in la.terms.values():
            left = self._remove_factors(fs, dfs)
            if left is not None and c % dc == 0:
                q = q.add(self.term(c // dc, left))
            else:
                rest = rest.add(self.term(c, fs))
        qk, rk = divmod(la.const, dc) if not dfs else (0, la.const)
        rest = rest.add(LinearForm(const=rk))
        m = self._decide_div(rest, lb, dc, dfs)
        if op == "//":
            if m is not None:
                return self.to_expr(q.add(LinearForm(const=qk + m)), dtype)
            if rk and qk:  # keep (x + 5) // 4 rather than (x + 1) // 4 + 1
                rest, qk = rest.add(LinearForm(const=qk * dc)), 0
            atom = self._div_atom(rest, lb, dc, dfs, dtype)
            return self.to_expr(q.add(LinearForm(const=qk)).add(self.term(1, (atom,))), dtype)
        if m is not None:
            return self.to_expr(rest.add(lb.scale(m), -1), dtype)
        if not dfs and dc > 0:
            ms, r = self.modset(rest)
            if ms % dc == 0:
                return const(r % dc, dtype)
            match rest.monomial():  # (x % c1) % c2 -> x % c2 when c2 divides c1
                case (1, (Binary("%", x, Const(c1)),)) if c1 > 0 and c1 % dc == 0:
                    return self._divmod("%", x, b, dtype)
        return Binary("%", self.to_expr(rest, dtype), b, dtype)

    def _div_atom(self, rest: LinearForm, lb: LinearForm, dc: int, dfs: tuple, dtype: str) -> PrimExpr:
        """rest // d, with constant divisors reduced by the common factor of rest and d."""
        if dfs or dc < 0:
            return Binary("//", self.to_expr(rest, dtype), self.to_expr(lb, dtype), dtype)
        # (g y + r) // (g k) is (y + r // g) // k: floor(floor(x / g) / k) = floor(x / (g k))
        g = math.gcd(dc, *(c for c, _ in rest.terms.values()))
        rest, dc = LinearForm({k: (c // g, fs) for k, (c, fs) in rest.terms.items()}, rest.const // g), dc // g
        if g > 1:
            return self._divmod("//", self.to_expr(rest, dtype), const(dc, dtype), dtype)
        match rest.monomial():  # (x // c1) // c2 -> x // (c1*c2)
            case (1, (Binary("//", x, Const(c1)),)) if c1 > 0:
                return self._divmod("//", x, const(c1 * dc, dtype), dtype)
        return Binary("//", self.to_expr(rest, dtype), const(dc, dtype), dtype)

    def _decide_div(self, rest: LinearForm, lb: LinearForm, dc: int, dfs: tuple) -> int | None:
        """m if floor(rest / d) == m for all bound values."""
        if not rest.terms and not dfs:
            return rest.const // dc
        lo, hi = self.range(rest)
        if not dfs:
            if dc > 0 and is_finite(lo) and is_finite(hi) and lo // dc == hi // dc:
                return lo // dc
            return None
        if lo >= 0 and self.range(rest.add(lb, -1))[1] < 0:  # 0 <= rest < d
            return 0
        return None

    def _remove_factors(self, fs: tuple, dfs: tuple) -> tuple | None:
        """fs without one occurrence of each factor of dfs, or None if one is missing."""
        left = list(fs)
        for d in dfs:
            dk = self.key(d)
            i = next((i for i, f in enumerate(left) if self.key(f) == dk), None)
            if i is None:
                return None
            del left[i]
        return tuple(left)

    # -- vectors ----------------------------------------------------------------------------
    def _ramp(self, base: PrimExpr, stride: PrimExpr, lanes: int, dtype: str) -> PrimExpr:
        if const_value(stride) == 0:
            return Broadcast(base, lanes, dtype)
        return Ramp(base, stride, lanes, dtype)

    def _vector(self, op: str, a: PrimExpr, b: PrimExpr, dtype: str) -> PrimExpr | None:
        sd, lanes = dt.element_of(dtype), dt.lanes_of(dtype)
        if sd not in INDEX_DTYPES:
            return None

        def s(o, x, y):
            return self.simp(Binary(o, x, y, sd))

        match op, a, b:
            case ("+" | "-", Ramp(), Broadcast(x)):
                return Ramp(s(op, a.base, x), a.stride, lanes, dtype)
            case ("+", Broadcast(x), Ramp()):
                return Ramp(s("+", x, b.base), b.stride, lanes, dtype)
            case ("-", Broadcast(x), Ramp()):
                return Ramp(s("-", x, b.base), s("-", const(0, sd), b.stride), lanes, dtype)
            case ("+" | "-", Ramp(), Ramp()):
                return self._ramp(s(op, a.base, b.base), s(op, a.stride, b.stride), lanes, dtype)
            case ("*", Ramp(), Broadcast(x)) | ("*", Broadcast(x), Ramp()):
                r = a if isinstance(a, Ramp) else b
                return self._ramp(s("*", r.base, x), s("*", r.stride, x), lanes, dtype)
            case ("//" | "%", Ramp(base, Const(st)), Broadcast(Const(c) as cc)) if c > 0 and st >= 0:
                # all lanes in one block of c: base = g*k + r, g = gcd(m, c) a divisor of c (base = m*k' + r),
                # so base % c is at most c - g + r % g, and r % g + st*(lanes-1) < g keeps the last lane in
                # the block (a ramp from 16*k by 1 over 16 lanes, by 32 or by 3136 = 16 * 196; a transpose's
                # flattened index, base a multiple of the lanes, inside one row of 64 or 768)
                m, r = self.modset(self.lin(base))
                g = math.gcd(m, c)
                if r % g + st * (lanes - 1) < g:
                    if op == "//":
                        return Broadcast(s("//", base, cc), lanes, dtype)
                    return Ramp(s("%", base, cc), a.stride, lanes, dtype)
        return None

"""The arithmetic simplifier of the loop IR: constant folding, canonical linear forms, floor
division and modulo under known bounds (statements: tir/transform/simplify_stmt.py; the graph's
algebraic simplification: passes/algebraic.py).

An `Analyzer` holds what is known about variables: a constant interval per variable (`bind`,
`bind_range`) and, for ranges with symbolic ends (`i in [0, n)`), the symbolic ends themselves.
`Analyzer.simplify` rewrites an expression bottom-up, one `_Rewriter` (with its memo tables) per
call:

- Integer index arithmetic (int32/int64 `+ - *`) becomes a *linear form*: constant + sum of
  coeff * product(factors), where a factor is an atom (Var, BufferLoad, `//`, `%`, min, max,
  Select, ...). Like terms are collected by structural key, constant products distributed, and
  `(x // d)*d + x % d` folded back into x, and so are the digits of a mixed radix
  (`x // 128 * 128 + x // 32 % 4 * 32 + x % 32` is x). The form prints back with the larger coefficients
  first (ties in order of appearance) and the constant last.
- `a // d` and `a % d` (d a constant or a single symbolic term) pull out the terms of a that d
  divides, then decide the rest from its bounds: `(io*32 + ii) // 32 -> io` when ii in [0, 32).
  Modular sets prove remainders (`(i*8) % 4 -> 0`).
- Comparisons and min/max look at the bounds of `a - b` in linear form. Bounds of a term whose
  variable has a symbolic range are also taken at the range's ends, so `y < n` holds for y bound
  to [0, n).
- Everything else: constant folding (floor semantics, wrap-around for narrow integers, float32
  through NumPy so results match C), logic with constant sides, identities that are exact
  (floats are never reassociated, and `x * 0.0` is kept: x may be inf or nan), and vector rules
  (Broadcast op Broadcast, Ramp +- Broadcast, Ramp * Broadcast).

Index arithmetic is assumed not to overflow, as in TVM. `simplify_stmt` walks loops binding
their variables and drops what is provably dead.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

from . import dtype as dt
from .arith_bound import (
    INF,
    const_value,
    dtype_range,
    exact_identity,
    fold_binary,
    fold_cast,
    iadd,
    imul,
    is_finite,
    madd,
    mmul,
    modular_set,
    wrap,
)
from .arith_bound import const_int_bound as _bound
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
    binary,
    const,
    convert,
)

INDEX_DTYPES = ("int32", "int64")
_MAX_EXPAND = 16  # a product of sums is distributed only up to this many terms

_SWAP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}  # a op b == b SWAP a
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


class Analyzer:
    """What is known about variables, and the questions it answers (simplify, prove, bound)."""

    def __init__(self):
        self._bounds: dict[Var, tuple] = {}
        self._sym: dict[Var, tuple[PrimExpr, PrimExpr]] = {}  # symbolic (min, max), inclusive

    def bind(self, var: Var, lo, hi) -> None:
        """var in [lo, hi] (inclusive); None is an open end."""
        self._bounds[var] = (-INF if lo is None else lo, INF if hi is None else hi)
        self._sym.pop(var, None)

    def bind_range(self, var: Var, min_expr, extent_expr) -> None:
        """var in [min, min + extent - 1]; symbolic ends are kept for proofs such as var < n."""
        mn, ext = self.simplify(convert(min_expr)), self.simplify(convert(extent_expr))
        rw = _Rewriter(self)
        (mlo, mhi), (_, ehi) = rw.range_of(mn), rw.range_of(ext)
        self.bind(var, mlo, mhi + ehi - 1)
        if not (isinstance(mn, Const) and isinstance(ext, Const)):
            self._sym[var] = (mn, self.simplify(binary("-", binary("+", mn, ext), 1)))

    @contextmanager
    def scope(self):
        """Bindings made inside the `with` block are undone on exit."""
        saved = dict(self._bounds), dict(self._sym)
        try:
            yield self
        finally:
            self._bounds, self._sym = saved

    def const_int_bound(self, e) -> tuple[int | None, int | None]:
        lo, hi = _Rewriter(self).range_of(convert(e))
        return (int(lo) if is_finite(lo) else None, int(hi) if is_finite(hi) else None)

    def simplify(self, e) -> PrimExpr:
        return _Rewriter(self).simp(convert(e))

    def can_prove(self, cond) -> bool:
        """True only if cond holds for every value of the variables within their bindings."""
        r = self.simplify(cond)
        return isinstance(r, Const) and r.value is True

    def can_prove_equal(self, a, b) -> bool:
        a, b = convert(a), convert(b)
        rw = _Rewriter(self)
        if a.dtype in INDEX_DTYPES and b.dtype in INDEX_DTYPES:
            return rw.range_of(binary("-", a, b)) == (0, 0)
        return rw.key(rw.simp(a)) == rw.key(rw.simp(b))

    def _var_bound(self, v: Var) -> tuple:
        return self._bounds.get(v) or dtype_range(v.dtype)


def simplify(e: PrimExpr, bounds: dict | None = None) -> PrimExpr:
    ana = Analyzer()
    for v, (lo, hi) in (bounds or {}).items():
        ana.bind(v, lo, hi)
    return ana.simplify(e)


# -- linear forms -----------------------------------------------------------------------------


class _Sum:
    """const + sum of coeff * product(factors); `terms` maps a term's key to (coeff, factors)."""

    __slots__ = ("terms", "const")

    def __init__(self, terms: dict | None = None, const: int = 0):
        self.terms = terms or {}
        self.const = const

    def add(self, o: _Sum, sign: int = 1) -> _Sum:
        terms = dict(self.terms)
        for k, (c, fs) in o.terms.items():
            old = terms.get(k)
            c = sign * c + (old[0] if old else 0)
            if c:
                terms[k] = (c, old[1] if old else fs)
            else:
                terms.pop(k, None)
        return _Sum(terms, self.const + sign * o.const)

    def scale(self, k: int) -> _Sum:
        if k == 0:
            return _Sum()
        return _Sum({t: (c * k, fs) for t, (c, fs) in self.terms.items()}, self.const * k)

    def monomial(self) -> tuple[int, tuple] | None:
        """(coeff, factors) if this is a single term (or a constant: factors ())."""
        if not self.terms:
            return (self.const, ())
        if len(self.terms) == 1 and self.const == 0:
            return next(iter(self.terms.values()))
        return None


def _decide(op: str, lo, hi) -> bool | None:
    """The truth of `d op 0` for every d in [lo, hi], if it is the same for all."""
    yes, no = {
        "<": (hi < 0, lo >= 0), "<=": (hi <= 0, lo > 0), ">": (lo > 0, hi <= 0),
        ">=": (lo >= 0, hi < 0), "==": (lo == hi == 0, lo > 0 or hi < 0),
        "!=": (lo > 0 or hi < 0, lo == hi == 0),
    }[op]
    return True if yes else False if no else None


class _Rewriter:
    """One simplification query: memo tables keyed by node (bindings are fixed meanwhile)."""

    def __init__(self, ana: Analyzer):
        self.ana = ana
        self.memo: dict = {}
        self.keys: dict = {}
        self.lins: dict = {}
        self.bounds: dict = {}
        self.modsets: dict = {}

    # -- structural keys --------------------------------------------------------------------
    def key(self, e: PrimExpr) -> tuple:
        k = self.keys.get(e)
        if k is None:
            k = self.keys[e] = self._key(e)
        return k

    def _key(self, e: PrimExpr) -> tuple:
        K = self.key
        match e:
            case Var(name):
                return ("v", name, e.uid)
            case Const(v, dtype):  # repr tells -0.0 from 0.0
                return ("c", dtype, repr(v) if isinstance(v, float) else v)
            case Binary(op, a, b, _):
                return ("b", op, K(a), K(b))
            case Not(a):
                return ("n", K(a))
            case Select(c, t, f):
                return ("s", K(c), K(t), K(f))
            case Cast(dtype, v):
                return ("t", dtype, K(v))
            case Call(name, args):
                return ("f", name, tuple(map(K, args)))
            case BufferLoad(buf, idx):
                return ("l", buf.name, buf.uid, tuple(map(K, idx)))
            case Ramp(base, stride, lanes):
                return ("r", K(base), K(stride), lanes)
            case Broadcast(v, lanes):
                return ("x", K(v), lanes)
        raise TypeError(f"unknown expression node {type(e).__name__}")

    # -- linear forms -----------------------------------------------------------------------
    def term(self, c: int, factors: tuple) -> _Sum:
        if not factors:
            return _Sum(const=c)
        return _Sum({tuple(sorted(map(self.key, factors))): (c, factors)})

    def lin(self, e: PrimExpr) -> _Sum:
        """The linear form of an index expression (its atoms simplified)."""
        s = self.lins.get(e)
        if s is None:
            s = self.lins[e] = self._lin(e)
        return s

    def _lin(self, e: PrimExpr) -> _Sum:
        match e:
            case Const(v):
                return _Sum(const=int(v))
            case Binary("+" | "-" as op, a, b, _):
                return self._merge_divmod(self.lin(a).add(self.lin(b), 1 if op == "+" else -1))
            case Binary("*", a, b, dtype):
                la, lb = self.lin(a), self.lin(b)
                prod = self._mul(la, lb)
                if prod is None:  # too large to distribute: one term of two factors
                    prod = self.term(1, (self.to_expr(la, dtype), self.to_expr(lb, dtype)))
                return prod
        se = self.simp(e)
        match se:
            case Const() | Binary("+" | "-" | "*"):
                return self.lin(se)
        return self.term(1, (se,))

    def _mul(self, a: _Sum, b: _Sum) -> _Sum | None:
        if not a.terms:
            return b.scale(a.const)
        if not b.terms:
            return a.scale(b.const)
        ta = [*a.terms.values(), *([(a.const, ())] if a.const else [])]
        tb = [*b.terms.values(), *([(b.const, ())] if b.const else [])]
        if len(ta) * len(tb) > _MAX_EXPAND:
            return None
        out = _Sum()
        for ca, fa in ta:
            for cb, fb in tb:
                out = out.add(self.term(ca * cb, fa + fb))
        return out

    def _merge_divmod(self, s: _Sum) -> _Sum:
        """c*(x % d) + c*d*(x // d) -> c*x, and the digits of a mixed radix into one:
        c*(x % d) + c*d*(x // d % e) -> c*(x % (d*e)), and the same of c*d*(x % (d*k) // d), so that
        an index unflattened and flattened again (a reshape between two layouts of the same
        bytes) is the flat index again. Repeated while one merges: x // 128 * 128 + x // 32 % 4
        * 32 + x % 32 is x."""
        merged = True
        while merged:
            merged = False
            mods = [fs[0] for _, fs in s.terms.values()
                    if len(fs) == 1 and isinstance(fs[0], Binary) and fs[0].op == "%"]
            for m in mods:
                mono, mod_key = self.lin(m.b).monomial(), (self.key(m),)
                if mono is None or mod_key not in s.terms:
                    continue
                dc, dfs = mono
                c = s.terms[mod_key][0]
                want = tuple(sorted((("b", "//", self.key(m.a), self.key(m.b)), *map(self.key, dfs))))
                div = s.terms.get(want)
                if div is not None and div[0] == c * dc:
                    s = s.add(_Sum({want: div, mod_key: s.terms[mod_key]}), -1).add(self.lin(m.a).scale(c))
                    merged = True
                    break
                digit = self._next_digit(s, m, dc, c) if not dfs and dc > 0 else None
                if digit is not None:
                    key, modulus = digit
                    wider = self.lin(Binary("%", m.a, const(modulus, m.dtype), m.dtype))
                    s = s.add(_Sum({key: s.terms[key], mod_key: s.terms[mod_key]}), -1).add(wider.scale(c))
                    merged = True
                    break
        return s

    def _next_digit(self, s: _Sum, m: Binary, d: int, c: int) -> tuple[tuple, int] | None:
        """The key of a term c*d*(x // d % e) or c*d*(x % M // d) (d divides M) of s, for m = x % d
        (d a positive constant), and the modulus the two digits make (d*e, or M)."""
        x = self.key(m.a)
        for key, (coeff, fs) in s.terms.items():
            if coeff != c * d or len(fs) != 1:
                continue
            match fs[0]:
                case Binary("%", Binary("//", a, Const(dd)), Const(e)) if dd == d and e > 0 and self.key(a) == x:
                    return key, d * e
                case Binary("//", Binary("%", a, Const(big)), Const(dd)) if (
                        dd == d and big > 0 and big % d == 0 and self.key(a) == x):
                    return key, big
        return None

    def to_expr(self, s: _Sum, dtype: str) -> PrimExpr:
        if not s.terms:
            return Const(wrap(s.const, dtype), dtype)
        items = sorted(s.terms.values(), key=lambda t: (t[0] < 0, -abs(t[0])))

        def mono(c, fs):
            x = fs[0]
            for f in fs[1:]:
                x = Binary("*", x, f, dtype)
            return x if c == 1 else Binary("*", x, Const(c, dtype), dtype)

        k = s.const
        if items[0][0] > 0 or not k:  # no positive term and no constant: x * -2 - y
            out = mono(*items.pop(0))
        else:  # no positive term: 5 - x
            out, k = Const(k, dtype), 0
        for c, fs in items:
            out = Binary("+" if c > 0 else "-", out, mono(abs(c), fs), dtype)
        if k:
            out = Binary("+" if k > 0 else "-", out, Const(abs(k), dtype), dtype)
        return out

    # -- bounds -----------------------------------------------------------------------------
    def bound(self, e: PrimExpr) -> tuple:
        return _bound(e, self.ana._var_bound, self.bounds)

    def _interval(self, s: _Sum) -> tuple:
        acc = (s.const, s.const)
        for c, fs in s.terms.values():
            iv = (c, c)
            for f in fs:
                iv = imul(iv, self.bound(f))
            acc = iadd(acc, iv)
        return acc

    def range(self, s: _Sum) -> tuple:
        """Bounds of a linear form; symbolic variable ranges are tried at their ends."""
        lo, hi = self._interval(s)
        if self.ana._sym and any(len(fs) == 1 and fs[0] in self.ana._sym for _, fs in s.terms.values()):
            lo = max(lo, self._interval(self._at_ends(s, upper=False))[0])
            hi = min(hi, self._interval(self._at_ends(s, upper=True))[1])
        return lo, hi

    def _at_ends(self, s: _Sum, upper: bool) -> _Sum:
        """s with each symbolically bounded variable replaced by the end of its range that
        bounds s from below (or above): a term c*v is at least c*min when c > 0."""
        for _ in range(3):  # a range may mention another bounded variable
            out, hit = _Sum(const=s.const), False
            for tk, (c, fs) in s.terms.items():
                ends = self.ana._sym.get(fs[0]) if len(fs) == 1 else None
                if ends is None:
                    out = out.add(_Sum({tk: (c, fs)}))
                else:
                    out, hit = out.add(self.lin(ends[(c > 0) == upper]).scale(c)), True
            if not hit:
                break
            s = out
        return s

    def range_of(self, e: PrimExpr) -> tuple:
        if e.dtype in INDEX_DTYPES:
            return self.range(self.lin(e))
        return self.bound(self.simp(e))

    def modset(self, s: _Sum) -> tuple:
        acc = (0, s.const)
        for c, fs in s.terms.values():
            ms = (0, c)
            for f in fs:
                ms = mmul(ms, modular_set(f, self.modsets))
            acc = madd(acc, ms)
        return acc

    # -- rewriting --------------------------------------------------------------------------
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
        d = self.lin(a).add(self.lin(b), -1)
        truth = _decide(op, *self.range(d))
        if truth is None and op in ("==", "!="):
            m, r = self.modset(d)
            if m and r % m:  # d is never 0
                truth = op == "!="
        if truth is not None:
            return const(truth)
        # canonical form: positive terms on the left, the constant on the right
        pos = _Sum({k: t for k, t in d.terms.items() if t[0] > 0})
        neg = _Sum({k: (-t[0], t[1]) for k, t in d.terms.items() if t[0] < 0})
        if pos.terms:
            lhs, rhs = pos, neg.add(_Sum(const=d.const), -1)
        else:
            lhs, rhs, op = neg, _Sum(const=d.const), _SWAP[op]
        return Binary(op, self.to_expr(lhs, a.dtype), self.to_expr(rhs, a.dtype), "bool")

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
        q, rest = _Sum(), _Sum()
        for c, fs in la.terms.values():
            left = self._remove_factors(fs, dfs)
            if left is not None and c % dc == 0:
                q = q.add(self.term(c // dc, left))
            else:
                rest = rest.add(self.term(c, fs))
        qk, rk = divmod(la.const, dc) if not dfs else (0, la.const)
        rest = rest.add(_Sum(const=rk))
        m = self._decide_div(rest, lb, dc, dfs)
        if op == "//":
            if m is not None:
                return self.to_expr(q.add(_Sum(const=qk + m)), dtype)
            if rk and qk:  # keep (x + 5) // 4 rather than (x + 1) // 4 + 1
                rest, qk = rest.add(_Sum(const=qk * dc)), 0
            atom = self._div_atom(rest, lb, dc, dfs, dtype)
            return self.to_expr(q.add(_Sum(const=qk)).add(self.term(1, (atom,))), dtype)
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

    def _div_atom(self, rest: _Sum, lb: _Sum, dc: int, dfs: tuple, dtype: str) -> PrimExpr:
        """rest // d, with constant divisors reduced by the common factor of rest and d."""
        if dfs or dc < 0:
            return Binary("//", self.to_expr(rest, dtype), self.to_expr(lb, dtype), dtype)
        # (g y + r) // (g k) is (y + r // g) // k: floor(floor(x / g) / k) = floor(x / (g k))
        g = math.gcd(dc, *(c for c, _ in rest.terms.values()))
        rest, dc = _Sum({k: (c // g, fs) for k, (c, fs) in rest.terms.items()}, rest.const // g), dc // g
        if g > 1:
            return self._divmod("//", self.to_expr(rest, dtype), const(dc, dtype), dtype)
        match rest.monomial():  # (x // c1) // c2 -> x // (c1*c2)
            case (1, (Binary("//", x, Const(c1)),)) if c1 > 0:
                return self._divmod("//", x, const(c1 * dc, dtype), dtype)
        return Binary("//", self.to_expr(rest, dtype), const(dc, dtype), dtype)

    def _decide_div(self, rest: _Sum, lb: _Sum, dc: int, dfs: tuple) -> int | None:
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


# -- statements -------------------------------------------------------------------------------

"""Linear forms of index expressions, and their bounds: what the simplifier (arith.py) reasons
with, apart from its rewrite rules (arith_rewrite.py).

Integer index arithmetic (int32/int64 `+ - *`) becomes a *linear form*: constant + sum of
coeff * product(factors), where a factor is an atom (Var, BufferLoad, `//`, `%`, min, max,
Select, ...). Like terms are collected by structural key, constant products distributed, and
`(x // d)*d + x % d` folded back into x, and so are the digits of a mixed radix
(`x // 128 * 128 + x // 32 % 4 * 32 + x % 32` is x). The form prints back with the larger
coefficients first (ties in order of appearance) and the constant last.

The bounds of a form are those of its terms (arith_bound); a term whose variable has a symbolic
range is also taken at the range's ends, so `y < n` holds for y bound to [0, n). Modular sets
prove remainders (`(i*8) % 4 -> 0`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .arith_bound import const_int_bound as _bound
from .arith_bound import iadd, imul, madd, mmul, modular_set, wrap
from .expr import Binary, Broadcast, BufferLoad, Call, Cast, Const, Not, PrimExpr, Ramp, Select, Var, const

if TYPE_CHECKING:
    from .arith import Analyzer

INDEX_DTYPES = ("int32", "int64")
_MAX_EXPAND = 16  # a product of sums is distributed only up to this many terms


class LinearForm:
    """const + sum of coeff * product(factors); `terms` maps a term's key to (coeff, factors)."""

    __slots__ = ("terms", "const")

    def __init__(self, terms: dict | None = None, const: int = 0):
        self.terms = terms or {}
        self.const = const

    def add(self, o: LinearForm, sign: int = 1) -> LinearForm:
        terms = dict(self.terms)
        for k, (c, fs) in o.terms.items():
            old = terms.get(k)
            c = sign * c + (old[0] if old else 0)
            if c:
                terms[k] = (c, old[1] if old else fs)
            else:
                terms.pop(k, None)
        return LinearForm(terms, self.const + sign * o.const)

    def scale(self, k: int) -> LinearForm:
        if k == 0:
            return LinearForm()
        return LinearForm({t: (c * k, fs) for t, (c, fs) in self.terms.items()}, self.const * k)

    def monomial(self) -> tuple[int, tuple] | None:
        """(coeff, factors) if this is a single term (or a constant: factors ())."""
        if not self.terms:
            return (self.const, ())
        if len(self.terms) == 1 and self.const == 0:
            return next(iter(self.terms.values()))
        return None


class Linearizer:
    """The structural keys, linear forms and bounds of one simplification query, memoized by node
    (bindings are fixed meanwhile). A form's atoms are simplified by `simp`, the rewriter's
    (arith_rewrite.Rewriter, this class's one subclass)."""

    def __init__(self, ana: Analyzer):
        self.ana = ana
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
    def term(self, c: int, factors: tuple) -> LinearForm:
        if not factors:
            return LinearForm(const=c)
        return LinearForm({tuple(sorted(map(self.key, factors))): (c, factors)})

    def lin(self, e: PrimExpr) -> LinearForm:
        """The linear form of an index expression (its atoms simplified)."""
        s = self.lins.get(e)
        if s is None:
            s = self.lins[e] = self._lin(e)
        return s

    def _lin(self, e: PrimExpr) -> LinearForm:
        match e:
            case Const(v):
                return LinearForm(const=int(v))
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

    def _mul(self, a: LinearForm, b: LinearForm) -> LinearForm | None:
        if not a.terms:
            return b.scale(a.const)
        if not b.terms:
            return a.scale(b.const)
        ta = [*a.terms.values(), *([(a.const, ())] if a.const else [])]
        tb = [*b.terms.values(), *([(b.const, ())] if b.const else [])]
        if len(ta) * len(tb) > _MAX_EXPAND:
            return None
        out = LinearForm()
        for ca, fa in ta:
            for cb, fb in tb:
                out = out.add(self.term(ca * cb, fa + fb))
        return out

    def _merge_divmod(self, s: LinearForm) -> LinearForm:
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
                    s = s.add(LinearForm({want: div, mod_key: s.terms[mod_key]}), -1).add(self.lin(m.a).scale(c))
                    merged = True
                    break
                digit = self._next_digit(s, m, dc, c) if not dfs and dc > 0 else None
                if digit is not None:
                    key, modulus = digit
                    wider = self.lin(Binary("%", m.a, const(modulus, m.dtype), m.dtype))
                    s = s.add(LinearForm({key: s.terms[key], mod_key: s.terms[mod_key]}), -1).add(wider.scale(c))
                    merged = True
                    break
        return s

    def _next_digit(self, s: LinearForm, m: Binary, d: int, c: int) -> tuple[tuple, int] | None:
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

    def to_expr(self, s: LinearForm, dtype: str) -> PrimExpr:
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

    def _interval(self, s: LinearForm) -> tuple:
        acc = (s.const, s.const)
        for c, fs in s.terms.values():
            iv = (c, c)
            for f in fs:
                iv = imul(iv, self.bound(f))
            acc = iadd(acc, iv)
        return acc

    def range(self, s: LinearForm) -> tuple:
        """Bounds of a linear form; symbolic variable ranges are tried at their ends."""
        lo, hi = self._interval(s)
        if self.ana._sym and any(len(fs) == 1 and fs[0] in self.ana._sym for _, fs in s.terms.values()):
            lo = max(lo, self._interval(self._at_ends(s, upper=False))[0])
            hi = min(hi, self._interval(self._at_ends(s, upper=True))[1])
        return lo, hi

    def _at_ends(self, s: LinearForm, upper: bool) -> LinearForm:
        """s with each symbolically bounded variable replaced by the end of its range that
        bounds s from below (or above): a term c*v is at least c*min when c > 0."""
        for _ in range(3):  # a range may mention another bounded variable
            out, hit = LinearForm(const=s.const), False
            for tk, (c, fs) in s.terms.items():
                ends = self.ana._sym.get(fs[0]) if len(fs) == 1 else None
                if ends is None:
                    out = out.add(LinearForm({tk: (c, fs)}))
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

    def modset(self, s: LinearForm) -> tuple:
        acc = (0, s.const)
        for c, fs in s.terms.values():
            ms = (0, c)
            for f in fs:
                ms = mmul(ms, modular_set(f, self.modsets))
            acc = madd(acc, ms)
        return acc

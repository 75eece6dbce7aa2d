"""The arithmetic simplifier of the loop IR: constant folding, canonical linear forms, floor
division and modulo under known bounds (statements: tir/transform/simplify_stmt.py; the graph's
algebraic simplification: passes/algebraic.py).

An `Analyzer` holds what is known about variables: a constant interval per variable (`bind`,
`bind_range`) and, for ranges with symbolic ends (`i in [0, n)`), the symbolic ends themselves.
`Analyzer.simplify` rewrites an expression bottom-up, one `arith_rewrite.Rewriter` (with its memo
tables) per call. The simplifier is four modules, one idea each:

- arith_linear.py: integer index arithmetic (int32/int64 `+ - *`) as *linear forms* (constant +
  sum of coeff * product(factors)), like terms collected, `(x // d)*d + x % d` folded back into x,
  and their bounds, symbolic ranges tried at their ends (`y < n` holds for y bound to [0, n)).
- arith_rewrite.py: the rewrite rules: `//` and `%` decided from bounds and modular sets
  (`(io*32 + ii) // 32 -> io` when ii in [0, 32)), comparisons and min/max from the bounds of
  `a - b`, logic, exact identities, vector rules.
- arith_bound.py: constant bounds, modular sets and constant folding of single nodes.
- here: the Analyzer, what callers ask (simplify, prove, bound).

Index arithmetic is assumed not to overflow, as in TVM. `simplify_stmt` walks loops binding
their variables and drops what is provably dead.
"""

from __future__ import annotations

from contextlib import contextmanager

from .arith_bound import INF, dtype_range, is_finite
from .arith_linear import INDEX_DTYPES
from .arith_rewrite import Rewriter
from .expr import Const, PrimExpr, Var, binary, convert


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
        rw = Rewriter(self)
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
        lo, hi = Rewriter(self).range_of(convert(e))
        return (int(lo) if is_finite(lo) else None, int(hi) if is_finite(hi) else None)

    def simplify(self, e) -> PrimExpr:
        return Rewriter(self).simp(convert(e))

    def can_prove(self, cond) -> bool:
        """True only if cond holds for every value of the variables within their bindings."""
        r = self.simplify(cond)
        return isinstance(r, Const) and r.value is True

    def can_prove_equal(self, a, b) -> bool:
        a, b = convert(a), convert(b)
        rw = Rewriter(self)
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


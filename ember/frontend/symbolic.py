"""Arithmetic on symbolic shapes at import: what Shape -> Gather -> Mul -> Concat -> Reshape
computes when some dimensions are symbols.

An element of a symbolic shape (fold.is_symbolic: an object array) is an int, a symbol name
(str), or an `Expr`: an integer polynomial in the symbols (batch * 8, seq + 1), which the
arithmetic of shapes builds and may cancel again (batch * 8 / 8 is batch). `fold_arithmetic`
applies add, sub, mul, neg and exact division elementwise, with NumPy broadcasting; each result
element is simplified back to an int or a symbol where it is one. A graph dimension is an int or
a symbol, so an expression that does not cancel cannot become one (`dims` says so); a division
that is not exact (batch / 2), or any other operator on symbols, is not folded (None).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ARITHMETIC = frozenset({"add", "sub", "mul", "neg", "div", "trunc_divide"})

Monomial = tuple[str, ...]  # sorted symbol names, a name repeated for a power


class InexactError(ArithmeticError):
    """A division of a symbolic value that is not exact."""


@dataclass(frozen=True)
class Expr:
    """sum(coefficient * product of symbols): the terms, sorted, no zero coefficient."""

    terms: tuple[tuple[Monomial, int], ...]

    @staticmethod
    def of(v: int | str | Expr) -> Expr:
        if isinstance(v, Expr):
            return v
        if isinstance(v, str):
            return Expr((((v,), 1),))
        return Expr((((), int(v)),) if int(v) else ())

    @staticmethod
    def _make(counts: dict[Monomial, int]) -> Expr:
        return Expr(tuple(sorted((m, c) for m, c in counts.items() if c)))

    def simplified(self) -> int | str | Expr:
        if not self.terms:
            return 0
        if len(self.terms) == 1:
            (mono, coef), = self.terms
            if not mono:
                return coef
            if len(mono) == 1 and coef == 1:
                return mono[0]
        return self

    def __add__(self, other):
        counts = collections.Counter(dict(self.terms))
        counts.update(dict(Expr.of(other).terms))
        return Expr._make(counts)

    def __neg__(self):
        return Expr(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, other):
        return self + -Expr.of(other)

    def __mul__(self, other):
        counts: dict[Monomial, int] = collections.Counter()
        for m1, c1 in self.terms:
            for m2, c2 in Expr.of(other).terms:
                counts[tuple(sorted(m1 + m2))] += c1 * c2
        return Expr._make(counts)

    def divided(self, other) -> Expr:
        """self / other, where that is exact: by a number that divides every coefficient, by a
        monomial that divides every term, or by an expression of which self is a multiple."""
        other = Expr.of(other)
        if len(other.terms) == 1:
            (mono, coef), = other.terms
            counts: dict[Monomial, int] = {}
            for m, c in self.terms:
                rest = collections.Counter(m)
                rest.subtract(mono)
                if c % coef or any(n < 0 for n in rest.values()):
                    raise InexactError(f"{self} / {other}")
                counts[tuple(sorted(rest.elements()))] = c // coef
            return Expr._make(counts)
        if other.terms and self.terms:  # a whole multiple of a sum: self == k * other
            k = self.terms[0][1] // other.terms[0][1] if self.terms[0][0] == other.terms[0][0] else 0
            if k and self == other * k:
                return Expr.of(k)
        raise InexactError(f"{self} / {other}")

    def __str__(self):
        parts = [" * ".join([*([str(c)] if c != 1 or not m else []), *m]) for m, c in self.terms]
        return " + ".join(parts).replace("+ -", "- ")

    __repr__ = __str__


def _apply(op: str, *args):
    a = [Expr.of(x) for x in args]
    match op:
        case "add":
            out = a[0] + a[1]
        case "sub":
            out = a[0] - a[1]
        case "mul":
            out = a[0] * a[1]
        case "neg":
            out = -a[0]
        case _:  # div, trunc_divide: exact only
            out = a[0].divided(a[1])
    return out.simplified()


def fold_arithmetic(op: str, inputs: Sequence[np.ndarray]) -> np.ndarray | None:
    """`op` (one of ARITHMETIC) on arrays of ints, symbols and expressions, elementwise with
    broadcasting; None where it cannot be folded (another op, an inexact division)."""
    if op not in ARITHMETIC or len(inputs) != (1 if op == "neg" else 2):
        return None
    if any(a.dtype.kind not in "iuO" for a in inputs):  # (float arithmetic on symbols: not a shape)
        return None
    try:
        out = np.frompyfunc(lambda *xs: _apply(op, *xs), len(inputs), 1)(*[a.astype(object) for a in inputs])
    except InexactError:
        return None
    out = np.asarray(out, dtype=object)
    return out if any(not isinstance(d, int | np.integer) for d in out.flat) else out.astype("int64")


def _equal(a, b) -> bool | None:
    """a == b where the symbols' values cannot change the answer: two numbers, or a size (a symbol
    or an expression of positive coefficients, never negative) and a negative number."""
    if isinstance(a, int | np.integer) and isinstance(b, int | np.integer):
        return bool(a == b)
    for size, n in ((a, b), (b, a)):
        if isinstance(n, int | np.integer) and n < 0 and all(c > 0 for _, c in Expr.of(size).terms):
            return False
    return None


def fold_selection(op: str, inputs: Sequence[np.ndarray]) -> np.ndarray | None:
    """`equal` of a symbolic shape with numbers and `where` on a constant condition, elementwise
    with broadcasting: torchscript's expand, Where(Equal(shape, -1), ones, shape), over a symbolic
    shape. None where an answer depends on the symbols' values."""
    if op == "equal" and len(inputs) == 2:
        out = np.frompyfunc(_equal, 2, 1)(*[a.astype(object) for a in inputs])
        out = np.asarray(out, dtype=object)
        return None if any(v is None for v in out.flat) else out.astype(bool)
    if op == "where" and len(inputs) == 3 and inputs[0].dtype == bool:
        out = np.where(inputs[0], inputs[1].astype(object), inputs[2].astype(object))
        return out if any(not isinstance(d, int | np.integer) for d in out.flat) else out.astype("int64")
    return None


def is_dim(d) -> bool:
    """Whether a symbolic shape's element can be a graph dimension (an int or a symbol)."""
    return isinstance(d, int | np.integer | str)


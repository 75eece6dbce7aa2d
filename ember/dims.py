"""Symbolic dimensions: a symbol ("seq") or a polynomial of symbols with integer coefficients
("past + 1", "2*seq", "batch*seq"), written as a string in one canonical form.

A dimension of a `TensorType` is an int or such a string; `canonical` puts every string in its
one form when the type is made, so that two spellings of one size are the same dimension
("past+1", "1 + past" -> "past + 1") and a polynomial that is a constant becomes an int. Strings
are parsed once (`parse` is cached) into a `Poly`: a frozen map from monomials (sorted tuples of
symbol names) to coefficients. A string that is not an expression of symbols (an ONNX dim_param
such as "?" or "batch size") is one symbol, named by the whole string, as before expressions.

Only the symbols themselves are bound when a model is called (from an input dimension that is
exactly that symbol); every other dimension is evaluated from them (`evaluate`): memory planning
sizes its workspace tensors so, kernels take the symbols as size arguments and compute the
expressions in their loop bounds, the entry checks input dimensions that are expressions.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .errors import ShapeError

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_.]*)|(.))")


@dataclass(frozen=True)
class Poly:
    """sum(coefficient * product of the monomial's symbols); `terms` sorted, no zero coefficient."""

    terms: tuple[tuple[tuple[str, ...], int], ...]

    @staticmethod
    def of(terms: Mapping[tuple[str, ...], int]) -> Poly:
        return Poly(tuple(sorted((m, c) for m, c in terms.items() if c)))

    def __add__(self, other: Poly) -> Poly:
        out = dict(self.terms)
        for m, c in other.terms:
            out[m] = out.get(m, 0) + c
        return Poly.of(out)

    def __mul__(self, other: Poly) -> Poly:
        out: dict[tuple[str, ...], int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in other.terms:
                m = tuple(sorted(m1 + m2))
                out[m] = out.get(m, 0) + c1 * c2
        return Poly.of(out)

    def __neg__(self) -> Poly:
        return Poly(tuple((m, -c) for m, c in self.terms))

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(sorted({s for m, _ in self.terms for s in m}))

    @property
    def constant(self) -> int | None:
        """Its value when it has no symbol."""
        if all(not m for m, _ in self.terms):
            return sum(c for _, c in self.terms)
        return None

    def evaluate(self, values: Mapping[str, int]) -> int:
        total = 0
        for m, c in self.terms:
            for s in m:
                c *= values[s]
            total += c
        return total

    def text(self) -> str:
        """The canonical string: terms of higher degree first, the constant last."""
        ordered = sorted(self.terms, key=lambda t: (-len(t[0]), t[0]))
        out = ""
        for m, c in ordered:
            body = "*".join(m) if m else ""
            mag = abs(c)
            term = body if mag == 1 and body else (f"{mag}*{body}" if body else str(mag))
            if not out:
                out = ("-" if c < 0 else "") + term
            else:
                out += (" - " if c < 0 else " + ") + term
        return out or "0"


def _symbol(name: str) -> Poly:
    return Poly((((name,), 1),))


def _const(n: int) -> Poly:
    return Poly((((), n),) if n else ())


class _Parser:
    """expr := term (('+'|'-') term)*; term := factor ('*' factor)*; factor := int | name |
    '-' factor | '(' expr ')'."""

    def __init__(self, text: str):
        self.tokens = []
        for num, name, other in _TOKEN.findall(text):
            if other.isspace():
                continue
            self.tokens.append(("int", int(num)) if num else ("name", name) if name else ("op", other))
        self.k = 0

    def peek(self):
        return self.tokens[self.k] if self.k < len(self.tokens) else ("end", None)

    def take(self):
        tok = self.peek()
        self.k += 1
        return tok

    def expr(self) -> Poly:
        p = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            sign = self.take()[1]
            q = self.term()
            p = p + (q if sign == "+" else -q)
        return p

    def term(self) -> Poly:
        p = self.factor()
        while self.peek() == ("op", "*"):
            self.take()
            p = p * self.factor()
        return p

    def factor(self) -> Poly:
        kind, val = self.take()
        if kind == "int":
            return _const(val)
        if kind == "name":
            return _symbol(val)
        if (kind, val) == ("op", "-"):
            return -self.factor()
        if (kind, val) == ("op", "("):
            p = self.expr()
            if self.take() != ("op", ")"):
                raise ValueError("')' expected")
            return p
        raise ValueError(f"unexpected {val!r}")


@functools.lru_cache(maxsize=4096)
def parse(dim: str) -> Poly:
    """The polynomial a dimension string stands for (the whole string is one symbol when it is not
    an expression of symbols)."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", dim):
        return _symbol(dim)
    try:
        parser = _Parser(dim)
        p = parser.expr()
        if parser.peek()[0] != "end" or any(k == "op" and v not in "+-*()" for k, v in parser.tokens):
            raise ValueError("trailing text")
        return p
    except (ValueError, IndexError):
        return _symbol(dim)


def canonical(dim) -> int | str:
    """A dimension in its one form: an int, a symbol, or a canonical polynomial string."""
    if not isinstance(dim, str):
        return dim
    p = parse(dim)
    c = p.constant
    return c if c is not None else p.text()


def poly(dim: int | str) -> Poly:
    return parse(dim) if isinstance(dim, str) else _const(int(dim))


def add(*dims: int | str) -> int | str:
    """The sum of dimensions, in canonical form."""
    return canonical(functools.reduce(lambda a, b: a + b, map(poly, dims), _const(0)).text())


def mul(*dims: int | str) -> int | str:
    """The product of dimensions, in canonical form."""
    return canonical(functools.reduce(lambda a, b: a * b, map(poly, dims), _const(1)).text())


def symbols_of(dim: int | str) -> tuple[str, ...]:
    """The symbols a dimension depends on (none for an int)."""
    return parse(dim).symbols if isinstance(dim, str) else ()


def is_symbol(dim) -> bool:
    """Whether a dimension is one symbol (bindable from an input's dimension), not an expression."""
    return isinstance(dim, str) and parse(dim).terms == (((dim,), 1),)


def evaluate(dim: int | str, values: Mapping[str, int], where: str = "a dimension") -> int:
    """The size of a dimension for these values of the symbols (ShapeError if one is missing)."""
    if not isinstance(dim, str):
        return int(dim)
    p = parse(dim)
    missing = [s for s in p.symbols if s not in values]
    if missing:
        names = ", ".join(repr(s) for s in missing)
        raise ShapeError(f"{where} is {dim!r}, which needs symbol{'s' * (len(missing) > 1)} {names}, not bound "
                         f"(bound: {dict(values)})")
    return p.evaluate(values)


def render(dim: int | str, symbol: Callable[[str], object], const: Callable[[int], object] = int,
           add: Callable = operator.add, mul: Callable = operator.mul):
    """The dimension built from `symbol(name)` and `const(n)` with `add` and `mul` (a tir
    expression, the text of a C expression): how kernels and the entry compute it."""
    if not isinstance(dim, str):
        return const(int(dim))
    total = None
    for m, c in parse(dim).terms:
        term = const(c) if not m or c != 1 else None
        for s in m:
            term = symbol(s) if term is None else mul(term, symbol(s))
        total = term if total is None else add(total, term)
    return const(0) if total is None else total

"""ONNX Einsum, lowered at import to ember's transpose, reshape, sum, slice and matmul.

The equation's letters name axes. Each operand first loses its repeated letters (a diagonal:
the two axes merged and every (n+1)-th element sliced out) and the letters no one else needs
(summed). Operands are then contracted left to right, two at a time, as one batched matmul:
the letters both hold and something later needs are the batch, the letters only one holds
its rows or columns, the letters both hold and nothing later needs the contracted dimension;
each operand is transposed to (batch, own, contracted) and reshaped to three dims. What is
left is summed and transposed to the output's order. `...` stands for the same broadcast
dimensions in every operand (aligned at the right, size-1 dimensions expanded); sizes must be
static.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..node import NodeContext, Tensor
from ..registry import converts


@dataclass(frozen=True)
class Term:
    """An operand and the letter of each of its axes."""

    value: Tensor
    letters: str


def _parse(cx: NodeContext, equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """The letters of each input and of the output, `...` replaced by one symbol per dimension
    (the symbols are characters outside a-zA-Z, shared by all operands, aligned at the right)."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise cx.error(f"equation {equation!r} has {len(terms)} operands, the node {len(ranks)}")
    widths = [rank - len(t.replace("...", "")) for t, rank in zip(terms, ranks)]
    if any(w < 0 or (w and "..." not in t) for t, w in zip(terms, widths)):
        raise cx.error(f"equation {equation!r} does not match the ranks {ranks} of the inputs")
    width = max(widths, default=0)
    dots = "".join(chr(0x3B1 + k) for k in range(width))  # greek letters: never in an equation
    terms = [t.replace("...", dots[width - w:]) for t, w in zip(terms, widths)]
    if arrow:
        out = rhs.replace("...", dots)
    else:  # implicit: the broadcast dims, then the letters seen once, in alphabetical order
        seen = "".join(terms)
        out = dots + "".join(sorted(c for c in set(seen) if seen.count(c) == 1 and c not in dots))
    return terms, out


def _take_diagonals(cx: NodeContext, term: Term) -> Term:
    """The term with each repeated letter reduced to one axis (its diagonal), at the end."""
    value, letters = term.value, term.letters
    while repeated := next((c for c in letters if letters.count(c) > 1), None):
        first = letters.index(repeated)
        second = letters.index(repeated, first + 1)
        rest = [k for k in range(len(letters)) if k not in (first, second)]
        value = _transpose(cx, value, rest + [first, second])
        shape = cx.static_shape(value, "Einsum")
        n = shape[-1]
        value = cx.op("reshape", [value], {"shape": (*shape[:-2], n * n)})
        value = cx.op("slice", [value], {"starts": (0,), "ends": (n * n,), "axes": (-1,), "steps": (n + 1,)})
        letters = "".join(letters[k] for k in rest) + repeated
    return Term(value, letters)


def _sum_out(cx: NodeContext, term: Term, keep: set[str]) -> Term:
    axes = tuple(k for k, c in enumerate(term.letters) if c not in keep)
    if not axes:
        return term
    value = cx.op("sum", [term.value], {"axes": axes, "keepdims": False})
    return Term(value, "".join(c for c in term.letters if c in keep))


def _transpose(cx: NodeContext, value: Tensor, perm: list[int]) -> Tensor:
    return value if perm == sorted(perm) else cx.op("transpose", [value], {"perm": tuple(perm)})


def _arrange(cx: NodeContext, term: Term, order: str) -> Tensor:
    return _transpose(cx, term.value, [term.letters.index(c) for c in order])


def _reshape(cx: NodeContext, value: Tensor, shape: tuple[int, ...]) -> Tensor:
    return value if cx.static_shape(value, "Einsum") == shape else cx.op("reshape", [value], {"shape": shape})


def _expand_to(cx: NodeContext, term: Term, sizes: dict[str, int]) -> Term:
    """The term with its size-1 axes broadcast to the size the letter has elsewhere."""
    shape = cx.static_shape(term.value, "Einsum")
    full = tuple(sizes[c] for c in term.letters)
    return term if full == shape else Term(cx.op("expand", [term.value], {"shape": full}), term.letters)


def _contract(cx: NodeContext, a: Term, b: Term, keep: set[str], sizes: dict[str, int]) -> Term:
    batch = "".join(c for c in a.letters if c in b.letters and c in keep)
    inner = "".join(c for c in a.letters if c in b.letters and c not in keep)
    rows = "".join(c for c in a.letters if c not in b.letters)
    cols = "".join(c for c in b.letters if c not in a.letters)

    def size(letters: str) -> int:
        return math.prod(sizes[c] for c in letters)

    batch_shape = tuple(sizes[c] for c in batch)
    left = _reshape(cx, _arrange(cx, a, batch + rows + inner), (*batch_shape, size(rows), size(inner)))
    right = _reshape(cx, _arrange(cx, b, batch + inner + cols), (*batch_shape, size(inner), size(cols)))
    product = cx.op("matmul", [left, right])
    shape = batch_shape + tuple(sizes[c] for c in rows + cols)
    return Term(_reshape(cx, product, shape), batch + rows + cols)


@converts("Einsum")
def _einsum(cx: NodeContext):
    values = list(cx.inputs)
    shapes = [cx.static_shape(v, "Einsum") for v in values]
    terms, out = _parse(cx, cx.attr("equation"), [len(s) for s in shapes])
    sizes: dict[str, int] = {}
    for letters, shape in zip(terms, shapes):
        for c, n in zip(letters, shape):
            if sizes.setdefault(c, n) != n and 1 not in (sizes[c], n):
                raise cx.error(f"axis {c!r} of the equation has sizes {sizes[c]} and {n}")
            sizes[c] = max(sizes[c], n)
    todo = [_expand_to(cx, _take_diagonals(cx, Term(v, t)), sizes) for v, t in zip(values, terms)]

    def needed(after: int) -> set[str]:
        return set(out).union(*(t.letters for t in todo[after:]))

    acc = _sum_out(cx, todo[0], needed(1))
    for k in range(1, len(todo)):
        acc = _contract(cx, acc, _sum_out(cx, todo[k], needed(k + 1) | set(acc.letters)), needed(k + 1), sizes)
    acc = _sum_out(cx, acc, set(out))
    return [_arrange(cx, acc, out)]

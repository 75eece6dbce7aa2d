"""Unrolling: loops marked "unrolled" (and, under a loop annotated with
"pragma_auto_unroll_max_step" = N, every serial loop nest of constant extent with at most N
iterations in all) are replaced by copies of their body, one per iteration.

Explicit copies, rather than a pragma, let the simplifier fold each copy's indices to constants,
which is what lets the C compiler keep a small accumulator tile in registers.
"""

from __future__ import annotations

from dataclasses import replace

from ..expr import as_int, const
from ..functor import mutate_stmt, stmt_children, substitute_stmt
from ..stmt import For, PrimFunc, Stmt, seq

MAX_UNROLL = 512  # a loop longer than this keeps its loop (with a compiler pragma)
AUTO_UNROLL = "pragma_auto_unroll_max_step"


def _iterations(s: Stmt) -> int | None:
    """Iterations of the loop nest s (its loops multiplied, siblings added; a vectorized loop
    is one step); None if unknown."""
    if isinstance(s, For):
        n = 1 if s.kind == "vectorized" else as_int(s.extent)
        inner = _iterations(s.body)
        return None if n is None or inner is None else n * max(inner, 1)
    total = 0
    for c in stmt_children(s):
        k = _iterations(c)
        if k is None:
            return None
        total += k
    return total


def _mark_auto(s: Stmt, limit: int) -> Stmt:
    def f(x):
        if isinstance(x, For) and x.kind == "serial":
            n = _iterations(x)
            if n is not None and n <= limit:
                return replace(x, kind="unrolled")
        return None

    return mutate_stmt(s, f_stmt=f)


def _expand(s: Stmt) -> Stmt:
    def f(x: Stmt):
        if not isinstance(x, For):
            return None
        limit = x.annotation(AUTO_UNROLL)
        if limit:
            body = _expand(_mark_auto(x.body, int(limit)))
            x = replace(x, body=body, annotations=tuple(a for a in x.annotations if a[0] != AUTO_UNROLL))
        n = as_int(x.extent)
        if x.kind != "unrolled" or n is None or n > MAX_UNROLL:
            return x
        return seq(*(substitute_stmt(x.body, {x.loop_var: const(i) + x.min}) for i in range(n)))

    return mutate_stmt(s, f_stmt=f)


def unroll(func: PrimFunc) -> PrimFunc:
    return func.with_body(_expand(func.body))

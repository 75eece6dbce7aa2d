"""Versioning of guarded tiles: a loop annotated VERSION_GUARDS gets its body twice, behind one test.

A register tile over a symbolic number of rows (a prefill of any length) cannot prove any of its
rows in bounds, so every statement of the tile carries its row's guard, inside the reduction
loop too (`if (i0 * 8 < m - 3) acc3 = acc3 + ...` on every k), and the C compiler keeps the
branches. The guards are invariant in the body: this pass tests them all once per iteration of
the annotated loop and runs, when they hold (every tile but the last), a copy of the body with the
guards removed, and the guarded body otherwise (the tail, unchanged):

    for i0 in range(ceil(m / 8)):  [version_guards]      for i0 in range(ceil(m / 8)):
        acc = ...                                            acc = ...
        for k in range(K):                          ->       if i0*8 < m and ... and i0*8 < m - 7:
            if i0 * 8 < m: acc0 += ...                           for k: acc0 += ...; ...; acc7 += ...
            ...                                              else:
            if i0 * 8 < m - 7: acc7 += ...                       for k: if i0*8 < m: acc0 += ...

A guard qualifies when it has no else branch and its condition reads no memory and no variable
bound inside the body (loops under it). Allocations at the top of the body stay outside the two
versions, so both share one register tile. The pass runs after unrolling and simplification, when
each row's guard is one comparison with constants.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from ..expr import BufferLoad, Call, Var, binary
from ..functor import collect, free_vars, mutate_stmt, visit_expr
from ..stmt import Allocate, For, IfThenElse, PrimFunc, Stmt
from ..structural import structural_key

VERSION_GUARDS = "pragma_version_guards"  # the annotation (the stage facade's pragma("version_guards"))


def version_guards(func: PrimFunc) -> PrimFunc:
    def f(s: Stmt):
        if isinstance(s, For) and s.annotation(VERSION_GUARDS):
            ann = tuple(a for a in s.annotations if a[0] != VERSION_GUARDS)
            return replace(s, body=_version(s.body), annotations=ann)
        return None

    return func.with_body(mutate_stmt(func.body, f_stmt=f))


def _version(body: Stmt) -> Stmt:
    if isinstance(body, Allocate):
        return Allocate(body.buffer, _version(body.body))
    inner = {x.loop_var for x in collect(body, lambda x: isinstance(x, For))}
    guards = [x for x in collect(body, lambda x: isinstance(x, IfThenElse))
              if x.else_case is None and _invariant(x.cond, inner)]
    if not guards:
        return body
    taken = {id(g.cond) for g in guards}  # conditions are shared, not rebuilt, by the mutator
    fast = mutate_stmt(body, f_stmt=lambda x: x.then_case if isinstance(x, IfThenElse) and x.else_case is None
                       and id(x.cond) in taken else None)
    conds = list({structural_key(g.cond): g.cond for g in guards}.values())  # each row's guard once
    return IfThenElse(functools.reduce(lambda a, b: binary("&&", a, b), conds), fast, body)


def _invariant(cond, inner: set[Var]) -> bool:
    impure: list = []
    visit_expr(cond, lambda n: impure.append(n) if isinstance(n, BufferLoad | Call) else None)
    return not impure and not (free_vars(cond) & inner)

"""A reset on a loop's first iteration (`if ko == 0: fill_zero(CL)`, what tensorize leaves
where the reduction starts) as one reset before the loop, as the instruction stream does it."""

from __future__ import annotations

from ..tir.arith import Analyzer
from ..tir.expr import Const, PrimExpr
from ..tir.expr_functor import free_vars, substitute
from ..tir.functor import stmt_exprs, touches, visit_stmt
from ..tir.stmt import Allocate, CallRoutine, For, IfThenElse, SeqStmt, Stmt, seq


def hoist_resets(s: Stmt) -> Stmt:
    """`for ko: ...; if <ko is its first value>: reset(acc); ...` -> `reset(acc); for ko: ...`
    where nothing before the reset in the loop body touches what it writes (the buffers the body
    allocates are looked through)."""
    match s:
        case For():
            body = hoist_resets(s.body)
            allocs, inner = [], body
            while isinstance(inner, Allocate):
                allocs.append(inner.buffer)
                inner = inner.body
            stmts = list(inner.stmts) if isinstance(inner, SeqStmt) else [inner]
            for k, x in enumerate(stmts):
                if (isinstance(x, IfThenElse) and x.else_case is None and isinstance(x.then_case, CallRoutine)
                        and dict(x.then_case.params).get("op") == "reset" and _first_iteration(x.cond, s)
                        and x.then_case.writes[0].buffer not in allocs
                        and not any(touches(y, x.then_case.writes[0].buffer) for y in stmts[:k])
                        and s.loop_var not in _free_vars_of(x.then_case)):
                    rest = seq(*stmts[:k], *stmts[k + 1:])
                    for buf in reversed(allocs):
                        rest = Allocate(buf, rest)
                    return seq(x.then_case, For(s.loop_var, s.min, s.extent, s.kind, rest, s.annotations))
            return s if body is s.body else For(s.loop_var, s.min, s.extent, s.kind, body, s.annotations)
        case SeqStmt(stmts):
            return seq(*(hoist_resets(x) for x in stmts))
        case Allocate(buf, body):
            return Allocate(buf, hoist_resets(body))
        case IfThenElse(c, t, e):
            return IfThenElse(c, hoist_resets(t), None if e is None else hoist_resets(e))
    return s


def _first_iteration(cond: PrimExpr, loop: For) -> bool:
    """Whether `cond` holds on the loop's first iteration and on no other."""
    if free_vars(cond) != {loop.loop_var}:
        return False
    ana = Analyzer()
    if not isinstance(first := ana.simplify(substitute(cond, {loop.loop_var: loop.min})), Const) or not first.value:
        return False
    ana.bind_range(loop.loop_var, loop.min + 1, loop.extent - 1)
    return ana.can_prove(~cond)


def _free_vars_of(s: Stmt) -> set:
    out: set = set()
    visit_stmt(s, lambda x: [out.update(free_vars(e)) for e in stmt_exprs(x)])
    return out



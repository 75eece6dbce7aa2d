"""What the kernel-time rewrites of the CUDA Emitter's body share (accumulate.py, registers.py,
copies.py): statements replaced by identity (the very objects the Emitter made), and whether a
buffer is touched, by a statement or by all but some statements of a body."""

from __future__ import annotations

from ....tir.expr import Buffer, BufferLoad, const
from ....tir.functor import mutate_stmt, stmt_exprs, visit_expr, visit_stmt
from ....tir.stmt import BufferStore, CallRoutine, Evaluate, Stmt

_NOP = Evaluate(const(0, "int32"))


def replaced(s: Stmt, table: dict[Stmt, Stmt]) -> Stmt:
    """s with each statement of the table (the very object) replaced by its value."""
    return mutate_stmt(s, f_stmt=lambda x: table.get(x))


def touches(s: Stmt, buf: Buffer) -> bool:
    """Whether s reads or writes buf (a tensorized call through its pointers)."""
    found = []

    def on_stmt(x):
        if isinstance(x, BufferStore) and x.buffer is buf or isinstance(x, CallRoutine) and any(
                p.buffer is buf for p in x.reads + x.writes):
            found.append(x)
        for e in stmt_exprs(x):
            visit_expr(e, lambda y: found.append(y) if isinstance(y, BufferLoad) and y.buffer is buf else None)

    visit_stmt(s, on_stmt)
    return bool(found)


def touched_besides(body: Stmt, stmts, buf: Buffer) -> bool:
    """Whether a statement of body other than `stmts` (those very objects) reads or writes buf."""
    return touches(replaced(body, dict.fromkeys(stmts, _NOP)), buf)

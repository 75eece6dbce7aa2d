"""What the kernel-time rewrites of the CUDA Emitter's body share (accumulate.py, registers.py,
copies.py, stages.py, lifetimes.py): statements replaced by identity (the very objects the Emitter
made), a body's statements in order through nested sequences, and whether a buffer is touched by
all but some statements of a body (by one: ember.tir.functor.touches)."""

from __future__ import annotations

from ....tir.expr import Buffer, const
from ....tir.functor import mutate_stmt, touches
from ....tir.stmt import Evaluate, SeqStmt, Stmt

_NOP = Evaluate(const(0, "int32"))


def replaced(s: Stmt, table: dict[Stmt, Stmt]) -> Stmt:
    """s with each statement of the table (the very object) replaced by its value."""
    return mutate_stmt(s, f_stmt=lambda x: table.get(x))


def touched_besides(body: Stmt, stmts, buf: Buffer) -> bool:
    """Whether a statement of body other than `stmts` (those very objects) reads or writes buf."""
    return touches(replaced(body, dict.fromkeys(stmts, _NOP)), buf)


def flat(s: Stmt) -> list[Stmt]:
    """The statements of s in order, nested sequences opened (s alone when it is no sequence)."""
    if not isinstance(s, SeqStmt):
        return [s]
    return [y for x in s.stmts for y in flat(x)]

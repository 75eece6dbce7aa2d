"""Barriers: `__syncthreads()` where a shared buffer written by some threads is read by others.

A lowered GPU kernel is straight-line code that every thread of a block runs (its thread-bound
loops are indices, not loops), so a shared buffer's hazards are between statements of one
sequence, and between iterations of a serial loop:

- in a sequence, a statement that reads a shared buffer written since the last barrier (a
  read after write), or writes one read since then (a write after read), gets a barrier before it;
- a serial loop whose body reads and writes a shared buffer gets a barrier at the end of its body,
  so the next iteration's writes wait for this one's reads (the k loop of a tiled GEMM loads the
  next tiles over the ones just read).

Conservative: a barrier is placed wherever the hazard may cross threads (which thread wrote which
element is not analysed). It is TVM's storage-sync pass restricted to shared memory, and it
assumes a barrier's statement is reached by every thread of the block (a bound loop shorter than
the block's dimension guards its body: keep barriers out of such loops).
"""

from __future__ import annotations

from dataclasses import replace

from ..tir.expr import Buffer, BufferLoad, Call
from ..tir.functor import stmt_exprs, visit_expr, visit_stmt
from ..tir.stmt import THREAD_BINDING, Allocate, BufferStore, Evaluate, For, IfThenElse, PrimFunc, SeqStmt, Stmt
from .codegen import SYNC

BARRIER = Evaluate(Call(SYNC, (), "int32"))


def insert_syncs(func: PrimFunc) -> PrimFunc:
    """func with a barrier at each shared-memory hazard (see the module doc)."""
    shared = {s.buffer for s in _all(func.body) if isinstance(s, Allocate) and s.buffer.scope == "shared"}
    if not shared:
        return func
    body = _sync(func.body, shared)
    return func if body is func.body else PrimFunc(func.name, func.params, body, func.attrs)


def _all(s: Stmt) -> list[Stmt]:
    found: list[Stmt] = []
    visit_stmt(s, found.append)
    return found


def _touches(s: Stmt, shared: set[Buffer]) -> tuple[set[Buffer], set[Buffer]]:
    """The shared buffers s reads, and those it writes."""
    reads: set[Buffer] = set()
    writes: set[Buffer] = set()

    def on_expr(e):
        if isinstance(e, BufferLoad) and e.buffer in shared:
            reads.add(e.buffer)

    for x in _all(s):
        if isinstance(x, BufferStore) and x.buffer in shared:
            writes.add(x.buffer)
        for e in stmt_exprs(x):
            visit_expr(e, on_expr)
    return reads, writes


def _sync(s: Stmt, shared: set[Buffer]) -> Stmt:
    match s:
        case SeqStmt(stmts):
            return _sync_seq([_sync(x, shared) for x in stmts], shared)
        case For() if s.kind == THREAD_BINDING:
            return s.with_body(_sync(s.body, shared))
        case For():
            body = _sync(s.body, shared)
            reads, writes = _touches(body, shared)
            if reads & writes:
                body = SeqStmt((*body.stmts, BARRIER) if isinstance(body, SeqStmt) else (body, BARRIER))
            return s.with_body(body)
        case Allocate(_, body):
            new = _sync(body, shared)
            return s if new is body else replace(s, body=new)
        case IfThenElse(_, then_case, else_case):
            return replace(s, then_case=_sync(then_case, shared),
                           else_case=None if else_case is None else _sync(else_case, shared))
    return s


def _sync_seq(stmts: list[Stmt], shared: set[Buffer]) -> Stmt:
    out: list[Stmt] = []
    written: set[Buffer] = set()
    read: set[Buffer] = set()
    for x in stmts:
        reads, writes = _touches(x, shared)
        if reads & written or writes & read:
            out.append(BARRIER)
            written, read = set(), set()
        out.append(x)
        written |= writes
        read |= reads
    return SeqStmt(tuple(out))

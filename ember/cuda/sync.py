"""Barriers: `__syncthreads()` where a shared buffer written by some threads is read by others.

A lowered GPU kernel is straight-line code that every thread of a block runs (its thread-bound
loops are indices, not loops), so a shared buffer's hazards are between statements of one
sequence, and between iterations of a serial loop:

- in a sequence, a statement that reads a shared buffer written since the last barrier (a
  read after write), or writes one read since then (a write after read), gets a barrier before it;
- a serial loop (or a `while` loop) whose body reads and writes a shared buffer gets a barrier at
  the end of its body, so the next iteration's writes wait for this one's reads (the k loop of a
  tiled GEMM loads the next tiles over the ones just read); inside a software-pipelined loop, the
  buffers it names STAGED are left to the barrier ember.cuda.pipeline put in it (each iteration
  copies into another stage than the one it reads), the others analysed as everywhere.

An access at the thread's own index (`X[tx]`, where tx is bound to the block's only thread
dimension: a thread's partial of a cross-thread reduction; or `X[tx + a * c]`, c a multiple of the
block's T threads and `a` free of tx: the elements whose index is tx modulo T, a thread's row of
state laid out across the threads) is private: two private accesses never race, a private one and
another do. Otherwise the pass is conservative: a barrier is placed
wherever a hazard may cross threads (which thread touches which element is not analysed). It is
TVM's storage-sync pass restricted to shared memory, and it assumes a barrier's statement is
reached by every thread of the block (a bound loop shorter than the block's dimension guards its
body: keep barriers out of such loops).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..tir.expr import Binary, Buffer, BufferLoad, Call, Const, PrimExpr, Var
from ..tir.functor import stmt_exprs, visit_expr, visit_stmt
from ..tir.stmt import (
    SYNC,
    THREAD_BINDING,
    Allocate,
    BufferStore,
    CallRoutine,
    Evaluate,
    For,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
    While,
)
from .launch_shape import launch_dims
from .pipeline import STAGED

BARRIER = Evaluate(Call(SYNC, (), "int32"))


@dataclass
class _Touches:
    """The shared buffers a statement reads and writes, at the thread's own index or not."""

    reads: set[Buffer] = field(default_factory=set)
    writes: set[Buffer] = field(default_factory=set)
    private_reads: set[Buffer] = field(default_factory=set)
    private_writes: set[Buffer] = field(default_factory=set)

    def races(self, later: _Touches) -> bool:
        """Whether `later`, run after self with no barrier between, may race with it."""
        return bool(later.reads & (self.writes | self.private_writes) or later.private_reads & self.writes
                    or later.writes & (self.reads | self.private_reads) or later.private_writes & self.reads)

    def add(self, other: _Touches) -> None:
        self.reads |= other.reads
        self.writes |= other.writes
        self.private_reads |= other.private_reads
        self.private_writes |= other.private_writes


def insert_syncs(func: PrimFunc) -> PrimFunc:
    """func with a barrier at each shared-memory hazard (see the module doc)."""
    found: list[Stmt] = []
    visit_stmt(func.body, found.append)
    shared = {s.buffer for s in found if isinstance(s, Allocate) and s.buffer.scope == "shared"}
    if not shared:
        return func
    threads = [tag for tag, n in launch_dims(func).items() if tag.startswith("threadIdx") and n > 1]
    own = {s.loop_var for s in found if isinstance(s, For) and len(threads) == 1 and s.thread_tag == threads[0]}
    body = _sync(func.body, shared, Own(own, launch_dims(func)[threads[0]] if own else 1))
    return func if body is func.body else PrimFunc(func.name, func.params, body, func.attrs)


@dataclass(frozen=True)
class Own:
    """The loop variables of the block's one thread dimension, and its thread count."""

    vars: set[Var]
    threads: int

    def owns(self, index: PrimExpr) -> bool:
        """Whether the element at index is the thread's own: tx, or tx + a * c (c a multiple of
        the thread count, a free of tx), whose elements are those equal to tx modulo the count."""
        if isinstance(index, Var):
            return index in self.vars
        if not (isinstance(index, Binary) and index.op == "+"):
            return False
        for tx, rest in ((index.a, index.b), (index.b, index.a)):
            if isinstance(tx, Var) and tx in self.vars and isinstance(rest, Binary) and rest.op == "*" and \
                    isinstance(rest.b, Const) and rest.b.value % self.threads == 0 and not self._uses(rest.a):
                return True
        return False

    def _uses(self, e: PrimExpr) -> bool:
        found: list = []
        visit_expr(e, lambda x: found.append(x) if isinstance(x, Var) and x in self.vars else None)
        return bool(found)


def _touches(s: Stmt, shared: set[Buffer], own: Own) -> _Touches:
    t = _Touches()

    def private(index) -> bool:
        return len(index) == 1 and own.owns(index[0])

    def on_expr(e):
        if isinstance(e, BufferLoad) and e.buffer in shared:
            (t.private_reads if private(e.indices) else t.reads).add(e.buffer)

    def on_stmt(x):
        if isinstance(x, CallRoutine):  # a tensorized call: every thread of its warp reads the whole tile
            t.reads.update(p.buffer for p in x.reads if p.buffer in shared)
            t.writes.update(p.buffer for p in x.writes if p.buffer in shared)
        if isinstance(x, BufferStore) and x.buffer in shared:
            (t.private_writes if private(x.indices) else t.writes).add(x.buffer)
        for e in stmt_exprs(x):
            visit_expr(e, on_expr)

    visit_stmt(s, on_stmt)
    return t


def _sync(s: Stmt, shared: set[Buffer], own: Own) -> Stmt:
    match s:
        case SeqStmt(stmts):
            return _sync_seq([_sync(x, shared, own) for x in stmts], shared, own)
        case For() if s.kind == THREAD_BINDING:
            return s.with_body(_sync(s.body, shared, own))
        case For() | While():
            staged = s.annotation(STAGED) if isinstance(s, For) else None
            if staged:  # a pipelined loop synchronizes its stages itself (ember.cuda.pipeline)
                shared = {b for b in shared if b.name not in staged}
            body = _sync(s.body, shared, own)
            t = _touches(body, shared, own)
            if t.races(t):  # this iteration's accesses against the next one's
                body = SeqStmt((*body.stmts, BARRIER) if isinstance(body, SeqStmt) else (body, BARRIER))
            return s if body is s.body else replace(s, body=body)
        case Allocate(_, body):
            new = _sync(body, shared, own)
            return s if new is body else replace(s, body=new)
        case IfThenElse(_, then_case, else_case):
            return replace(s, then_case=_sync(then_case, shared, own),
                           else_case=None if else_case is None else _sync(else_case, shared, own))
    return s


def _sync_seq(stmts: list[Stmt], shared: set[Buffer], own: Own) -> Stmt:
    out: list[Stmt] = []
    since = _Touches()  # what ran since the last barrier
    for x in stmts:
        if isinstance(x, Evaluate) and isinstance(x.value, Call) and x.value.name == SYNC:  # one already
            out.append(x)
            since = _Touches()
            continue
        t = _touches(x, shared, own)
        if since.races(t):
            out.append(BARRIER)
            since = _Touches()
        out.append(x)
        since.add(t)
    return SeqStmt(tuple(out))

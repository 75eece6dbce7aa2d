"""A program's local buffers allocated around the statements that use them, not around the whole
program, so that shared blocks whose uses do not overlap share memory: ember.cuda.tile carves a
block's shared memory as a stack, each buffer freed at the end of its allocation. A matmul's
accumulator, stored from its fragments after the K loop, takes the memory of the loop's operand
tiles (at 128x128x32 in three stages: 64 KiB where the two were 120 KiB, one block an SM).

Each buffer spans the program's statements from the first that touches it to the last (a span
that crosses another's is widened to hold it, so that the allocations nest). Where the memory of
shared blocks is given up and a later statement allocates more, a barrier separates them: warps
may still read the old blocks when the first writes the new one at the same addresses, which
the sync pass (ember.cuda.sync) cannot see.
"""

from __future__ import annotations

from ....tir.expr import Buffer, BufferLoad, Call, as_int
from ....tir.functor import stmt_exprs, visit_expr, visit_stmt
from ....tir.stmt import SYNC, Allocate, BufferStore, CallRoutine, Evaluate, Stmt, seq
from .rewrite import flat


def _touched(s: Stmt) -> set[Buffer]:
    found: set[Buffer] = set()

    def on_stmt(x):
        if isinstance(x, BufferStore):
            found.add(x.buffer)
        if isinstance(x, CallRoutine):
            found.update(p.buffer for p in x.reads + x.writes)
        for e in stmt_exprs(x):
            visit_expr(e, lambda y: found.add(y.buffer) if isinstance(y, BufferLoad) else None)

    visit_stmt(s, on_stmt)
    return found


def _block(b: Buffer) -> bool:
    """Whether b may be a shared block: scratch of the threads' (not a scalar, a thread's own
    registers or fragments)."""
    return b.scope in ("global", "shared") and as_int(b.shape[0]) != 1


def allocated_where_used(body: Stmt, buffers: list[Buffer]) -> Stmt:
    """body with each of `buffers` allocated around the statements that touch it (the module
    doc); a buffer nothing touches around the whole body."""
    stmts = flat(body)
    touched = [_touched(s) for s in stmts]
    spans = {}
    for b in buffers:
        at = [i for i, t in enumerate(touched) if b in t]
        spans[b] = (at[0], at[-1]) if at else (0, len(stmts) - 1)
    crossing = True
    while crossing:
        crossing = False
        for b in buffers:
            for c in buffers:
                (lo, hi), (clo, chi) = spans[b], spans[c]
                if lo < clo <= hi < chi:
                    spans[b], crossing = (lo, chi), True
    return _nested(stmts, 0, len(stmts) - 1, buffers, spans)


def _nested(stmts: list[Stmt], lo: int, hi: int, buffers: list[Buffer], spans: dict) -> Stmt:
    """stmts[lo..hi] with `buffers` (spans inside it) allocated around their spans."""
    out: list[Stmt] = []
    freed = False  # (shared blocks were given up before this statement)
    i = lo
    while i <= hi:
        here = [b for b in buffers if spans[b][0] == i]
        if not here:
            out.append(stmts[i])
            i += 1
            continue
        end = max(spans[b][1] for b in here)
        outer = [b for b in here if spans[b][1] == end]
        inner = [b for b in buffers if b not in outer and i <= spans[b][0] and spans[b][1] <= end]
        s = _nested(stmts, i, end, inner, spans)
        for b in reversed(outer):
            s = Allocate(b, s)
        if freed and any(_block(b) for b in outer):
            out.append(Evaluate(Call(SYNC, (), "int32")))
        freed = freed or any(_block(b) for b in outer + inner)
        out.append(s)
        i = end + 1
    return seq(*out)

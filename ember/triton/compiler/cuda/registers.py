"""Blocks in registers: a scratch block each thread touches only at its own elements is held by
each thread, its elements j = 0, 1, ... in a local array, not in shared memory.

A block that only statements spreading its shape the same way touch (the SPREAD marks of
threads.py), each thread at its own elements alone (a load read in for an elementwise consumer,
vector add's operands, a softmax row read by the max's partials, its exponentials by the sum's
and the division), goes from global memory to registers and back with no shared block and no
barrier, as Triton's blocked layouts keep it. Any other block a statement's threads write stays
shared.
"""

from __future__ import annotations

from dataclasses import replace

from ....tir.expr import Buffer, BufferLoad, const
from ....tir.functor import collect, mutate_stmt, touches
from ....tir.region import accesses
from ....tir.stmt import BufferStore, CallRoutine, For, Stmt
from ....tir.structural import structural_key
from .rewrite import replaced, touched_besides
from .threads import SPREAD, ThreadEmitter


class ThreadOwnBlocks(ThreadEmitter):
    """The rewrite of the kernel's body that keeps blocks in registers (the module doc)."""

    def _thread_own(self, body: Stmt) -> Stmt:
        """body with each scratch block that only statements spreading the same shape the same way
        touch, each thread only at its own elements, held by each thread as its own elements
        (registers) rather than in shared memory: a load read in, an elementwise intermediate
        (vector add's operands, a softmax row's exponentials read back by the division)."""
        spreads = collect(body, lambda x: isinstance(x, For) and x.annotation(SPREAD) is not None)
        for buf in [b for b in self.allocs if b.scope == "global"]:
            users = [x for x in spreads if touches(x, buf)]
            if not users or {self._spreads[x.annotation(SPREAD)][0] for x in users} != {
                    self._spreads[users[0].annotation(SPREAD)][0]}:
                continue
            if touched_besides(body, users, buf) or not all(
                    self._own_elements(x, buf) for x in users):
                continue
            mine = Buffer(buf.name, (const(self._spreads[users[0].annotation(SPREAD)][3]),), buf.dtype, scope="local")
            moved = {x: self._moved(x, buf, mine) for x in users}
            body = replaced(body, moved)
            spreads = [moved.get(x, x) for x in spreads]
            self.allocs[self.allocs.index(buf)] = mine
        return mutate_stmt(body, f_stmt=lambda x: replace(x, annotations=tuple(
            p for p in x.annotations if p[0] != SPREAD)) if isinstance(x, For) and x.annotation(SPREAD) is not None
            else None)

    def _own_elements(self, spread: For, buf: Buffer) -> bool:
        """Whether every access of spread to buf is at the statement's own element."""
        _, flat, _, _ = self._spreads[spread.annotation(SPREAD)]
        key = structural_key(flat)
        if collect(spread, lambda x: isinstance(x, CallRoutine) and any(p.buffer is buf for p in x.reads + x.writes)):
            return False  # (a tensorized call reads or writes a whole tile)
        return all(len(i) == 1 and structural_key(i[0]) == key for i in accesses(spread, buf))

    def _moved(self, spread: For, buf: Buffer, mine: Buffer) -> Stmt:
        """spread with its accesses to buf made to the thread's own element j of mine."""
        _, _, j, _ = self._spreads[spread.annotation(SPREAD)]

        def on_expr(e):
            return BufferLoad(mine, (j,), e.dtype) if isinstance(e, BufferLoad) and e.buffer is buf else None

        def on_stmt(x):
            return BufferStore(mine, x.value, (j,)) if isinstance(x, BufferStore) and x.buffer is buf else None

        return mutate_stmt(spread, f_stmt=on_stmt, f_expr=on_expr)

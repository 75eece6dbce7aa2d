"""`num_stages`: a loop's copies of a dot's operand tiles issued `num_stages - 1` iterations ahead,
asynchronously (software pipelining with cp.async, as Triton's), rewritten once the kernel is
emitted.

    acc = tl.zeros(...)                    a_ptrs' = a_ptrs  (the copies' own state)
    for k in range(n):                     for s in 0 .. S-2: if s < n: copy(s) into stage s, async
        a = tl.load(a_ptrs ...)                               commit; a_ptrs' += BK
        b = tl.load(b_ptrs ...)    ->      for k in range(n):
        acc = tl.dot(a, b, acc)                wait until iteration k's copies landed
        a_ptrs += BK ...                       if k + S-1 < n: copy(k + S-1) into stage (k + S-1) % S, async
                                               commit; a_ptrs' += BK
                                               acc = tl.dot(stage k % S), a_ptrs += BK

The copies are the reads that copies.py makes 16 bytes a thread at a time (those become cp.async
on sm_80 and later, ember.cuda.vector_render; a vector that a mask or its offset keeps element by
element is stored as it is), of tiles that only the loop's Tensor Core calls read, after the copy.
What the copies read that the loop changes (the pointers' offsets: `a_ptrs += BK * stride`) must
be kernel scalars that plain statements of the loop compute from each other: those statements run
a second time on copies of the scalars, S-1 iterations ahead (the copies' own state), and the loop
keeps its own. A loop that is not so shaped is left as it is, as is one that stores to a tensor or
calls an atomic (a copy issued ahead would miss its stores). The loop's one barrier for its stages
comes after the wait, as in ember.cuda.pipeline: past it every thread's copies of this iteration
have landed and every thread has finished the dots of the last one, whose stage the copies issued
next overwrite; the loop is annotated STAGED with the stages' names, which ember.cuda.sync then
leaves to it. The interpreter lands a thread's copies at its wait (ember.cuda.simt), so a tile
read early reads stale values.
"""

from __future__ import annotations

from dataclasses import replace

from ....cuda.pipeline import COMMIT, STAGED, WAIT, asynchronous, at_iteration, on_stage
from ....tir.arith import Analyzer
from ....tir.expr import Buffer, BufferLoad, Call, as_int, binary, const
from ....tir.functor import collect, mutate_stmt, stmt_exprs, touches, visit_expr, visit_stmt
from ....tir.stmt import SYNC, BufferStore, CallRoutine, Evaluate, For, IfThenElse, Stmt, seq
from .ldmatrix import SyncDots
from .rewrite import flat, touched_besides


def _reads(s: Stmt) -> set[Buffer]:
    """The buffers whose elements s loads (not a tensorized call's pointers)."""
    found: set[Buffer] = set()
    visit_stmt(s, lambda x: [visit_expr(e, lambda y: found.add(y.buffer) if isinstance(y, BufferLoad) else None)
                             for e in stmt_exprs(x)])
    return found


def _writes(s: Stmt) -> list[Buffer]:
    """The buffers s writes, in the order it writes them (a kernel's C follows the kernel alone)."""
    return list(dict.fromkeys([x.buffer for x in collect(s, lambda x: isinstance(x, BufferStore))] + [
        p.buffer for x in collect(s, lambda x: isinstance(x, CallRoutine)) for p in x.writes]))


class Stages(SyncDots):
    """The rewrite of the kernel's body that pipelines the copies of dots' operands (the module
    doc)."""

    def __init__(self, debug: bool, num_warps: int, num_stages: int):
        super().__init__(debug, num_warps)
        self.stages = num_stages

    def _pipelined(self, body: Stmt) -> Stmt:
        """body with each serial loop whose dots' operands are copied 16 bytes at a time pipelined
        over `num_stages` stages (the module doc); nothing with fewer than 2."""
        if self.stages < 2 or not self._copied:
            return body
        return mutate_stmt(body, f_stmt=lambda x: self._staged_loop(body, x)
                           if isinstance(x, For) and x.kind == "serial" else None)

    def _staged_loop(self, body: Stmt, loop: For) -> Stmt | None:
        if self._writes_memory(loop.body):
            return None  # (a copy issued ahead would read what an earlier iteration had not yet stored)
        stmts = flat(loop.body)
        copied = {id(s): b for b, s in self._copied.items()}
        tiles: dict[int, Buffer] = {}  # the copies pipelined: their place in the loop, their tile
        for i, s in enumerate(stmts):
            b = copied.get(id(s))
            readers = [j for j, y in enumerate(stmts) if j != i and touches(y, b)] if b is not None else []
            if readers and min(readers) > i and self._read_by_dots_alone(body, b) and not touched_besides(
                    body, (s, *(stmts[j] for j in readers)), b):
                tiles[i] = b
        state = self._copies_state(stmts, tiles) if tiles else None
        if state is None:
            return None
        own: dict[Buffer, Buffer] = {}
        for w in (w for j in sorted(state) for w in _writes(stmts[j])):
            own.setdefault(w, Buffer(self.name(f"{w.name}_ahead"), w.shape, w.dtype, scope=w.scope))
        self.allocs += own.values()

        def ahead(s: Stmt) -> Stmt:  # (s on the copies' own state)
            return mutate_stmt(s, f_stmt=lambda x: BufferStore(own[x.buffer], x.value, x.indices)
                               if isinstance(x, BufferStore) and x.buffer in own else None,
                               f_expr=lambda e: BufferLoad(own[e.buffer], e.indices, e.dtype)
                               if isinstance(e, BufferLoad) and e.buffer in own else None)

        n = self.stages
        v, ana = loop.loop_var, Analyzer()
        end = ana.simplify(binary("+", loop.min, loop.extent))
        ana.bind_range(v, loop.min, loop.extent)
        stages = {b: Buffer(b.name, (const(n * as_int(b.shape[0])),), b.dtype, scope=b.scope) for b in tiles.values()}
        early = [(i in tiles, ahead(stmts[i])) for i in sorted({*tiles, *state})]  # (in the loop's order)
        commit = Evaluate(Call(COMMIT, (), "int32"))

        def issue(k) -> list[Stmt]:
            """Iteration k's copies into their stage, and its steps of the copies' state, when
            there is an iteration k; the group committed."""
            stage = ana.simplify(binary("%", binary("-", k, loop.min), const(n, k.dtype)))
            now = seq(*(asynchronous(on_stage(s, stages, stage, ana)) if copy else s
                        for copy, s in ((c, at_iteration(s, v, k)) for c, s in early)))
            cond = binary("<", k, end)
            return [now if ana.can_prove(cond) else IfThenElse(cond, now), commit]

        carried, written = [], set()  # (the state the copies' statements read before they write it)
        for _, s in early:
            carried += [b for b, w in own.items() if w in _reads(s) and w not in written and b not in carried]
            written.update(_writes(s))
        first = [BufferStore(own[b], BufferLoad(b, (const(0),), b.dtype), (const(0),)) for b in carried]
        for s in range(n - 1):
            first += issue(ana.simplify(binary("+", loop.min, const(s, v.dtype))))
        now = ana.simplify(binary("%", binary("-", v, loop.min), const(n, v.dtype)))
        rest = [on_stage(s, stages, now, ana) for i, s in enumerate(stmts) if i not in tiles]
        wait = Evaluate(Call(WAIT, (const(n - 2, "int32"),), "int32"))
        barrier = Evaluate(Call(SYNC, (), "int32"))
        for b, s in stages.items():
            self.allocs[self.allocs.index(b)] = s
        body = seq(wait, barrier, *issue(binary("+", v, const(n - 1, v.dtype))), *rest)
        staged = tuple(b.name for b in stages.values())  # (their barrier is the loop's own: ember.cuda.sync)
        return seq(*first, replace(loop, body=body, annotations=(*loop.annotations, (STAGED, staged))))

    def _writes_memory(self, s: Stmt) -> bool:
        """Whether s stores to a tensor or calls an atomic."""
        found = [x for x in _writes(s) if x in self.tensors]
        visit_stmt(s, lambda x: [visit_expr(e, lambda y: found.append(y) if isinstance(y, Call) and y.name.startswith(
            "atomic_") else None) for e in stmt_exprs(x)])
        return bool(found)

    def _copies_state(self, stmts: list[Stmt], tiles: dict[int, Buffer]) -> set[int] | None:
        """The places of the loop's statements that compute what the copies read of what the loop
        changes (their state), each a kernel scalar's plain store; None where another kind of
        statement computes some of it."""
        changed = {b for s in stmts for b in _writes(s)}
        need = set().union(*(_reads(stmts[i]) for i in tiles)) & changed
        state: set[int] = set()
        while True:
            more = [j for j, s in enumerate(stmts) if j not in state and need.intersection(_writes(s))]
            if not more:
                return state
            for j in more:
                s = stmts[j]
                if j in tiles or not (isinstance(s, BufferStore) and s.buffer in self.allocs):
                    return None
                state.add(j)
                need |= _reads(s) & changed

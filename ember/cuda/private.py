"""A thread's own part of a block's local buffer: the row a thread keeps in registers.

A schedule that keeps a row in registers across the phases of a block (the row kernels:
ember.cuda.schedules.row_block with scope "local") copies it into a "local" buffer computed at
the block's row, its elements spread over the threads V at a time (element e is thread
(e // V) % T's, of T threads), and each phase reads it at the same elements. Every thread then
holds a copy of the whole row of which it touches 1/T: held so, the row would live in local
memory, T times over. Here each such buffer (scope "local", allocated outside every
thread-bound loop, every access inside a loop bound to threadIdx.x, the block's only thread
dimension, at an element provably the thread's own) is shrunk to the thread's part: element e
at (e // (T*V)) * V + e % V, a few registers where the loops around the accesses are unrolled
(their indices constants). A buffer some access of which is not provably the thread's stays as
the loop IR has it, a whole copy a thread (row_block refuses a row whose phases read other
threads' columns: they would read what their copy never got).
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..tir.arith import Analyzer
from ..tir.expr import Buffer, BufferLoad, PrimExpr, Ramp, as_int, binary, const
from ..tir.functor import mutate_stmt, stmt_children, stmt_exprs, visit_expr
from ..tir.stmt import THREAD_BINDING, Allocate, BufferStore, For, PrimFunc, Stmt
from .codegen import launch_dims

LANES = (4, 2, 1)  # the vector widths tried, widest first


def privatize(func: PrimFunc) -> PrimFunc:
    """func with each thread-partitioned local buffer shrunk to the thread's part (module doc)."""
    dims = launch_dims(func)
    threads = dims.get("threadIdx.x", 1)
    if threads == 1 or any(tag in dims for tag in ("threadIdx.y", "threadIdx.z")):
        return func
    body = mutate_stmt(func.body, f_stmt=lambda s: _shrunk(s, threads) if isinstance(s, Allocate) else None)
    return func if body is func.body else PrimFunc(func.name, func.params, body, func.attrs)


def _shrunk(alloc: Allocate, threads: int) -> Allocate | None:
    """alloc with its buffer shrunk to the thread's part, or None where an access is not provably
    the thread's own for any width of LANES."""
    buf = alloc.buffer
    extents = [as_int(d) for d in buf.shape]  # (flattened: one index an access)
    if buf.scope != "local" or None in extents:
        return None
    size = math.prod(extents)
    accesses = _accesses(alloc.body, buf)
    if not accesses:
        return None
    analyzers = [_analyzer(tx, loops, threads) for _, tx, loops in accesses]
    for lanes in LANES:
        if all(_owned(index, ana, tx, threads, lanes) for (index, tx, _), ana in zip(accesses, analyzers)):
            break
    else:
        return None
    part = -(-size // (threads * lanes)) * lanes
    if part >= size:
        return None
    new = replace(buf, shape=(const(part, "int32"),))
    span = threads * lanes

    def part_index(index: PrimExpr) -> PrimExpr:
        if isinstance(index, Ramp):  # (a vector inside one thread's `lanes` consecutive elements: _owned)
            return Ramp(part_index(index.base), index.stride, index.lanes, index.dtype)
        return binary("+", binary("*", binary("//", index, const(span, index.dtype)), const(lanes, index.dtype)),
                      binary("%", index, const(lanes, index.dtype)))

    simplified = {id(index): ana.simplify(part_index(index)) for (index, _, _), ana in zip(accesses, analyzers)}

    def moved(index: PrimExpr) -> PrimExpr:
        found = simplified.get(id(index))
        return part_index(index) if found is None else found

    def on_expr(e):
        if isinstance(e, BufferLoad) and e.buffer is buf:
            return BufferLoad(new, (moved(e.indices[0]),), e.dtype)
        return None

    def on_stmt(x):
        if isinstance(x, BufferStore) and x.buffer is buf:
            return BufferStore(new, x.value, (moved(x.indices[0]),))
        return None

    return Allocate(new, mutate_stmt(alloc.body, f_stmt=on_stmt, f_expr=on_expr))


def _accesses(root: Stmt, buf: Buffer) -> list[tuple[PrimExpr, object, list[For]]]:
    """Each access of buf under root: (its index, the threadIdx.x variable around it, the loops
    around it); an empty list where one is outside a threadIdx.x loop, or not 1-D."""
    found: list = []
    ok = [True]

    def walk(s: Stmt, loops: list[For], tx):
        if isinstance(s, For):
            if s.kind == THREAD_BINDING and s.thread_tag == "threadIdx.x":
                tx = s.loop_var
            loops = [*loops, s]
        if isinstance(s, BufferStore) and s.buffer is buf:
            record(s.indices, loops, tx)
        for e in stmt_exprs(s):
            visit_expr(e, lambda n: record(n.indices, loops, tx) if isinstance(n, BufferLoad) and n.buffer is buf
                       else None)
        for c in stmt_children(s):
            walk(c, loops, tx)

    def record(indices, loops, tx):
        if tx is None or len(indices) != 1:
            ok[0] = False
        else:
            found.append((indices[0], tx, loops))

    walk(root, [], None)
    return found if ok[0] else []


def _analyzer(tx, loops: list[For], threads: int) -> Analyzer:
    """What is known at an access: the ranges of the loops around it, of its thread's index."""
    ana = Analyzer()
    for loop in loops:
        if loop.kind != THREAD_BINDING or loop.loop_var is tx:
            ana.bind_range(loop.loop_var, loop.min, loop.extent)
    ana.bind(tx, 0, threads - 1)
    return ana


def _owned(index: PrimExpr, ana: Analyzer, tx, threads: int, lanes: int) -> bool:
    """Whether element `index` is thread tx's: (index // lanes) % threads == tx; a vector index
    (base, base + 1, ...) where its elements are consecutive ones of the thread's."""
    if isinstance(index, Ramp):
        if as_int(index.stride) != 1 or index.lanes > lanes:
            return False
        base = index.base
        within = binary("<=", binary("%", base, const(lanes, base.dtype)), const(lanes - index.lanes, base.dtype))
        return ana.can_prove(within) and _owned(base, ana, tx, threads, lanes)
    lane_group = binary("%", binary("//", index, const(lanes, index.dtype)), const(threads, index.dtype))
    return ana.can_prove_equal(lane_group, tx) and ana.can_prove(binary(">=", index, const(0, index.dtype)))

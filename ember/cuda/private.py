"""A thread's own part of a block's local buffer: the row a thread keeps in registers.

A schedule that keeps a row in registers across the phases of a block (the row kernels:
ember.cuda.schedules.row_block with scope "local") copies it into a "local" buffer computed at
the block's row, its elements spread over the threads V at a time (element e is thread
(e // V) % T's, of T threads), and each phase reads it at the same elements. Every thread then
holds a copy of the whole row of which it touches 1/T: held so, the row would live in local
memory, T times over. Here each such buffer (scope "local", allocated outside every
thread-bound loop, every access inside a loop bound to threadIdx.x at an element provably the
thread's own) is shrunk to the thread's part: element e at (e // (T*V)) * V + e % V, a few
registers where the loops around the accesses are unrolled (their indices constants). With
several rows a block, one on each threadIdx.y, row r of the buffer must be threadIdx.y r's, and
the same holds of each row's columns. A buffer some access of which is not provably the thread's stays as
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
from .launch_shape import launch_dims

LANES = (4, 2, 1)  # the vector widths tried, widest first


def privatize(func: PrimFunc) -> PrimFunc:
    """func with each thread-partitioned local buffer shrunk to the thread's part (module doc)."""
    dims = launch_dims(func)
    threads, rows = dims.get("threadIdx.x", 1), dims.get("threadIdx.y", 1)
    if threads == 1 or "threadIdx.z" in dims:
        return func
    body = mutate_stmt(func.body, f_stmt=lambda s: _shrunk(s, threads, rows) if isinstance(s, Allocate) else None)
    return func if body is func.body else PrimFunc(func.name, func.params, body, func.attrs)


def _shrunk(alloc: Allocate, threads: int, rows: int) -> Allocate | None:
    """alloc with its buffer shrunk to the thread's part, or None where an access is not provably
    the thread's own for any width of LANES. With `rows` threads along threadIdx.y (several rows a
    block), its rows are theirs: row r of the buffer (its last dimension's length apart) is
    threadIdx.y r's."""
    buf = alloc.buffer
    extents = [as_int(d) for d in buf.shape]  # (flattened: one index an access)
    if buf.scope != "local" or None in extents:
        return None
    size = math.prod(extents)
    row = extents[-1] if rows > 1 else size
    accesses = _accesses(alloc.body, buf, rows > 1)
    if not accesses:
        return None
    analyzers = [_analyzer(tx, ty, loops, threads, rows) for _, tx, ty, loops in accesses]
    for lanes in LANES:
        if all(_owned(index, ana, tx, ty, threads, lanes, row)
               for (index, tx, ty, _), ana in zip(accesses, analyzers)):
            break
    else:
        return None
    part = -(-row // (threads * lanes)) * lanes
    if part >= size:
        return None
    new = replace(buf, shape=(const(part, "int32"),))
    span = threads * lanes

    def part_index(index: PrimExpr) -> PrimExpr:
        if isinstance(index, Ramp):  # (a vector inside one thread's `lanes` consecutive elements: _owned)
            return Ramp(part_index(index.base), index.stride, index.lanes, index.dtype)
        column = binary("%", index, const(row, index.dtype))
        return binary("+", binary("*", binary("//", column, const(span, index.dtype)), const(lanes, index.dtype)),
                      binary("%", column, const(lanes, index.dtype)))

    simplified = {id(index): ana.simplify(part_index(index)) for (index, *_), ana in zip(accesses, analyzers)}

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


def _accesses(root: Stmt, buf: Buffer, rows: bool) -> list[tuple[PrimExpr, object, object, list[For]]]:
    """Each access of buf under root: (its index, the threadIdx.x and threadIdx.y variables around
    it (None: none), the loops around it); an empty list where one is outside a threadIdx.x loop
    (or, with `rows`, a threadIdx.y loop), or not 1-D."""
    found: list = []
    ok = [True]

    def walk(s: Stmt, loops: list[For], tx, ty):
        if isinstance(s, For):
            if s.kind == THREAD_BINDING and s.thread_tag == "threadIdx.x":
                tx = s.loop_var
            if s.kind == THREAD_BINDING and s.thread_tag == "threadIdx.y":
                ty = s.loop_var
            loops = [*loops, s]
        if isinstance(s, BufferStore) and s.buffer is buf:
            record(s.indices, loops, tx, ty)
        for e in stmt_exprs(s):
            visit_expr(e, lambda n: record(n.indices, loops, tx, ty) if isinstance(n, BufferLoad) and n.buffer is buf
                       else None)
        for c in stmt_children(s):
            walk(c, loops, tx, ty)

    def record(indices, loops, tx, ty):
        if tx is None or (rows and ty is None) or len(indices) != 1:
            ok[0] = False
        else:
            found.append((indices[0], tx, ty, loops))

    walk(root, [], None, None)
    return found if ok[0] else []


def _analyzer(tx, ty, loops: list[For], threads: int, rows: int) -> Analyzer:
    """What is known at an access: the ranges of the loops around it, of its thread's indices."""
    ana = Analyzer()
    for loop in loops:
        if loop.kind != THREAD_BINDING or loop.loop_var is tx or loop.loop_var is ty:
            ana.bind_range(loop.loop_var, loop.min, loop.extent)
    ana.bind(tx, 0, threads - 1)
    if ty is not None:
        ana.bind(ty, 0, rows - 1)
    return ana


def _owned(index: PrimExpr, ana: Analyzer, tx, ty, threads: int, lanes: int, row: int) -> bool:
    """Whether element `index` is thread (tx, ty)'s: its column (index % row) has
    (column // lanes) % threads == tx, and its row (index // row) is ty where there is one; a
    vector index (base, base + 1, ...) where its elements are consecutive ones of the thread's."""
    if isinstance(index, Ramp):
        if as_int(index.stride) != 1 or index.lanes > lanes or row % lanes:
            return False
        base = index.base
        within = binary("<=", binary("%", base, const(lanes, base.dtype)), const(lanes - index.lanes, base.dtype))
        return ana.can_prove(within) and _owned(base, ana, tx, ty, threads, lanes, row)
    column = binary("%", index, const(row, index.dtype))
    lane_group = binary("%", binary("//", column, const(lanes, index.dtype)), const(threads, index.dtype))
    return (ana.can_prove_equal(lane_group, tx) and ana.can_prove(binary(">=", index, const(0, index.dtype)))
            and (ty is None or ana.can_prove_equal(binary("//", index, const(row, index.dtype)), ty)))

"""Software pipelining of shared-memory stages: a serial loop annotated
"pragma_software_pipeline" = S >= 2 (`s[CL].pragma(ko, "software_pipeline", 3)`,
`sch.annotate(loop, "pragma_software_pipeline", 3)`) whose body first copies tiles into shared
buffers, then computes from them (a GEMM's K loop), gets the tiles of its next S - 1 iterations
in flight while it computes from this one's (S stages of each buffer):

    for k in range(n):                  X3 = alloc S stages of X (shared)
        X = alloc (shared)              copy(s) into stage s, async; commit   (each s < S - 1)
        copy(k) into X          ->      for k in range(n):
        compute(k) from X                   wait until at most S - 2 groups are in flight
                                            __syncthreads()
                                            if k + S - 1 < n: copy(k + S - 1) into stage (k + S - 1) % S, async
                                            commit
                                            compute(k) from stage k % S

The copies' loops are marked asynchronous ("async_copy"): on sm_80 and later a
16-byte copy from global to shared memory is one `cp.async` (ember.cuda.vector_render), which the
thread does not wait for, so the loads of the next tiles overlap the products of this one; a
`cp.async.commit_group` closes each iteration's copies (an empty group where there are none, so
that every iteration counts one) and `cp.async.wait_group S-2` waits for all but the newest S - 2,
i.e. for this iteration's tiles. Other copies, and every copy below sm_80, are plain ones, which
are complete when issued. The loop's one barrier comes after the wait: past it, every thread's
copies of this iteration's tiles have landed, and every thread has finished the products of the
last iteration, whose stage the copies issued next overwrite. The loop is annotated STAGED with
its buffers' names, which ember.cuda.sync then leaves to it (a barrier per buffer, by stages, is
more than it can see), but for a buffer its products also write, whose barriers stay sync's.
The interpreter (ember.cuda.simt) lands a thread's asynchronous copies at its wait, so a read
before the wait shows as a race or a wrong answer.

The loop's extent may be symbolic (a product's K of a symbolic size, padded to whole tiles): the
copies before it are then guarded by there being those iterations, as those in it are.

The copies are the statements at the start of the body that write the shared buffers
allocated at its top and read none of them; a loop that is not so shaped is a LowerError
naming it.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import LowerError
from ..tir.arith import Analyzer
from ..tir.expr import Buffer, BufferLoad, Call, Const, PrimExpr, as_int, binary
from ..tir.functor import collect, mutate_stmt, stmt_exprs, visit_expr, visit_stmt
from ..tir.stmt import (
    SYNC,
    Allocate,
    BufferStore,
    CallRoutine,
    Evaluate,
    For,
    IfThenElse,
    Pointer,
    PrimFunc,
    SeqStmt,
    Stmt,
)
from .staged_copies import computed, split

PIPELINE = "pragma_software_pipeline"
ASYNC = "async_copy"  # a vectorized loop of an asynchronous copy
COMMIT = "cuda.cp_async_commit"  # Evaluate(Call(COMMIT)): close the thread's group of copies
WAIT = "cuda.cp_async_wait"  # Evaluate(Call(WAIT, (n,))): wait until at most n groups are in flight
STAGED = "pipeline_staged"  # a pipelined loop's annotation: the names of the buffers it synchronizes itself


def pipeline(func: PrimFunc) -> PrimFunc:
    """func with every annotated loop given its stages (see the module doc)."""
    def on_stmt(s):
        if isinstance(s, For) and s.annotation(PIPELINE) is not None:
            return _pipelined(s)
        return None

    body = mutate_stmt(func.body, f_stmt=on_stmt)
    return func if body is func.body else PrimFunc(func.name, func.params, body, func.attrs)


def _pipelined(loop: For) -> Stmt:
    name = loop.loop_var.name
    stages = loop.annotation(PIPELINE)
    if not isinstance(stages, int) or stages < 2 or loop.kind != "serial":
        raise LowerError(f"loop {name}: software pipelining takes a serial loop and 2 stages or more, "
                         f"not {stages!r}")
    shared: list[Buffer] = []
    body = loop.body
    while isinstance(body, Allocate) and body.buffer.scope == "shared":
        shared.append(body.buffer)
        body = body.body
    stmts = list(body.stmts) if isinstance(body, SeqStmt) else [body]
    k = 0
    while k < len(stmts) and _writes(stmts[k], shared) and not _reads(stmts[k], shared):
        k += 1
    copies, compute = stmts[:k], stmts[k:]
    if not shared or not copies or not compute:
        raise LowerError(f"loop {name}: software pipelining takes a body that allocates shared buffers, copies "
                         f"tiles into them, then computes from them")
    symbolic = [b.name for b in shared if any(as_int(d) is None for d in b.shape)]
    if symbolic:
        raise LowerError(f"loop {name}: software pipelining stages shared buffers of constant shapes; "
                         f"{', '.join(symbolic)} stayed symbolic")
    staged = {b: Buffer(b.name, (Const(stages * _size(b), "int64"),), b.dtype, "shared") for b in shared}
    v, ana = loop.loop_var, Analyzer()
    end = ana.simplify(binary("+", loop.min, loop.extent))
    ana.bind_range(v, loop.min, loop.extent)

    def at(stmts: list[Stmt], k: PrimExpr, mark: bool) -> Stmt:
        """stmts at iteration k, on stage k % stages of the staged buffers."""
        stage = ana.simplify(binary("%", binary("-", k, loop.min), Const(stages, k.dtype)))
        out = [on_stage(at_iteration(s, v, k) if k is not v else s, staged, stage, ana) for s in stmts]
        return SeqStmt(tuple(asynchronous(s) if mark else s for s in out))

    staged_in_registers = [(c, split(c, f"{name}_{i}") if computed(c) else None) for i, c in enumerate(copies)]
    in_flight = [c for c, parts in staged_in_registers if parts is None]
    registers = [parts for _, parts in staged_in_registers if parts is not None]
    commit = Evaluate(Call(COMMIT, (), "int32"))
    wait = Evaluate(Call(WAIT, (Const(stages - 2, "int32"),), "int32"))
    ahead = binary("+", v, Const(stages - 1, v.dtype))
    barrier = Evaluate(Call(SYNC, (), "int32"))
    synced = tuple(b.name for b in shared if not any(_writes(x, [b]) for x in compute))  # (the others: sync's)
    next_ones = binary("<", ahead, end)
    body = SeqStmt((wait, barrier, *([IfThenElse(next_ones, at(in_flight, ahead, True))] if in_flight else []), commit,
                    *(IfThenElse(next_ones, at([loads], ahead, False)) for _, loads, _ in registers),
                    at(compute, v, False),
                    *(IfThenElse(next_ones, at([saves], ahead, False)) for _, _, saves in registers)))
    for regs, _, _ in registers:
        body = Allocate(regs, body)
    new_loop = replace(loop, body=body,
                       annotations=(*(a for a in loop.annotations if a[0] != PIPELINE),
                                    (STAGED, synced)))
    first: list[Stmt] = []
    for s in range(stages - 1):
        it = ana.simplify(binary("+", loop.min, Const(s, loop.min.dtype)))
        copy = at(copies, it, True)
        if not ana.can_prove(binary(">", loop.extent, Const(s, loop.extent.dtype))):  # (a symbolic extent may be s)
            copy = IfThenElse(binary("<", it, end), copy)
        first += [copy, commit]
    out: Stmt = SeqStmt((*first, new_loop))
    for b in reversed(shared):
        out = Allocate(staged[b], out)
    return out


def at_iteration(s: Stmt, v, k: PrimExpr) -> Stmt:
    """s with the loop variable v replaced by k."""
    return mutate_stmt(s, f_expr=lambda e: k if e is v else None)


def _size(buf: Buffer) -> int:
    n = 1
    for d in buf.shape:
        n *= as_int(d)
    return n


def on_stage(s: Stmt, stages: dict[Buffer, Buffer], stage: PrimExpr, ana: Analyzer) -> Stmt:
    """s with its accesses to each buffer moved to the given stage of its staged one (`stages`;
    the tile Emitter's stages.py stages its loops' operand copies with it too)."""
    def shifted(b: Buffer, index: PrimExpr) -> PrimExpr:
        return ana.simplify(binary("+", index, binary("*", stage, Const(_size(b), stage.dtype))))

    def on_expr(e):
        if isinstance(e, BufferLoad) and e.buffer in stages:
            (i,) = e.indices
            return BufferLoad(stages[e.buffer], (shifted(e.buffer, i),), e.dtype)
        return None

    def on_stmt(x):
        if isinstance(x, BufferStore) and x.buffer in stages:
            (i,) = x.indices
            return BufferStore(stages[x.buffer], x.value, (shifted(x.buffer, i),))
        if isinstance(x, CallRoutine) and any(p.buffer in stages for p in x.reads + x.writes):
            def moved(ps):
                return tuple(Pointer(stages[p.buffer], shifted(p.buffer, p.offset)) if p.buffer in stages else p
                             for p in ps)
            return replace(x, reads=moved(x.reads), writes=moved(x.writes))
        return None

    return mutate_stmt(s, f_stmt=on_stmt, f_expr=on_expr)


def asynchronous(s: Stmt) -> Stmt:
    """s with its loops marked as asynchronous copies (the CUDA renderer makes the vectorized ones
    of 16 bytes cp.async; the interpreter defers every store under them to the wait)."""
    def on_stmt(x):
        if isinstance(x, For):
            return replace(x, annotations=(*x.annotations, (ASYNC, True)))
        return None

    return mutate_stmt(s, f_stmt=on_stmt)


def _writes(s: Stmt, buffers: list[Buffer]) -> bool:
    return bool(collect(s, lambda x: isinstance(x, BufferStore) and x.buffer in buffers))


def _reads(s: Stmt, buffers: list[Buffer]) -> bool:
    found = []

    def on_stmt(x):
        if isinstance(x, CallRoutine):
            found.extend(p for p in x.reads if p.buffer in buffers)
        for e in stmt_exprs(x):
            visit_expr(e, lambda y: found.append(y) if isinstance(y, BufferLoad) and y.buffer in buffers else None)

    visit_stmt(s, on_stmt)
    return bool(found)

"""Software pipelining of shared-memory stages: a serial loop annotated
"pragma_software_pipeline" = 2 (`s[CL].pragma(ko, "software_pipeline", 2)`,
`sch.annotate(loop, "pragma_software_pipeline", 2)`) whose body first copies tiles into shared
buffers, then computes from them (a GEMM's K loop), gets the tiles of its next iteration copied
while it computes from this one's (double buffering):

    for k in range(n):                  X2 = alloc 2 stages of X (shared)
        X = alloc (shared)              copy(0) into stage 0, async; commit
        copy(k) into X          ->      for k in range(n):
        compute(k) from X                   if k + 1 < n: copy(k + 1) into stage (k + 1) % 2, async
                                            commit; wait until all but the newest group landed
                                            compute(k) from stage k % 2

The copies' loops are marked asynchronous ("async_copy"): on sm_80 and later a
16-byte copy from global to shared memory is one `cp.async` (ember.cuda.codegen), which the
thread does not wait for, so the loads of the next tiles overlap the products of this one; a
`cp.async.commit_group` closes each iteration's copies and `cp.async.wait_group 1` waits for all
but the newest, i.e. for this iteration's tiles. Other copies, and every copy below sm_80, are
plain ones, which are complete when issued. The barriers come from ember.cuda.sync as for any
kernel: one after the wait (the tiles are read by other threads than those that copied them),
one at the end of the loop (the next iteration overwrites the stage this one read). The
interpreter (ember.cuda.simt) lands a thread's asynchronous copies at its wait, so a read before
the wait shows as a race or a wrong answer.

The loop's extent may be symbolic (a product's K of a symbolic size, padded to whole tiles): the
copies of the first iteration are then guarded by the loop running at all, and those of the next
one by there being one, as for a constant extent.

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
from ..tir.stmt import Allocate, BufferStore, CallRoutine, Evaluate, For, IfThenElse, Pointer, PrimFunc, SeqStmt, Stmt

PIPELINE = "pragma_software_pipeline"
ASYNC = "async_copy"  # a vectorized loop of an asynchronous copy
COMMIT = "cuda.cp_async_commit"  # Evaluate(Call(COMMIT)): close the thread's group of copies
WAIT = "cuda.cp_async_wait"  # Evaluate(Call(WAIT, (n,))): wait until at most n groups are in flight


def pipeline(func: PrimFunc) -> PrimFunc:
    """func with every annotated loop double-buffered (see the module doc)."""
    def on_stmt(s):
        if isinstance(s, For) and s.annotation(PIPELINE) is not None:
            return _pipelined(s)
        return None

    body = mutate_stmt(func.body, f_stmt=on_stmt)
    return func if body is func.body else PrimFunc(func.name, func.params, body, func.attrs)


def _pipelined(loop: For) -> Stmt:
    name = loop.loop_var.name
    if loop.annotation(PIPELINE) != 2 or loop.kind != "serial":
        raise LowerError(f"loop {name}: software pipelining takes a serial loop and 2 stages, "
                         f"not {loop.annotation(PIPELINE)!r}")
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
        raise LowerError(f"loop {name}: software pipelining doubles shared buffers of constant shapes; "
                         f"{', '.join(symbolic)} stayed symbolic")
    doubled = {b: Buffer(b.name, (Const(2 * _size(b), "int64"),), b.dtype, "shared") for b in shared}
    v, ana = loop.loop_var, Analyzer()
    end = ana.simplify(binary("+", loop.min, loop.extent))
    ana.bind_range(v, loop.min, loop.extent)

    def at(stmts: list[Stmt], k: PrimExpr, mark: bool) -> Stmt:
        """stmts at iteration k, on stage k % 2 of the doubled buffers."""
        stage = ana.simplify(binary("%", binary("-", k, loop.min), Const(2, k.dtype)))
        out = [_staged(_at(s, v, k) if k is not v else s, doubled, stage, ana) for s in stmts]
        return SeqStmt(tuple(_asynchronous(s) if mark else s for s in out))

    commit = Evaluate(Call(COMMIT, (), "int32"))
    wait = Evaluate(Call(WAIT, (Const(1, "int32"),), "int32"))
    following = IfThenElse(binary("<", binary("+", v, Const(1, v.dtype)), end),
                           at(copies, binary("+", v, Const(1, v.dtype)), True))
    new_loop = replace(loop, body=SeqStmt((following, commit, wait, at(compute, v, False))),
                       annotations=tuple(a for a in loop.annotations if a[0] != PIPELINE))
    first = at(copies, loop.min, True)
    if not ana.can_prove(binary(">", loop.extent, Const(0, loop.extent.dtype))):  # (a symbolic extent may be 0)
        first = IfThenElse(binary("<", loop.min, end), first)
    out: Stmt = SeqStmt((first, commit, new_loop))
    for b in reversed(shared):
        out = Allocate(doubled[b], out)
    return out


def _at(s: Stmt, v, k: PrimExpr) -> Stmt:
    """s with the loop variable v replaced by k."""
    return mutate_stmt(s, f_expr=lambda e: k if e is v else None)


def _size(buf: Buffer) -> int:
    n = 1
    for d in buf.shape:
        n *= as_int(d)
    return n


def _staged(s: Stmt, doubled: dict[Buffer, Buffer], stage: PrimExpr, ana: Analyzer) -> Stmt:
    """s with its accesses to each buffer moved to the given stage of its doubled one."""
    def shifted(b: Buffer, index: PrimExpr) -> PrimExpr:
        return ana.simplify(binary("+", index, binary("*", stage, Const(_size(b), stage.dtype))))

    def on_expr(e):
        if isinstance(e, BufferLoad) and e.buffer in doubled:
            (i,) = e.indices
            return BufferLoad(doubled[e.buffer], (shifted(e.buffer, i),), e.dtype)
        return None

    def on_stmt(x):
        if isinstance(x, BufferStore) and x.buffer in doubled:
            (i,) = x.indices
            return BufferStore(doubled[x.buffer], x.value, (shifted(x.buffer, i),))
        if isinstance(x, CallRoutine) and any(p.buffer in doubled for p in x.reads + x.writes):
            def moved(ps):
                return tuple(Pointer(doubled[p.buffer], shifted(p.buffer, p.offset)) if p.buffer in doubled else p
                             for p in ps)
            return replace(x, reads=moved(x.reads), writes=moved(x.writes))
        return None

    return mutate_stmt(s, f_stmt=on_stmt, f_expr=on_expr)


def _asynchronous(s: Stmt) -> Stmt:
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

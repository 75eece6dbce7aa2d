"""The CPU's hand-written kernels (te.extern statements) of independent problems on the GPU: det,
one LU factorization a matrix, whose statement is a "parallel" loop over the matrices, each a
serial factorization in its own scratch. The loop's iterations become the GPU's threads (THREADS
a block, the last block guarded), each iteration's scratch the thread's registers or local
memory; a statement without such a loop (one matrix) runs on one thread."""

from __future__ import annotations

from ...ops.gpu_loops import ceil_div
from ...ops.registry import get
from ...tir import dtype as dt
from ...tir.expr import Var, const, convert
from ...tir.functor import substitute_stmt
from ...tir.stmt import THREAD_BINDING, For, IfThenElse
from . import computes

THREADS = 128


def on_threads(stmt) -> For:
    """`stmt` with its outer parallel loop spread over blocks of THREADS threads, else on one thread."""
    block, tx = Var("block", dt.INDEX_DTYPE), Var("tx", dt.INDEX_DTYPE)
    if isinstance(stmt, For) and stmt.kind == "parallel":
        at = stmt.min + block * THREADS + tx
        body = IfThenElse(block * THREADS + tx < stmt.extent, substitute_stmt(stmt.body, {stmt.loop_var: at}))
        blocks, threads = convert(ceil_div(stmt.extent, THREADS)), THREADS
    else:
        body, blocks, threads = stmt, const(1), 1
    inner = For(tx, const(0), const(threads), THREAD_BINDING, body, (("thread_tag", "threadIdx.x"),))
    return For(block, const(0), blocks, THREAD_BINDING, inner, (("thread_tag", "blockIdx.x"),))


def threaded(op: str):
    """The compute of `op` (a te.extern) with its statement spread over threads (on_threads)."""
    def compute(inputs, attrs, out_types):
        outs = get(op).compute(inputs, attrs, out_types)
        ext = outs[0].op
        ext.body = on_threads(ext.body)  # (the extern was made for this kernel alone, just now)
        return outs

    return compute


computes("det")(threaded("det"))

"""How much a loop nest computes, to decide whether running it in parallel pays.

An OpenMP parallel region costs a fork and a join of the team: microseconds with the threads
spinning on a quiet machine, and up to a scheduler time slice (milliseconds) when a thread has no
core, as on a machine with more runnable threads than cores. A kernel over a few elements costs
nanoseconds; inside a loop (an ONNX Loop runs its body's kernels once per iteration) the region's
cost is paid every iteration: a 4-element body took 1.4 ms an iteration with two threads on a
busy 2-core machine against 0.5 us with one. So a parallel loop runs in parallel only over at
least PARALLEL_MIN_WORK innermost iterations (`static_work` counts them: a store's lanes, one
per other statement in the innermost bodies, the extents multiplied along each nest and summed
over siblings), about where a region's fork and join on a quiet machine cost as much as the work
it spreads."""

from __future__ import annotations

from . import dtype as dt
from .expr import as_int
from .stmt import Allocate, Block, BlockRealize, BufferStore, CallRoutine, For, IfThenElse, SeqStmt, Stmt, While

PARALLEL_MIN_WORK = 1 << 14


def static_work(s: Stmt) -> int | None:
    """The innermost iterations `s` runs (an upper bound: both branches of a condition counted),
    None when that depends on run-time values (a symbolic extent, a while loop) or is opaque (a
    call of a library routine, such as a packed gemm's micro-kernel: taken as large)."""
    match s:
        case For(extent=extent, body=body):
            n, inner = as_int(extent), static_work(body)
            return None if n is None or inner is None else max(n, 0) * inner
        case SeqStmt(stmts=stmts):
            parts = [static_work(x) for x in stmts]
            return None if None in parts else sum(parts)
        case IfThenElse(then_case=then, else_case=other):
            parts = [static_work(x) for x in (then, other) if x is not None]
            return None if None in parts else sum(parts)
        case Allocate(body=body) | BlockRealize(block=Block(body=body)):
            return static_work(body)
        case While() | CallRoutine():
            return None
        case BufferStore(value=value):
            return dt.lanes_of(value.dtype)
        case _:
            return 1

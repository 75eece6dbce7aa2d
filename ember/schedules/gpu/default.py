"""The default GPU schedule of a kernel, by the shape of each output (see the package doc)."""

from __future__ import annotations

from ...cuda import schedules as gpu
from ...te.schedule import ThreadAxis
from ...te.tensor import ComputeOp, input_tensors_of
from ...tir.expr import as_int
from ..rules import inline_intermediates

THREADS = 256


def default_schedule(s, outputs, pattern: str, target) -> None:
    inline_intermediates(s.sch)
    for t in outputs:
        if not isinstance(t.op, ComputeOp):  # an extern call: left unbound, which the CUDA backend names
            continue
        if not t.op.axis:  # a scalar: its own reduction, if any, in its thread's loop
            one_thread(s, t, reductions_of(s, t))
        elif t.op.reduce_axis:
            per_thread(s, t)
        elif producers := reductions_of(s, t):  # an epilogue over reductions (a convolution's bias and ReLU)
            n = count(t)
            gpu.elementwise(s, t, threads=THREADS if n is None else min(THREADS, n), vector=1, producers=producers)
        else:
            spread(s, t)


def spread(s, t) -> None:
    """Every element of t on its own thread: the axes fused, 4 consecutive elements a thread
    where 4 divides their count (16-byte accesses where they are contiguous). A symbolic count
    takes blocks of THREADS, as many as the call's sizes need."""
    n = count(t)
    if n is None:  # a symbolic count: whole blocks, the last one guarded, no vectors
        gpu.elementwise(s, t, threads=THREADS, vector=1)
        return
    vector = 4 if n % 4 == 0 and n >= 4 else 1
    gpu.elementwise(s, t, threads=min(THREADS, max(1, n // vector)), vector=vector)


def per_thread(s, t) -> None:
    """One element of t a thread, the reductions it reads computed in its registers."""
    n = count(t)
    gpu.rows(s, t, reductions_of(s, t), threads=THREADS // 2 if n is None else min(THREADS // 2, n))


def one_thread(s, t, producers=()) -> None:
    """A scalar (a 0-d output: a size, a loss of a few elements) on one thread, a loop of one
    iteration made for it to bind; the `producers` it reads computed there."""
    loop = s[t].sch.add_unit_loop(s[t].block)
    s[t].bind(loop, ThreadAxis("threadIdx.x"))
    for p in producers:
        s[p].compute_at(s[t], loop)


def reductions_of(s, t) -> list:
    """The reductions t reads that are still stages of their own, consumers first."""
    return [op.output(0) for op in reversed(input_tensors_of([t]))
            if isinstance(op, ComputeOp) and op is not t.op and op.reduce_axis and s.computed(op.output(0))]


def count(t) -> int | None:
    """t's elements, or None when a dimension is symbolic (an expression of the model's sizes)."""
    n = 1
    for d in t.shape:
        if as_int(d) is None:
            return None
        n *= as_int(d)
    return n

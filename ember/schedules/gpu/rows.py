"""GPU schedules of the row kernels (ember.ops.normalization: softmax, log_softmax, layer_norm,
rms_norm) over the last axis of their input (any leading axes, of static or symbolic size, are
the rows): a row a block (ember.cuda.schedules.row_block) of up to MAX_THREADS threads, 4
consecutive elements a thread where 4 divides the row (16-byte accesses). The row is read from
global memory once however many statistics read it (softmax's max and sum, the normalizations'
scale, mean and squares, then the output): into registers, each thread its own columns in every
phase, where every stage reads the row only at its own column and a thread holds at most HELD
elements (as persistent reductions do), else into shared memory where it fits, else it is read
again by each phase (L2 hits). Stages without reductions are computed once: the row's values
(1 / sqrt(var + eps), layer_norm's first element) by every thread, softmax's exp(x - max) by
each thread for its columns, in registers, for the sum and the output. Each thread reduces its
part of a statistic in a register, stored once into the block's partials, which every warp folds
with shuffles. A row of symbolic length is read by each phase in chunks of the block's threads,
its tail guarded."""

from __future__ import annotations

from ...cuda import schedules as gpu
from ...target import WARP
from ...te.tensor import ComputeOp, PlaceholderOp, input_tensors_of
from ...tir import dtype as dt
from ...tir.expr import as_int
from ..rules import inline_intermediates
from . import schedules
from .default import reductions_of

MAX_THREADS = 256
LONG_THREADS = 1024  # the most a block takes for a long row
HELD = 32  # the most elements of a row a thread keeps in registers
# the fewest a thread is given where a whole number of warps allows: on an H200, rows of 768 in 96
# threads of 8 read 78-85% of the copy's bandwidth, in 192 of 4 54-68% (4096 rows; 128 rows 60-65%
# -> 62-67%); rows of 4096 in 256 threads of 16, 94-98%
LEAST_HELD = 8


def block_threads(n: int, vector: int) -> int | None:
    """The most threads (a whole number of warps, at most MAX_THREADS) that split n elements
    `vector` at a time."""
    return next((t for t in range(MAX_THREADS, 0, -WARP) if n % (t * vector) == 0), None)


def row_threads(n: int, vector: int, rows: int = 1) -> int:
    """Threads of a block over `rows` rows of n elements (an input and a residual added to it), `vector`
    at a time: the most that divide a row leaving each at least LEAST_HELD, else the most that
    divide it (block_threads), else whole warps enough for it (up to MAX_THREADS), the tail
    guarded; where that leaves a thread more than HELD elements, the fewest
    warps (up to LONG_THREADS) that leave it at most HELD (a long row, a vocabulary's logits: kept
    in registers, and spread over more of the multiprocessor where there are few rows)."""
    threads = next((t for t in range(MAX_THREADS, 0, -WARP) if n % (t * vector) == 0 and n // t >= LEAST_HELD),
                   None) or block_threads(n, vector) or min(MAX_THREADS, -(-n // (vector * WARP)) * WARP)
    if _held(n, threads, vector) * rows <= HELD:
        return threads
    return next((t for t in range(threads, LONG_THREADS + 1, WARP) if _held(n, t, vector) * rows <= HELD),
                LONG_THREADS)


def _held(n: int, threads: int, vector: int) -> int:
    """The elements of a row of n a thread holds, `vector` at a time over `threads` threads."""
    return -(-n // (threads * vector)) * vector


@schedules("softmax", "log_softmax", "layer_norm", "rms_norm")
def schedule_row_blocks(s, outputs, target) -> bool | None:
    (out,) = outputs
    return None if row_blocks(s, out, target) else False


def row_blocks(s, out, target, threads: int | None = None, scope: str | None = None, rows_per_block: int = 1) -> bool:
    """Schedule `out`, a row kernel's output, a row a block (see the module doc); False, with
    nothing changed, where it is not one. `threads` (a whole number of warps) and `scope` (where
    the row is kept: "local", registers, where every stage reads only its own columns; "shared";
    "global", read again by each phase) override the defaults, for the benchmarks' variants, and so
    do `rows_per_block` (a 2-D output's rows a block, one on each threadIdx.y)."""
    n = out.ndim
    if n < 2 or out.op.attrs.get("rows", ((0,), (1,))) != (tuple(range(n - 1)), (n - 1,)):
        return False
    m = as_int(out.shape[-1])
    stages = reductions_of(s, out)  # (inlining leaves reductions)
    if any(len(t.op.reduce_axis) != 1 or str(t.op.reduce_axis[0].dom.extent) != str(out.shape[-1]) for t in stages):
        return False  # a statistic of the row that is not one reduction over it
    if m is None:  # a row of symbolic length: read by each phase in chunks of the block's threads, the tail guarded
        inline_intermediates(s.sch)
        gpu.row_block(s, out, list(reversed(stages)), threads or MAX_THREADS)
        return True
    vector = 4 if m % 4 == 0 else 1
    rows = [op.output(0) for op in input_tensors_of([out])  # the inputs of the row's shape: read by every phase
            if isinstance(op, PlaceholderOp) and _same_shape(op.output(0), out)]
    threads = threads or row_threads(m, vector, max(1, len(rows)))
    fits = (m * sum(dt.bits(t.dtype) // 8 for t in rows) + threads * 4 * len(stages)) * rows_per_block \
        <= target.gpu.shared_per_block
    held = _held(m, threads, vector) * len(rows)  # a thread's elements of the rows
    kept = kept_stages(s, out)
    inline_intermediates(s.sch, where=lambda b: all(b.name != t.op.name for t in kept))
    ordered = [op.output(0) for op in input_tensors_of([out])  # in the order they run
               if op is not out.op and any(op is t.op for t in (*stages, *kept))]
    own = [t for t in kept if t.ndim == n]
    if scope is None:
        scope = "local" if held <= HELD and all(
            gpu.reads_own_columns(s, r, x) for r in (*ordered, out) if r.ndim == n or r.op.reduce_axis
            for x in (*rows, *own)) else "shared" if fits else "global"
    if scope != "local" and own:  # a row of its own only in registers (else computed by each phase)
        inline_intermediates(s.sch, where=lambda b: any(b.name == t.op.name for t in own))
        ordered = [t for t in ordered if all(t.op is not o.op for o in own)]
    gpu.row_block(s, out, ordered, threads, vector, staged=None if scope == "global" else rows,
                  scope="local" if scope == "local" else "shared", rows_per_block=rows_per_block)
    return True


def kept_stages(s, out) -> list:
    """The stages without reductions that a row computes once rather than inlined where they are
    read: the values of the row (a norm's scale, first element and 1 / sqrt(var + eps)), and the
    rows of their own that a reduction reads (softmax's exp(x - max), read by its sum and its output)."""
    found = reductions_of(s, out)
    kept = []
    for op in input_tensors_of([out]):
        if not isinstance(op, ComputeOp) or op is out.op or op.reduce_axis or not s.computed(op.output(0)):
            continue
        t = op.output(0)
        if _same_shape(t, out) and any(any(x.op is op for x in r.op.input_tensors) for r in found) or \
                list(map(str, t.shape)) == list(map(str, out.shape[:-1])):
            kept.append(t)
    return kept


def _same_shape(a, b) -> bool:
    return list(map(str, a.shape)) == list(map(str, b.shape))

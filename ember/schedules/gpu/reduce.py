"""GPU schedule of the reductions (ember.ops.reduce: sum, mean, max, min over one axis or more, and
global_avg_pool over a map's positions) that take a block an output element (ember.cuda.schedules.
reduce_block: partials in shared memory, folded with warp shuffles):

- a long reduction (at least LONG elements) in up to 256 threads that divide it;
- a reduction to few outputs (fewer than FEW a multiprocessor: a thread each would leave most of
  the GPU idle, as ResNet's global average pool at batch 1, 512 channels of 49 positions, did in 4
  blocks) in one warp, each lane a strided part of the output's elements (its tail guarded), so
  that the output elements' blocks cover the GPU's multiprocessors.

The others (many outputs, or a symbolic count of them, of short reductions; reductions of
symbolic length) decline: the default reduces an output element a thread. Several reduced axes
are taken as one, their loops fused (a map's rows and columns). A reduction to one value (a 0-d
output: `x.sum()`, a loss) takes one block of up to 256 threads; a large one is two kernels by
then (ember.passes.split_reduce): reduce_parts' parts, a block of 256 threads each, and this
one block over their partials."""

from __future__ import annotations

import math

from ...cuda import schedules as gpu
from ...tir.expr import as_int
from ..rules import inline_intermediates
from . import schedules
from .default import reductions_of
from .rows import MAX_THREADS, WARP, block_threads

LONG = 256  # elements a reduction needs for a block of its own
FEW = 128  # outputs a multiprocessor below which each output takes a block of its own (a thread each: one block)


@schedules("sum", "mean", "max", "min", "global_avg_pool")
def schedule_reduce(s, outputs, target) -> bool | None:
    (out,) = outputs
    found = [out] if out.op.reduce_axis else reductions_of(s, out)
    if len(found) != 1:
        return False
    (red,) = found
    if not out.op.axis:  # a whole tensor to one value: one block, its tail guarded
        m = math.prod(as_int(r.dom.extent) or 0 for r in red.op.reduce_axis)
        inline_intermediates(s.sch)
        gpu.reduce_block(s, out, red, WARP if 0 < m < LONG else (block_threads(m, 1) or MAX_THREADS))
        return None
    kept = [str(d) for d in out.shape if as_int(d) != 1]
    if [str(d) for d in red.shape if as_int(d) != 1] != kept:
        return False  # (an output that is not the reduction's elements)
    m = math.prod(as_int(r.dom.extent) or 0 for r in red.op.reduce_axis)
    if m == 0:  # a reduction of symbolic length
        return False
    if m >= LONG and block_threads(m, 1) is not None:
        threads = block_threads(m, 1)
    elif all(as_int(d) is not None for d in out.shape) and m >= WARP // 4 \
            and math.prod(as_int(d) for d in out.shape) < FEW * target.gpu.multiprocessors:
        threads = WARP
    else:
        return False
    inline_intermediates(s.sch)
    gpu.reduce_block(s, out, red, threads)
    return None



@schedules("reduce_parts")
def schedule_reduce_parts(s, outputs, target) -> None:
    """A part a block of MAX_THREADS threads (a part is thousands of elements, contiguous: each
    thread's strided loads coalesced across the warp; a tail past the end guarded)."""
    (out,) = outputs
    inline_intermediates(s.sch)
    gpu.reduce_block(s, out, out, MAX_THREADS)

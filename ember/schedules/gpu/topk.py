"""GPU schedule of topk (ember.ops.topk: each element's rank in its row, counted against every
other, then the k indices found by rank and their values): a thread an output element, its index
and its row's ranks computed in its registers (n x n comparisons a thread: rows of up to HELD
elements, a mixture of experts' router; a longer row, a vocabulary's logits, has no GPU schedule
yet and is a ScheduleError naming it)."""

from __future__ import annotations

import math

from ...errors import ScheduleError
from ...te.schedule import ThreadAxis
from ...tir.expr import as_int
from . import schedules

HELD = 1024  # the most elements of a row whose ranks a thread keeps
THREADS = 128


@schedules("topk")
def schedule_topk(s, outputs, target) -> None:
    values, indices = outputs
    (rank,) = indices.op.input_tensors
    shape, kept = [as_int(d) for d in rank.shape], [as_int(d) for d in values.shape]
    if None in shape or None in kept:
        raise ScheduleError(f"topk over {list(map(str, rank.shape))} has no GPU schedule: its sizes must be static")
    n = next((a for a, b in zip(shape, kept) if a != b), shape[-1])  # the row's length (along the axis)
    if n > HELD:
        raise ScheduleError(f"topk over rows of {n} elements has no GPU schedule: a thread keeps the ranks of a row "
                            f"of at most {HELD}")
    stage = s[values]
    fused = stage.fuse(*stage.op.axis) if values.ndim > 1 else stage.op.axis[0]
    block, thread = stage.split(fused, factor=min(THREADS, math.prod(kept)))
    stage.bind(block, ThreadAxis("blockIdx.x"))
    stage.bind(thread, ThreadAxis("threadIdx.x"))
    for t in (indices, rank):
        s[t].compute_at(stage, thread)

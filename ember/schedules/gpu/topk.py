"""GPU schedule of topk (ember.ops.topk: each element's rank in its row, counted against every
other, then the k indices found by rank and their values): a thread an output element, its index
and its row's ranks computed in its registers (n x n comparisons a thread: rows of up to HELD
elements, a mixture of experts' router; a longer row, a vocabulary's logits, has no GPU schedule
yet and is a ScheduleError naming it). The rows may be of symbolic count, the last block guarded."""

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
    axis = next((k for k, (a, b) in enumerate(zip(rank.shape, values.shape)) if str(a) != str(b)), rank.ndim - 1)
    n = as_int(rank.shape[axis])  # the row's length (the other axes, static or symbolic, are its rows)
    if n is None or n > HELD:
        raise ScheduleError(f"topk over rows of {rank.shape[axis]} elements has no GPU schedule: a thread keeps the "
                            f"ranks of a static row of at most {HELD}")
    stage = s[values]
    fused = stage.fuse(*stage.op.axis) if values.ndim > 1 else stage.op.axis[0]
    count = math.prod(as_int(d) or THREADS for d in values.shape)  # (a symbolic count: whole blocks)
    block, thread = stage.split(fused, factor=min(THREADS, count))
    stage.bind(block, ThreadAxis("blockIdx.x"))
    stage.bind(thread, ThreadAxis("threadIdx.x"))
    for t in (indices, rank):
        s[t].compute_at(stage, thread)

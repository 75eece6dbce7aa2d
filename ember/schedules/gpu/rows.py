"""GPU schedules of the row kernels (ember.ops.normalization: softmax, log_softmax, layer_norm,
rms_norm) over the last axis of a 2-D input: a row a block, each statistic of the row reduced
across the block's threads (ember.cuda.schedules.row_block: partials in shared memory, folded
with warp shuffles), 4 consecutive elements a thread where they divide the row. Other shapes
(and rows of symbolic length) decline: the default computes a row a thread."""

from __future__ import annotations

from ...cuda import schedules as gpu
from ...tir.expr import as_int
from ..rules import inline_intermediates
from . import schedules
from .default import reductions_of

THREADS = (256, 128, 64, 32)


def block_threads(n: int, vector: int) -> int | None:
    """The most threads (a whole number of warps) that split n elements `vector` at a time."""
    return next((t for t in THREADS if n % (t * vector) == 0), None)


@schedules("softmax", "log_softmax", "layer_norm", "rms_norm")
def schedule_row_blocks(s, outputs, target) -> bool | None:
    (out,) = outputs
    if out.ndim != 2 or out.op.attrs.get("rows", ((0,), (1,))) != ((0,), (1,)):
        return False
    m = as_int(out.shape[1])
    if m is None:  # a row of symbolic length
        return False
    vector = 4 if block_threads(m, 4) else 1
    threads = block_threads(m, vector)
    if threads is None:
        return False
    stages = reductions_of(s, out)  # (inlining leaves reductions)
    if any(len(t.op.reduce_axis) != 1 or as_int(t.op.reduce_axis[0].dom.extent) != m for t in stages):
        return False  # a statistic of the row that is not one reduction over it
    inline_intermediates(s.sch)
    gpu.row_block(s, out, list(reversed(stages)), threads, vector)
    return None

"""GPU schedule of the long reductions (ember.ops.reduce: sum, mean, max, min over one axis of at
least 256 elements): an output element a block, reduced across the block's threads
(ember.cuda.schedules.reduce_block: partials in shared memory, folded with warp shuffles). Short
reductions, those over several axes or of symbolic length, decline: the default reduces an output element a
thread."""

from __future__ import annotations

from ...cuda import schedules as gpu
from ...tir.expr import as_int
from ..rules import inline_intermediates
from . import schedules
from .default import reductions_of
from .rows import block_threads

LONG = 256  # elements a reduction needs for a block of its own


@schedules("sum", "mean", "max", "min")
def schedule_reduce(s, outputs, target) -> bool | None:
    (out,) = outputs
    found = [out] if out.op.reduce_axis else reductions_of(s, out)
    if len(found) != 1 or not out.op.axis:
        return False
    (red,) = found
    if len(red.op.reduce_axis) != 1 or [as_int(d) for d in red.shape] != [as_int(d) for d in out.shape]:
        return False
    m = as_int(red.op.reduce_axis[0].dom.extent)
    if m is None:  # a reduction of symbolic length
        return False
    threads = block_threads(m, 1)
    if m < LONG or threads is None:
        return False
    inline_intermediates(s.sch)
    gpu.reduce_block(s, out, red, threads)
    return None

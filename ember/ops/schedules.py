"""Default CPU schedules for one operator's kernel, chosen by its pattern kind.

Elementwise, broadcast and injective kernels: intermediate stages inlined, the outer loops
fused and parallelized, the innermost loop vectorized when its extent allows. Reductions: the
same over the spatial loops, reduction loops inside. Operators with a better schedule (conv,
matmul) bring their own in their OpDef; this is what the rest gets.
"""

from __future__ import annotations

import contextlib

from ..errors import ScheduleError
from ..te.tensor import ComputeOp, Tensor, input_tensors_of
from ..tir.expr import as_int

VECTOR_LANES = 16  # fp32 lanes of one AVX-512 register; wider loops are split by the lowering


def inline_intermediates(s, outputs: list[Tensor]) -> None:
    """Inline every spatial (non-reduction) stage that is not an output."""
    out_ops = {id(t.op) for t in outputs}
    for op in reversed(input_tensors_of(outputs)):
        if isinstance(op, ComputeOp) and id(op) not in out_ops and not op.reduce_axis:
            with contextlib.suppress(ScheduleError):
                s[op.output(0)].compute_inline()


def parallel_vectorize(s, t: Tensor) -> None:
    """Parallelize the outer spatial loops of t's stage (fused) and vectorize the innermost."""
    stage = s[t]
    axes = list(stage.op.axis)
    if not axes:
        return
    inner = axes[-1]
    extent = as_int(inner.dom.extent)
    vec = None
    if not stage.op.reduce_axis and extent is not None and extent >= 4:
        lanes = VECTOR_LANES if extent % VECTOR_LANES == 0 else (8 if extent % 8 == 0 else None)
        if lanes is not None:
            outer, vec = stage.split(inner, factor=lanes)
            axes[-1] = outer
    outer_axes = axes if vec is not None else axes[:-1] or axes
    if len(outer_axes) > 1:
        fused = stage.fuse(*outer_axes)
    else:
        fused = outer_axes[0]
    stage.parallel(fused)
    if vec is not None:
        stage.vectorize(vec)


def default_schedule(s, outputs: list[Tensor], pattern: str) -> None:
    inline_intermediates(s, outputs)
    for t in outputs:
        # a shape these rules do not fit keeps its unscheduled loops: correct, slower
        with contextlib.suppress(ScheduleError):
            parallel_vectorize(s, t)

"""Default CPU schedules for one operator's kernel, chosen by its pattern kind.

Elementwise, broadcast and injective kernels: intermediate stages inlined, the outer loops
fused and parallelized, the innermost loop vectorized when its extent allows. Reductions: the
same over the spatial loops, reduction loops inside. Operators with a better schedule (conv,
matmul) bring their own in their OpDef; this is what the rest gets. Both steps are the shared
rules of ember.schedules.rules, applied to te stages.
"""

from __future__ import annotations

import contextlib

from ...errors import ScheduleError
from ...te.tensor import Tensor
from ..rules import inline_intermediates
from ..rules import parallel_vectorize as parallel_vectorize_block


def vector_loops(lanes: int) -> tuple[int, ...]:
    """The vector loops the default schedules make for `lanes` fp32 lanes: a register, else half
    of one (none without vectors)."""
    return tuple(w for w in (lanes, lanes // 2) if w > 1)


def parallel_vectorize(s, t: Tensor, lanes: int) -> None:
    """Parallelize the outer spatial loops of t's stage (fused) and vectorize the innermost, split
    by a register's `lanes` (ember.schedules.rules.parallel_vectorize)."""
    parallel_vectorize_block(s.sch, s[t].block, vector_loops(lanes))


def default_schedule(s, outputs: list[Tensor], pattern: str, target) -> None:
    inline_intermediates(s.sch)
    for t in outputs:
        # a shape these rules do not fit keeps its unscheduled loops: correct, slower
        with contextlib.suppress(ScheduleError):
            parallel_vectorize(s, t, target.lanes())

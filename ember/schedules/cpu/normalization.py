"""CPU schedules of the normalizations (ember.ops.normalization): row by row (rows.schedule_rows),
group_norm's rows made of (sample, group), batch_norm elementwise."""

from __future__ import annotations

import contextlib

from ...errors import ScheduleError
from . import schedules
from .default import parallel_vectorize
from .rows import parallel_rows, schedule_rows, vectorize_inner

schedules("softmax", "log_softmax", "layer_norm", "rms_norm", "instance_norm")(schedule_rows)


@schedules("group_norm")
def schedule_group_norm(s, outs, target) -> None:
    """The channel loop split into (group, channel in group); (sample, group) rows in parallel."""
    (out,) = outs
    st = s[out]
    axes = list(st.op.axis)
    g, _ = st.split(axes[1], factor=out.op.attrs["group"])
    parallel_rows(s, out, [axes[0], g], target.lanes())
    if out.ndim > 2:
        vectorize_inner(st, axes[2:], target.lanes())


@schedules("batch_norm")
def schedule_batch_norm(s, outs, target) -> None:
    """scale stays a stage of its own (one rsqrt per channel, not per element)."""
    with contextlib.suppress(ScheduleError):
        parallel_vectorize(s, outs[0], target.lanes())

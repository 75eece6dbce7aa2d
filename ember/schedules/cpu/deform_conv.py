"""CPU schedule of deform_conv2d (ember.ops.deform_conv): the sampled columns computed once, at
the root in parallel (a PACK stage: inlined, every output channel would sample them again), then
the reduction against the weights parallel over its outer loops."""

from __future__ import annotations

from ...ops.deform_conv import ANCHOR
from . import schedules
from .tiling import find_anchor, untiled


@schedules("deform_conv2d")
def schedule_deform_conv(s, outputs, target):
    anchor = find_anchor(outputs, ANCHOR)
    if anchor is None:
        return False
    untiled(s, outputs, anchor, target.lanes())
    return None

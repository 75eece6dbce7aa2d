"""storage_align: pad a scratch buffer's rows, so that the rows of a shared tile start in other
memory banks (TVM's storage_align, restricted to the row stride).

The primitive records the request on the function (attribute "storage_align": (buffer name,
factor, offset) triples); the lowering pass of the same name (ember.tir.transform.storage_align)
applies it once the buffer has its final, compacted shape: the row stride (of dimension ndim - 2)
becomes the least s >= the row length with s % factor == offset, and the elements past the row
are never touched.
"""

from __future__ import annotations

from dataclasses import replace

from ...errors import ScheduleError
from .registry import primitive
from .state import BlockRV, Schedule

ATTR = "storage_align"


@primitive
def storage_align(sch: Schedule, block: BlockRV, buffer_index: int, axis: int, factor: int, offset: int) -> None:
    """Pad the rows of the buffer `block` writes (its writes[buffer_index]): the stride of
    dimension `axis` (its second-to-last) is made `offset` modulo `factor` elements, e.g. factor
    32, offset 1 for a float32 tile whose columns are read across threads (TVM's
    `storage_align`).

    A_shared = alloc((64, 8))  ->  A_shared = alloc((64, 9)) after lowering, row i at 9 * i"""
    blk = sch.get_realize(block).block
    if not 0 <= buffer_index < len(blk.writes):
        raise ScheduleError(f"storage_align: block {blk.name!r} writes {len(blk.writes)} buffers")
    buf = blk.writes[buffer_index].buffer
    if buf not in sch.root_block().alloc_buffers:
        raise ScheduleError(f"storage_align pads scratch buffers; {buf.name} is an argument of the kernel")
    if buf.ndim < 2 or axis not in (buf.ndim - 2, -2):
        raise ScheduleError(f"storage_align pads the row stride (axis {buf.ndim - 2} of {buf.name}, a "
                            f"{buf.ndim}-D buffer), not axis {axis}")
    if factor < 1 or not 0 <= offset < factor:
        raise ScheduleError(f"storage_align takes a factor >= 1 and 0 <= offset < factor, got {factor}, {offset}")
    requests = tuple(r for r in dict(sch.mod.attrs).get(ATTR, ()) if r[0] != buf.name) + ((buf.name, factor, offset),)
    attrs = tuple((k, v) for k, v in sch.mod.attrs if k != ATTR) + ((ATTR, requests),)
    sch.mod = replace(sch.mod, attrs=attrs)

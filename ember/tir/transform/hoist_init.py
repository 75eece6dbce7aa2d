"""Hoist reduction inits out of their reduction loops (decompose_reduction at the outermost
loop that runs over a reduction axis), so the kernel zeroes an accumulator once instead of
testing `k == 0` on every iteration. A block where that is not legal keeps its init, which
`lower_blocks` turns into a guarded store.
"""

from __future__ import annotations

from ...errors import ScheduleError
from ..region import reduce_loop_vars
from ..stmt import For, PrimFunc


def hoist_init(func: PrimFunc) -> PrimFunc:
    from ..schedule import Schedule

    sch = Schedule(func)
    for realize in sch.all_realizes():
        if realize.block.init is None:
            continue
        block = sch.new_block_rv(realize.block.name)
        path = sch.block_path(block)
        rvars = reduce_loop_vars(path[-1])
        outer = next((s for s in path if isinstance(s, For) and s.loop_var in rvars), None)
        if outer is None:
            continue
        try:
            sch.decompose_reduction(block, sch.new_loop_rv(outer.loop_var))
        except ScheduleError:
            continue
    return sch.mod

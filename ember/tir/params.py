"""A function's parameters chosen after scheduling: which buffers a caller passes, which stay
scratch space inside (`te` schedules, default schedules and tuned traces all end here)."""

from __future__ import annotations

from dataclasses import replace

from ..errors import ScheduleError
from .expr import Buffer
from .functor import visit_stmt
from .stmt import BlockRealize, BufferStore, PrimFunc


def bind_params(func: PrimFunc, params: list[Buffer], name: str) -> PrimFunc:
    """Make `params` the function's arguments: those computed inside stop being scratch buffers,
    computed tensors left out become scratch; every tensor read but never computed must be one."""
    written: set[Buffer] = set()
    read: dict[Buffer, None] = {}

    def on_stmt(s):
        if isinstance(s, BufferStore):
            written.add(s.buffer)
        if isinstance(s, BlockRealize):
            for r in s.block.reads:
                read.setdefault(r.buffer)

    visit_stmt(func.body, on_stmt)
    top = func.body
    root = top.block
    missing = [b.name for b in read if b not in written and b not in params and b not in root.alloc_buffers]
    if missing:
        raise ScheduleError(f"tensors {missing} are read by the computation but are not among the arguments")
    allocs = [b for b in root.alloc_buffers if b not in params]
    allocs += [b for b in func.params if b not in params and b in written and b not in allocs]
    new_root = replace(root, alloc_buffers=tuple(allocs))
    return PrimFunc(name, tuple(params), replace(top, block=new_root), func.attrs)

"""Schedules on the loop IR: `Schedule(func)`, its primitives, and replayable traces."""

from . import (  # noqa: F401  (register primitives)
    cache,
    compute_location,
    inline,
    loops,
    padding,
    reduction,
    sampling,
    storage_align,
    tensorize,
)
from .registry import PRIMITIVES
from .state import BlockRV, ExprRV, LoopRV, Schedule
from .trace import Instruction, Trace

__all__ = ["PRIMITIVES", "BlockRV", "ExprRV", "Instruction", "LoopRV", "Schedule", "Trace"]

"""Schedules on the loop IR: `Schedule(func)`, its primitives, and replayable traces."""

from . import cache, compute_location, inline, loops, reduction  # noqa: F401  (register primitives)
from .state import PRIMITIVES, BlockRV, LoopRV, Schedule
from .trace import Instruction, Trace

__all__ = ["PRIMITIVES", "BlockRV", "Instruction", "LoopRV", "Schedule", "Trace"]

"""The loop IR: expressions, statements, schedules on it, and lowering."""

from .lower import lower
from .schedule import BlockRV, LoopRV, Schedule, Trace
from .stmt import PrimFunc

__all__ = ["BlockRV", "LoopRV", "PrimFunc", "Schedule", "Trace", "lower"]

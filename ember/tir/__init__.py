"""The loop IR: expressions, statements, schedules on it, and lowering."""

from . import printer  # noqa: F401 - str() of the IR's nodes
from .lower import lower
from .schedule import BlockRV, LoopRV, Schedule, Trace
from .stmt import PrimFunc

__all__ = ["BlockRV", "LoopRV", "PrimFunc", "Schedule", "Trace", "lower"]

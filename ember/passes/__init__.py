"""Graph passes, one file each (see DESIGN.md): Graph -> Graph rewrites, and the analyses the
compiler runs over the final graph (memory planning)."""

from .plan_memory import MemoryPlan, plan_memory

__all__ = ["MemoryPlan", "plan_memory"]

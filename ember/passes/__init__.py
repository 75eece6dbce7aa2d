"""Graph passes, one file each (see DESIGN.md): Graph -> Graph rewrites, and the analyses the
compiler runs over the final graph (memory planning)."""

from .pipeline import PASSES, PIPELINES, PassReport, run_pipeline
from .plan_memory import MemoryPlan, plan_memory

__all__ = ["PASSES", "PIPELINES", "MemoryPlan", "PassReport", "plan_memory", "run_pipeline"]

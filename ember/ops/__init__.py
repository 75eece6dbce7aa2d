"""The operator library: each operator declared once (ember.ops.registry), one module per family.
How kernels are scheduled is kept apart, per target family (ember.schedules.cpu)."""

from . import families  # noqa: F401 - every operator registered before any lookup
from .registry import (
           PATTERNS,
           REQUIRED,
           OpDef,
           OpTypeError,
           UnsupportedOpError,
           all_ops,
           exists,
           get,
           infer_types,
           register,
)

__all__ = ["PATTERNS", "REQUIRED", "OpDef", "OpTypeError", "UnsupportedOpError", "all_ops", "exists", "get",
           "infer_types", "register"]

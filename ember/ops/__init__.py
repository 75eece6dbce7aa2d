"""The operator library: each operator declared once (ember.ops.registry), one module per family.
How kernels are scheduled is kept apart, per target family (ember.schedules.cpu)."""

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

# isort: split
# after the names above: families.py imports every operator module, each registering its operators
from . import families  # noqa: F401

__all__ = ["PATTERNS", "REQUIRED", "OpDef", "OpTypeError", "UnsupportedOpError", "all_ops", "exists", "get",
           "infer_types", "register"]

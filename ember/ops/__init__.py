"""The operator library: each operator declared once (ember.ops.registry), one module per family."""

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

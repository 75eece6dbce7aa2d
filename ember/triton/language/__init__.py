"""`import ember.triton.language as tl`: the tile language, as Triton spells it."""

from . import math
from .core import *  # noqa: F403
from .core import BUILTINS, range, static_range
from .dtypes import (
    bfloat16,
    constexpr,
    dtype,
    float16,
    float32,
    float64,
    int1,
    int8,
    int16,
    int32,
    int64,
    pointer_type,
    uint8,
    uint16,
    uint32,
    uint64,
)

__all__ = [*BUILTINS, "math", "range", "static_range", "constexpr", "dtype", "pointer_type", "bfloat16", "float16",
           "float32", "float64", "int1", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]

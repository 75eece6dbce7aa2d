"""GELU in NumPy, float64: the exact form 0.5 x (1 + erf(x / sqrt 2)) and the tanh approximation
0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). The reference of the gelu operator
(ember.ops.unary) and of a quantized product's GELU epilogue (ember.ops.gemm_nbits), which the
routines' interpreter (ember.codegen.routines) computes too, below the operators' layer."""

from __future__ import annotations

import math

import numpy as np

SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
_erf64 = np.vectorize(math.erf, otypes=["float64"])  # NumPy has no erf without SciPy


def erf(x: np.ndarray) -> np.ndarray:
    return _erf64(x) if x.size else x.astype("float64")


def gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    """GELU of x, `approximate` "tanh" or "none" (torch's and ONNX's attribute)."""
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))

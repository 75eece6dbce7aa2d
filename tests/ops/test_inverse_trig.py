"""asin, acos, atan, asinh, acosh, atanh (ember/ops/unary.py, libm in C, NumPy in the interpreter)
on both targets against their NumPy references and torch, on fresh inputs of each domain, scalar
and vector widths (their frontends: tests/frontend/test_onnx_added_ops.py, test_torch_indexing.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ember.testing import check_op

RNG = np.random.default_rng()
DOMAINS = {"asin": (-1, 1), "acos": (-1, 1), "atan": (-20, 20), "asinh": (-20, 20), "acosh": (1, 30),
           "atanh": (-0.99, 0.99)}


@pytest.mark.parametrize("op", sorted(DOMAINS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_inverse_functions(op, dtype):
    low, high = DOMAINS[op]
    x = RNG.uniform(low, high, (3, 37)).astype(dtype)
    check_op(op, [x], None, rtol=2e-6 if dtype == "float32" else 1e-12, atol=1e-7, targets=("c", "python"),
             torch_fn=getattr(torch, op))


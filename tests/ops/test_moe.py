"""histc and grouped_matmul (ember/ops/moe.py) on the C target against their NumPy references and
torch: histc over random floats (values outside the range, the range's ends) and over expert ids
as transformers' routers count them; grouped_matmul over tokens sorted by expert, an expert with
no tokens, rows past the last offset, in its register tile and without; and the errors of bad
attributes and shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.testing import check_op

RNG = np.random.default_rng()
EXACT = {"rtol": 0, "atol": 0}


def test_histc_is_torch_histc():
    x = RNG.uniform(-3, 3, (5, 7)).astype("float32")
    x[0, :3] = [-2.0, 2.0, np.nan]  # the range's ends, and a NaN that is not counted
    check_op("histc", [x], {"bins": 6, "min": -2.0, "max": 2.0}, **EXACT,
             torch_fn=lambda t: torch.histc(torch.nan_to_num(t, nan=9.0), bins=6, min=-2.0, max=2.0))


def test_histc_counts_expert_ids():
    experts = 5
    ids = np.sort(RNG.integers(0, experts, 12)).astype("float32")
    check_op("histc", [ids], {"bins": experts, "min": 0, "max": experts - 1}, **EXACT,
             torch_fn=lambda t: torch.histc(t, bins=experts, min=0, max=experts - 1))


@pytest.mark.parametrize("counts, k, n", [
    ((3, 0, 5, 2), 24, 10),  # columns no vector divides: the default schedule
    ((9, 0, 17, 9), 40, 48),  # the register tile, its tiles of rows across the experts' bounds, the last one short
])
def test_grouped_matmul_is_transformers_grouped_mm(counts, k, n):
    experts = len(counts)  # an expert without tokens
    offsets = np.cumsum(counts).astype("int32")
    rows = offsets[-1] + 2
    x = RNG.standard_normal((rows, k)).astype("float32")  # 2 rows past the last offset: zero
    w = RNG.standard_normal((experts, k, n)).astype("float32")

    def torch_grouped(xt, wt, ot):
        out = torch.zeros(xt.shape[0], wt.shape[2])
        start = 0
        for e, end in enumerate(ot.tolist()):
            out[start:end] = xt[start:end] @ wt[e]
            start = end
        return out

    (out,) = check_op("grouped_matmul", [x, w, offsets], None, rtol=1e-5, atol=1e-5, torch_fn=torch_grouped)
    assert not out[offsets[-1]:].any()


def test_errors():
    with pytest.raises(OpTypeError, match="min .* must be below max"):
        infer_types("histc", [TensorType((4,), "float32")], {"bins": 3, "min": 1.0, "max": 1.0})
    with pytest.raises(OpTypeError, match="floating-point"):
        infer_types("histc", [TensorType((4,), "int64")], {"bins": 3, "min": 0, "max": 2})
    with pytest.raises(OpTypeError, match="offsets must be integers"):
        infer_types("grouped_matmul", [TensorType((4, 8), "float32"), TensorType((2, 8, 3), "float32"),
                                       TensorType((2,), "float32")], {})
    with pytest.raises(OpTypeError, match="disagree"):
        infer_types("grouped_matmul", [TensorType((4, 8), "float32"), TensorType((2, 6, 3), "float32"),
                                       TensorType((2,), "int32")], {})

"""float16 models build and agree with torch: pools (whose accumulators are promoted to vector
registers, kept in half as in memory), reductions, elementwise min and max."""

from __future__ import annotations

import numpy as np
import pytest

import ember

torch = pytest.importorskip("torch")
F = torch.nn.functional

CASES = {
    "max_pool2d": lambda x: F.max_pool2d(x, 2),
    "max_pool2d_3x3_pad": lambda x: F.max_pool2d(x, 3, 1, 1),
    "avg_pool2d": lambda x: F.avg_pool2d(x, 2),
    "avg_pool2d_3x3_pad": lambda x: F.avg_pool2d(x, 3, 2, 1),
    "amax": lambda x: x.amax(dim=-1),
    "amin": lambda x: x.amin(dim=(2, 3)),
    "sum": lambda x: x.sum(dim=-1),
    "minimum": lambda x: torch.minimum(x, 0.5 * x),
    "clamp": lambda x: x.clamp(-0.5, 0.5),
}


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize("shape", [(2, 16, 8, 8), (1, 3, 9, 9)])  # vector registers of 16 lanes; of 4 (padded)
@pytest.mark.parametrize("name", sorted(CASES))
def test_fp16_model_matches_torch(name, shape):
    fn = CASES[name]
    x = torch.randn(*shape).half()
    cm = ember.compile(_Fn(fn), (x,))
    got = cm(x)
    want = fn(x.float())  # the exact result; a half output rounds it once
    assert got.dtype == torch.float16
    # half has 11 significant bits: one rounding of the result, and of sums computed in float
    np.testing.assert_allclose(got.float().numpy(), want.numpy(), rtol=2e-3, atol=2e-3 * max(1, shape[-1] / 4))
    if name.startswith("max_pool") or name in ("amax", "amin", "minimum", "clamp"):
        np.testing.assert_array_equal(got.numpy(), want.half().numpy())  # a max of halves is exact

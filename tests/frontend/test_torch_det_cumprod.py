"""torch.linalg.det and torch.cumprod through torch.export (aten._linalg_det, whose LU factors and
pivots ember leaves unavailable, and aten.cumprod), compiled, against eager torch."""

from __future__ import annotations

import numpy as np
import torch

import ember
from ember.testing import assert_close


class DetCumprod(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.det(x), torch.cumprod(x, dim=-1), torch.cumprod(x.flatten(1), dim=0)


def test_det_and_cumprod_compiled():
    model = DetCumprod()
    x = torch.rand(3, 5, 5) + 0.5
    cm = ember.compile(model, (x,))
    for x in (torch.rand(3, 5, 5) + 0.5, torch.randn(3, 5, 5)):
        for k, (a, e) in enumerate(zip(cm(x), model(x))):
            assert_close(np.asarray(a), e.numpy(), 1e-4, 1e-5, f"output {k} vs eager torch")

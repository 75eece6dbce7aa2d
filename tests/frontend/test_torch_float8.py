"""torch's float8 types through the torch frontend: a module whose input, buffer and output are
float8 tensors, compiled and compared bit for bit with eager torch (whose conversions to float8
round to nearest even, saturating to float8_e4m3fn: the frontend clips before ember's cast)."""

from __future__ import annotations

import pytest
import torch

import ember


@pytest.mark.parametrize("src, dst", [(torch.float8_e4m3fn, torch.float8_e5m2),
                                      (torch.float8_e5m2, torch.float8_e4m3fn)])
def test_float8_module(src, dst):
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("w", torch.randn(24).to(dst))

        def forward(self, x):
            y = x.float() * 3 + self.w.float()
            return y.to(dst), y

    m = Scale()
    wide = torch.randn(5, 24) * 100
    wide[0, :4] = torch.tensor([float("inf"), -float("inf"), 1e6, -0.0])  # overflow: torch saturates to float8_e4m3fn
    x = wide.to(src)
    got, got_wide = ember.compile(m, (x,))(x)
    want, want_wide = m(x)
    assert got.dtype == dst
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    torch.testing.assert_close(got_wide, want_wide, rtol=0, atol=0, equal_nan=True)

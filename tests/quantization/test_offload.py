"""ember.quantize(..., offload=vta): a small quantized CNN (three convolutions, a residual add, a
linear head) with its int8 products on the simulated accelerator is bit-exact against the same
model on the CPU's int8 path, on fresh inputs; each offloaded product reports its cycles; an
accelerator that is not int8 is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

import ember
from ember.accel import vdla, vta
from ember.errors import ArgumentTypeError
from ember.quantization import device_reports

torch.manual_seed(1)


class TinyCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(32, 32, 1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        y = torch.relu(self.c2(x))
        y = torch.relu(self.c3(y) + y)
        return self.fc(y.mean((2, 3)))


@pytest.fixture(scope="module")
def models():
    model = TinyCNN().eval()
    calibration = [torch.randn(2, 3, 8, 8) for _ in range(2)]
    cpu = ember.quantize(model, (calibration[0],), calibration, progress=False)
    device = ember.quantize(model, (calibration[0],), calibration, progress=False, offload=vta)
    return cpu, device


def test_offloaded_products_bit_exact(models):
    cpu, device = models
    for seed in (2, 3):
        x = np.random.default_rng(seed).standard_normal((2, 3, 8, 8)).astype(np.float32)
        want, got = cpu(x), device(x)
        assert got.dtype == want.dtype == np.float32 and np.abs(want).max() > 0
        np.testing.assert_array_equal(got, want)


def test_offloaded_products_report_cycles(models):
    _, device = models
    device(np.random.default_rng(4).standard_normal((2, 3, 8, 8)).astype(np.float32))
    reports = device_reports(device)
    assert len(reports) == 4  # three convolutions and the head
    for what, report in reports.items():
        assert what.startswith("qgemm") and report.cycles > 0 and 0 < report.utilization <= 1, what
        assert report.dma_bytes


def test_offload_needs_an_int8_accelerator():
    model = TinyCNN().eval()
    x = torch.randn(2, 3, 8, 8)
    with pytest.raises(ArgumentTypeError, match="int8 accelerator"):
        ember.quantize(model, (x,), [x], progress=False, offload=vdla)
    with pytest.raises(ArgumentTypeError, match="int8 accelerator"):
        ember.quantize(model, (x,), [x], progress=False, offload="vta")

"""ember.quantize(..., offload=vta): a small quantized CNN (three convolutions, a residual add, a
linear head) with its int8 products on the simulated accelerator is bit-exact against the same
model on the CPU's int8 path, on fresh inputs; each offloaded product reports its cycles; one
product with rows and K to pad, a requantized epilogue and a tuned schedule against qgemm's
NumPy reference; an accelerator that is not int8 is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

import ember
from ember.accel import vdla, vta
from ember.accel.schedules import Tiles
from ember.errors import ArgumentTypeError
from ember.graph.core import Graph, TensorType
from ember.ops import get as get_op
from ember.ops.quantized import fold_weights
from ember.quantization import device_reports
from ember.quantization.offload import offload

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
    # (the CPU path whose float products the device's match: each convolution's output in NCHW)
    cpu = ember.quantize(model, (calibration[0],), calibration, progress=False, nhwc=False)
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


def test_device_product_against_reference():
    rng = np.random.default_rng(5)
    m, k, n = 5, 20, 32  # the device pads the rows to 16 and K to 32
    packed, _, _ = fold_weights(rng.integers(-128, 128, (k, n), dtype=np.int8))
    a = rng.integers(0, 256, (m, k), dtype=np.uint8)
    bias = rng.integers(-5000, 5000, n, dtype=np.int32)
    scale = rng.uniform(1e-4, 1e-3, n).astype(np.float32)
    attrs = {"out_dtype": "uint8", "zero_point": 7, "lo": 7, "hi": 255}
    g = Graph("one")
    ins = [g.add_input("a", TensorType((m, k), "uint8")), g.add_constant(packed, "w"), g.add_constant(bias, "b"),
           g.add_constant(scale, "s")]
    g.set_outputs(g.add_node("qgemm", ins, attrs, [TensorType((m, n), "uint8")], name="p").outputs)
    product = offload(g, vta, {(16, 32, 32): (Tiles(16, 32, 16), "inputs")})["p"]
    (got,) = product(a, packed, bias, scale)
    (want,) = get_op("qgemm").reference([a, packed, bias, scale], attrs)
    assert got.dtype == np.uint8 and len(np.unique(want)) > 10
    np.testing.assert_array_equal(got, want)
    assert product.report().stats["n_gemm"] == 2 * 2  # (16 x 32 x 32: two core tiles across, two deep)


def test_offload_needs_an_int8_accelerator():
    model = TinyCNN().eval()
    x = torch.randn(2, 3, 8, 8)
    with pytest.raises(ArgumentTypeError, match="int8 accelerator"):
        ember.quantize(model, (x,), [x], progress=False, offload=vdla)
    with pytest.raises(ArgumentTypeError, match="int8 accelerator"):
        ember.quantize(model, (x,), [x], progress=False, offload="vta")

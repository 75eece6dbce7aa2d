"""ember.quantize (ember/quantization): a small CNN quantized statically (batch norms folded,
a max pool, a grouped, a depthwise and a 1x1 convolution, a residual add, a linear head; chained in NHWC
uint8) and a small transformer layer quantized dynamically, each against torch's fp32 on fresh
inputs: ||out - ref|| / ||ref|| and top-1 agreement within stated bounds; the quantized CNN saves
and loads; each calibration method's range on known data; the errors of misuse."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

import ember
from ember.errors import ArgumentTypeError
from ember.quantization import error
from ember.quantization.calibrate import Observer
from ember.target import as_target
from ember.tir.expr import as_int
from ember.tir.functor import collect
from ember.tir.stmt import BlockRealize
from ember.tune.extract import extract_tasks

torch.manual_seed(0)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.c2, self.b2 = nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32)
        self.g = nn.Conv2d(32, 32, 3, padding=1, groups=2)
        self.dw, self.b3 = nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.BatchNorm2d(32)
        self.c3 = nn.Conv2d(32, 32, 1)
        self.fc = nn.Linear(32, 10)
        for b in (self.b1, self.b2, self.b3):
            b.running_mean.uniform_(-0.5, 0.5)
            b.running_var.uniform_(0.5, 2)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.b1(self.c1(x))), 3, 2, 1)
        y = torch.relu(self.g(torch.relu(self.b2(self.c2(x)))))
        y = torch.relu(self.c3(nn.functional.relu6(self.b3(self.dw(y)))) + y)
        return self.fc(y.mean((2, 3)))


@pytest.fixture(scope="module")
def cnn():
    model = SmallCNN().eval()
    calibration = [torch.randn(8, 3, 12, 12) for _ in range(3)]
    return model, ember.quantize(model, (calibration[0],), calibration, method="percentile", progress=True)


def test_static_cnn_against_fp32(cnn):
    model, q = cnn
    ops = [n.op for n in q.graph.nodes]
    # (the head's qgemm too; the grouped convolution's two groups a qconv each, gathering their patches)
    assert ops.count("qgemm") == 2 and ops.count("qconv") == 4 and ops.count("qdepthwise") == 1
    # NHWC uint8 rows from the input's quantization to the mean: a transpose at each end, the max
    # pool over uint8, the 1x1 convolution's qgemm reading them as they are
    assert ops.count("transpose") == 2 and "im2col" not in ops and "conv2d" not in ops
    (pool,) = [n for n in q.graph.nodes if n.op == "max_pool2d_nchwc"]
    assert pool.inputs[0].type.dtype == "uint8"
    x = torch.randn(8, 3, 12, 12)
    with torch.no_grad():
        ref = model(x)
    rel, top1 = error(q(x.numpy()), ref)
    print(f"small CNN, static int8 (percentile): relative error {rel:.2e}, top-1 agreement {top1:.2f}")
    assert rel < 3e-2 and top1 >= 0.75


def test_static_cnn_saves_and_loads(cnn, tmp_path):
    _, q = cnn
    x = np.random.default_rng().standard_normal((8, 3, 12, 12)).astype(np.float32)
    q.save(tmp_path / "int8")
    np.testing.assert_array_equal(ember.load(tmp_path / "int8")(x), q(x))
    if "avx512vnni" in as_target("c").features:  # (its kernels' vpdpbusd: a machine without VNNI refuses it)
        manifest = json.loads((tmp_path / "int8" / "manifest.json").read_text())
        assert "avx512vnni" in manifest["target"]["features"]


def test_static_cnn_tasks_count_integer_ops(cnn):
    """The tuner extracts the int8 products as tasks: their multiply-adds count as operations
    (two per point of the int32 accumulation), reported in GOP/s."""
    _, q = cnn
    products = []
    for task in extract_tasks(q):  # (a compiled model: its graph)
        acc = [r.block for r in collect(task.func.body, lambda s: isinstance(s, BlockRealize))
               if r.block.name == "qgemm_acc"]
        if acc:
            products.append(task)
            points = int(np.prod([as_int(iv.dom.extent) for iv in acc[0].iter_vars]))
            assert task.integer and task.rate_unit == "GOP/s" and task.flops >= 2 * points
    assert len(products) >= 5  # the qgemm of the head, the 1x1's, the qconvs


def test_a_fresh_process_finds_the_vnni_intrinsic():
    """A tuner's measuring process replays a qgemm task's own schedule, which tensorizes onto VNNI's
    intrinsic: importing the tasks registers it, not only importing qgemm's schedule."""
    code = ("import ember.tune.task\nfrom ember.tir.tensor_intrin import get_intrin\n"
            "print(get_intrin('dot_16x4_u8s8s32_vnni_native').name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=Path(ember.__file__).parents[1])
    assert out.stdout.strip() == "dot_16x4_u8s8s32_vnni_native", out.stderr[-2000:]


def test_dynamic_transformer_against_fp32():
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    model = nn.Sequential(layer, nn.Linear(32, 10)).eval()
    x = torch.randn(2, 8, 32)
    q = ember.quantize(model, (x,), dynamic=True)
    assert [n.op for n in q.graph.nodes].count("qgemm") >= 4  # QKV, the output projection, the MLP, the head
    if "avx512vnni" in as_target("c").features:  # each on vpdpbusd (its quantization fused before it)
        kernels = q.source.split("\nvoid ")
        assert sum("ember_vnni_native_dot16x4_update(" in k for k in kernels) >= 4
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        ref = model(x)
    rel, top1 = error(q(x.numpy()), ref)
    print(f"transformer layer, dynamic int8: relative error {rel:.2e}, top-1 agreement {top1:.2f}")
    assert rel < 3e-2 and top1 >= 0.85


def test_calibration_ranges():
    rng = np.random.default_rng(0)
    o = Observer()
    for _ in range(3):  # a ReLU's output: half zeros, a long upper tail
        o.update(np.maximum(rng.standard_normal(40000), 0) ** 2)
    lo, hi = o.range("minmax")
    assert lo == 0 and hi == pytest.approx(float(o.hi))
    assert 0 < o.range("percentile", 99.9)[1] < hi
    assert 0 < o.range("entropy")[1] < hi and o.range("entropy")[0] == 0
    assert o.sample.size <= 1 << 16


def test_misuse():
    model = SmallCNN().eval()
    x = torch.randn(1, 3, 8, 8)
    with pytest.raises(ArgumentTypeError, match="needs calibration_data"):
        ember.quantize(model, (x,))
    with pytest.raises(ArgumentTypeError, match="method must be one of"):
        ember.quantize(model, (x,), [x], method="mse")

"""The GPU's channels-last pass (ember.passes.channels_last) on imported half-precision graphs:
the convolutions of one group and the depthwise ones read and write NHWC, ReLU, residual adds
and per-channel scales follow them, pools take NHWC, a transpose sits only where NCHW is read
(the graph's input, the output), and the graph still computes the model (the NumPy references,
ember.ops.evaluate), also where what reads a convolution's NHWC output cares about the layout."""

import numpy as np
import pytest
import torch

from ember.frontend.torch import import_module
from ember.ops.evaluate import evaluate
from ember.passes.channels_last import channels_last
from ember.passes.dce import dce
from ember.passes.half_precision import bf16_activations, fp16_activations


class Chain(torch.nn.Module):
    """conv -> relu -> conv, a residual add, a per-channel scale, a depthwise conv, a pool."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.c = torch.nn.Conv2d(8, 16, 1)
        self.scale = torch.nn.Parameter(torch.rand(1, 8, 1, 1) + 0.5)

    def forward(self, x):
        y = torch.relu(self.a(x))
        y = torch.relu(self.b(y) + y) * self.scale
        return torch.nn.functional.max_pool2d(self.c(self.dw(y)), 2)


def _relative_error(got, want) -> float:
    return float(np.linalg.norm(got.astype(np.float32) - want) / np.linalg.norm(want))


def test_a_conv_relu_conv_chain_stays_nhwc_between_its_convolutions():
    torch.manual_seed(25)
    model = Chain().eval()
    x = torch.randn(1, 3, 10, 10)
    for convert in (fp16_activations, bf16_activations):
        graph = convert(import_module(model, (x,)))
        out = dce(channels_last(graph))  # (the pool's indices, which nothing reads, and their transpose)
        ops = [n.op for n in out.nodes]
        assert ops.count("conv2d_nhwc_gemm") == 3 and ops.count("depthwise_conv2d_nhwc") == 1
        assert "conv2d" not in ops
        assert "max_pool2d_nhwc" in ops and "max_pool2d" not in ops
        perms = [tuple(n.attrs["perm"]) for n in out.nodes if n.op == "transpose"]
        assert sorted(perms) == [(0, 2, 3, 1), (0, 3, 1, 2)]  # into NHWC at the input, back at the output
        scaled = next(n for n in out.nodes if n.op == "mul")
        assert any(out.constants.get(v.name) is not None and out.constants[v.name].shape == (8,)
                   for v in scaled.inputs)  # the per-channel scale as (C,), broadcast over NHWC's last axis
        assert [(v.name, v.type) for v in out.outputs] == [(v.name, v.type) for v in graph.outputs]
        fresh = torch.randn(1, 3, 10, 10)
        (got,) = evaluate(out, fresh.numpy())
        (before,) = evaluate(graph, fresh.numpy())
        assert _relative_error(got, model(fresh).detach().numpy()) < 1e-2
        assert _relative_error(got, before.astype(np.float32)) < 1e-2


def test_a_graph_without_convolutions_over_16_byte_runs_of_channels_is_left_as_it_is():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3), torch.nn.ReLU(), torch.nn.Conv2d(6, 8, 3)).eval()
    graph = import_module(model, (torch.randn(1, 3, 8, 8),))
    half = fp16_activations(graph)
    assert channels_last(graph) is graph and channels_last(half) is half  # 3 and 6 channels: no run of 4 or 8
    wider = import_module(torch.nn.Conv2d(4, 8, 3).eval(), (torch.randn(1, 4, 8, 8),))
    assert "conv2d_nhwc_gemm" in [n.op for n in channels_last(wider).nodes]  # 4 floats: 16 bytes


def test_a_convolution_that_is_the_graph_output_keeps_its_name():
    model = torch.nn.Conv2d(8, 8, 3, padding=1).eval()
    x = torch.randn(1, 8, 5, 5)
    graph = fp16_activations(import_module(model, (x,)))
    out = channels_last(graph)
    assert [v.name for v in out.outputs] == [v.name for v in graph.outputs]
    (got,) = evaluate(out, x.numpy())
    assert _relative_error(got, model(x).detach().numpy()) < 1e-2


FOLLOWERS = {  # what reads an NHWC convolution's output: layout-sensitive or broadcasting against other operands
    "concat over channels": lambda m, y, x, z: torch.cat([y, m.b(y)], 1),
    "concat over rows": lambda m, y, x, z: torch.cat([y, m.b(y)], 2),
    "add of an input (N, C, 1, 1)": lambda m, y, x, z: y + z,
    "add of an input of its shape": lambda m, y, x, z: y + x,
    "squeeze-excitation": lambda m, y, x, z: y * torch.sigmoid(m.b(y.mean((2, 3), keepdim=True))),
    "sum over channels": lambda m, y, x, z: y.sum(1, keepdim=True) + y,
    "max over channels": lambda m, y, x, z: y.amax(1),
    "mean over channels and rows": lambda m, y, x, z: y.mean((1, 2), keepdim=True) * y,
    "constant (1, 1, H, W)": lambda m, y, x, z: y * m.hw,
    "constant (W,)": lambda m, y, x, z: y + m.w,
    "where against a (C, 1, 1) constant": lambda m, y, x, z: torch.where(y > 0.1, y, m.p),
    "softmax over channels": lambda m, y, x, z: torch.softmax(y, 1),
    "broadcast of one row": lambda m, y, x, z: y * y[:, :, :1, :],
    "mean over rows and columns": lambda m, y, x, z: m.b(y).mean((2, 3)),
}


class Follower(torch.nn.Module):
    def __init__(self, follow):
        super().__init__()
        self.follow = follow
        self.a, self.b = torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 1)
        self.p = torch.nn.Parameter(torch.rand(8, 1, 1) + 0.5)
        self.hw, self.w = torch.nn.Parameter(torch.rand(1, 1, 6, 6)), torch.nn.Parameter(torch.rand(6))

    def forward(self, x, z):
        return self.follow(self, torch.relu(self.a(x)), x, z)


@pytest.mark.parametrize("name", FOLLOWERS)
def test_what_reads_an_nhwc_value_computes_what_it_did(name):
    """Concatenations, reductions over channel axes, broadcasts against operands without an NHWC
    form (inputs, constants of other shapes) after a float32 convolution made NHWC: the graph
    computes what it did (the references; the simulated GPU gave the same for each)."""
    torch.manual_seed(3)
    model = Follower(FOLLOWERS[name]).eval()
    x, z = torch.randn(2, 8, 6, 6), torch.randn(2, 8, 1, 1)
    graph = import_module(model, (x, z))
    out = channels_last(graph)
    assert "conv2d_nhwc_gemm" in [n.op for n in out.nodes]
    x, z = torch.randn(2, 8, 6, 6), torch.randn(2, 8, 1, 1)
    (got,) = evaluate(out, x.numpy(), z.numpy())
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x, z).numpy(), rtol=1e-5, atol=1e-5)

"""Models exported from PyTorch to ONNX (the TorchScript exporter, and torch.export's), imported by
ember and compared with onnxruntime: a small CNN and a small transformer block, with static and
symbolic batch sizes, on the reference evaluator and compiled."""

import io

import numpy as np
import onnx
import pytest
import torch
from onnx_check import check_onnx, run_onnxruntime
from torch import nn

import ember
from ember.testing import assert_close

RTOL, ATOL = 1e-4, 1e-4  # float32


class SmallCNN(nn.Module):
    """Conv-BN-ReLU stem, a residual block, a strided depthwise conv, pooling and a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6(),
                                   nn.Conv2d(8, 8, 3, padding=1))
        self.down = nn.Sequential(nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8), nn.Hardswish(),
                                  nn.Conv2d(8, 16, 1))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.1), nn.Linear(16, 10))

    def forward(self, x):
        x = self.pool(self.stem(x))
        x = torch.relu(x + self.block(x))
        x = nn.functional.interpolate(self.down(x), scale_factor=2.0, mode="nearest")
        return self.head(x).log_softmax(-1)


class TransformerBlock(nn.Module):
    """Pre-norm self-attention with a causal mask, then a GELU MLP; both residual."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        attn = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


def export(model: nn.Module, x: torch.Tensor, dynamo: bool, dynamic_batch: bool = False) -> onnx.ModelProto:
    if dynamo:
        shapes = ({0: torch.export.Dim("batch")},) if dynamic_batch else None
        return torch.onnx.export(model, (x,), dynamo=True, opset_version=18, dynamic_shapes=shapes,
                                 verbose=False).model_proto
    f = io.BytesIO()
    torch.onnx.export(model, (x,), f, dynamo=False, opset_version=17, input_names=["x"],
                      dynamic_axes={"x": {0: "batch"}} if dynamic_batch else None)
    return onnx.load_from_string(f.getvalue())


def randomize_batch_norms(model: nn.Module) -> nn.Module:
    """Running statistics that are not 0 and 1, so that folding them wrongly shows."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return model.eval()


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_small_cnn(dynamo):
    model = randomize_batch_norms(SmallCNN())
    x = torch.randn(2, 3, 16, 16)
    graph = check_onnx(export(model, x, dynamo), [x.numpy()], RTOL, ATOL)
    with torch.no_grad():
        torch_out = model(x).numpy()
    assert graph.outputs[0].shape == torch_out.shape


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_transformer_block(dynamo):
    model = TransformerBlock().eval()
    x = torch.randn(2, 8, 32)
    check_onnx(export(model, x, dynamo), [x.numpy()], RTOL, ATOL)


MODELS = pytest.mark.parametrize("make, shape", [(SmallCNN, (3, 16, 16)), (TransformerBlock, (8, 32))],
                                 ids=["cnn", "transformer"])


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@MODELS
def test_dynamic_batch(make, shape, dynamo):
    """A symbolic batch: the shape arithmetic the exporters emit around it folds to symbolic shapes."""
    model = randomize_batch_norms(make())
    onnx_model = export(model, torch.randn(2, *shape), dynamo, dynamic_batch=True)
    for batch in (1, 3):
        graph = check_onnx(onnx_model, [np.random.randn(batch, *shape).astype("float32")], RTOL, ATOL)
    assert isinstance(graph.inputs[0].shape[0], str)


@MODELS
def test_compiled(make, shape):
    """ember.compile of the ONNX model, called with two batch sizes."""
    model = randomize_batch_norms(make())
    proto = export(model, torch.randn(2, *shape), dynamo=False, dynamic_batch=True)
    compiled = ember.compile(proto)
    for batch in (1, 3):
        x = np.random.randn(batch, *shape).astype("float32")
        assert_close(compiled(x), run_onnxruntime(proto, [x])[0], RTOL, ATOL, f"batch {batch} vs onnxruntime")


def test_exported_model_matches_torch():
    """The chain's other end: ember's import of the exported CNN agrees with torch itself."""
    from onnx_check import run_ember

    from ember.frontend.onnx import import_onnx

    model = randomize_batch_norms(SmallCNN())
    x = torch.randn(1, 3, 16, 16)
    graph = import_onnx(export(model, x, dynamo=False))
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(run_ember(graph, [x.numpy()])[0], expected, rtol=RTOL, atol=ATOL)

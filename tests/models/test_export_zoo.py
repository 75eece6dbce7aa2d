"""Small CNN and transformer models, each compiled two ways: exported with torch.onnx.export
(dynamo) and compiled from the ONNX bytes, and compiled from the module through torch.export;
both against torch eager on fresh random inputs. (torch.cond, LSTM and GRU have their own files
in tests/frontend.)"""

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ember

RTOL, ATOL = 1e-4, 1e-5


class UNet(nn.Module):
    """Two levels: conv, max-pool down, conv, then up by ConvTranspose2d, by bilinear
    nn.Upsample and by nearest F.interpolate (both Resize), concatenated with the skip
    connection."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
        self.mid = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.resize = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.dec = nn.Conv2d(16, 2, 1)

    def forward(self, x):
        skip = self.enc(x)
        mid = self.mid(F.max_pool2d(skip, 2))
        nearest = F.interpolate(mid[:, 4:], scale_factor=2, mode="nearest")
        return self.dec(torch.cat([skip, self.up(mid), self.resize(mid)[:, :4], nearest], dim=1))


class ConvNeXtBlock(nn.Module):
    """Depthwise 7x7 conv, LayerNorm over channels (channels last by permute), pointwise MLP
    with GELU, layer scale, residual."""

    def __init__(self, dim=8):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.norm(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


class ViT(nn.Module):
    """Patch-embedding conv, class token, position embedding, two pre-norm encoder layers with
    nn.MultiheadAttention, a linear head on the class token."""

    def __init__(self, dim=16, heads=2, patch=4, image=8, classes=5):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim))
        self.layers = nn.ModuleList(
            nn.ModuleDict(
                {
                    "norm1": nn.LayerNorm(dim),
                    "attn": nn.MultiheadAttention(dim, heads, batch_first=True),
                    "norm2": nn.LayerNorm(dim),
                    "mlp": nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim)),
                }
            )
            for _ in range(2)
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for layer in self.layers:
            h = layer["norm1"](x)
            x = x + layer["attn"](h, h, h, need_weights=False)[0]
            x = x + layer["mlp"](layer["norm2"](x))
        return self.head(self.norm(x[:, 0]))


class GPT(nn.Module):
    """Token and position embeddings, two pre-norm blocks of hand-written causal self-attention
    (a lower-triangular mask filled with -inf before the softmax) and an MLP, a linear head over the vocabulary."""

    def __init__(self, vocab=32, dim=16, heads=2, context=8):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.register_buffer("mask", torch.tril(torch.ones(context, context, dtype=torch.bool)))
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "ln1": nn.LayerNorm(dim),
                    "qkv": nn.Linear(dim, 3 * dim),
                    "proj": nn.Linear(dim, dim),
                    "ln2": nn.LayerNorm(dim),
                    "mlp": nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)),
                }
            )
            for _ in range(2)
        )
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def attend(self, block, x):
        b, t, d = x.shape
        q, k, v = block["qkv"](block["ln1"](x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5
        scores = scores.masked_fill(~self.mask[:t, :t], float("-inf"))
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        return block["proj"](y)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t))
        for block in self.blocks:
            x = x + self.attend(block, x)
            x = x + block["mlp"](block["ln2"](x))
        return self.head(self.ln(x))


class GPTFused(GPT):
    """The same GPT with F.scaled_dot_product_attention(is_causal=True) for the attention."""

    def attend(self, block, x):
        b, t, d = x.shape
        q, k, v = block["qkv"](block["ln1"](x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return block["proj"](y.transpose(1, 2).reshape(b, t, d))


def _unet_inputs():
    return (torch.randn(2, 3, 8, 8),)


def _convnext_inputs():
    return (torch.randn(2, 8, 8, 8),)


def _vit_inputs():
    return (torch.randn(2, 3, 8, 8),)


def _gpt_inputs():
    return (torch.randint(0, 32, (2, 8)),)


MODELS = {
    "unet": (UNet, _unet_inputs),
    "convnext": (ConvNeXtBlock, _convnext_inputs),
    "vit": (ViT, _vit_inputs),
    "gpt": (GPT, _gpt_inputs),
    "gpt_fused": (GPTFused, _gpt_inputs),
}
# ONNX operators each export must contain, so the test keeps exercising what the model is for.
ONNX_OPS = {
    "unet": {"ConvTranspose", "Resize", "MaxPool", "Concat"},
    "convnext": {"Conv", "LayerNormalization", "Gelu", "Transpose"},
    "vit": {"Conv", "Concat", "LayerNormalization", "Softmax", "MatMul"},
    "gpt": {"Gather", "Where", "Softmax", "MatMul", "LayerNormalization"},
    "gpt_fused": {"Gather", "Softmax", "MatMul", "LayerNormalization"},
}
PATHS = ("onnx", "torch_export")


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request):
    torch.manual_seed(0)
    cls, inputs = MODELS[request.param]
    return request.param, cls().eval(), inputs


@pytest.fixture(scope="module")
def onnx_file(model, tmp_path_factory):
    name, module, inputs = model
    path = tmp_path_factory.mktemp("onnx") / f"{name}.onnx"
    torch.onnx.export(module, inputs(), path, dynamo=True, verbose=False)
    return path


@pytest.fixture(scope="module", params=PATHS)
def compiled(request, model):
    _, module, inputs = model
    if request.param == "onnx":
        return ember.compile(request.getfixturevalue("onnx_file"))
    return ember.compile(module, inputs())


@pytest.mark.parametrize("trial", range(2))
def test_matches_torch_eager(model, compiled, trial):
    _, module, inputs = model
    torch.manual_seed(100 + trial)
    args = inputs()
    with torch.no_grad():
        expected = module(*args)
    got = compiled(*[a.numpy() for a in args])
    got = got[0] if isinstance(got, list | tuple) else got
    np.testing.assert_allclose(got, expected.numpy(), rtol=RTOL, atol=ATOL)


def test_onnx_export_has_the_model_operators(model, onnx_file):
    ops = {node.op_type for node in onnx.load(onnx_file).graph.node}
    assert ONNX_OPS[model[0]] <= ops, ONNX_OPS[model[0]] - ops

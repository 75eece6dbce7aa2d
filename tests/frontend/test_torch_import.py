"""The PyTorch frontend: every family of core ATen operators that CNNs and transformers produce,
small zoo-like models (ResNet block, MobileNetV2 block, BERT, GPT-2, MLP), dynamic shapes,
constant folding, and the errors (every unsupported operator at once, with where it came from).

Each module returns many results so that one torch.export covers a whole family; inputs are
fresh random data; outputs must match torch eager within rtol = atol = 1e-4 (float32).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch_check import check_import, expected_outputs, run_ember

from ember.compiler import compile_graph
from ember.frontend.torch import import_module, import_program
from ember.frontend.torch.module import import_views
from ember.frontend.torch.node import FrontendError
from ember.ops import UnsupportedOpError
from ember.testing import assert_close


class Fn(nn.Module):
    """A module of a function: Fn(lambda x: ...)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


# -- elementwise ---------------------------------------------------------------------------------
def test_activations():
    g = check_import(Fn(lambda x: (
        F.relu(x), F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x), torch.sigmoid(x), torch.tanh(x),
        F.hardswish(x), F.hardsigmoid(x), F.leaky_relu(x, 0.2), F.relu6(x), F.hardtanh(x, -0.5, 0.5),
        x.clamp(-0.3, 0.4), x.clamp(min=0.1), F.elu(x, 0.7), F.softplus(x, 2.0, 5.0))), torch.randn(2, 3, 8) * 4)
    assert {"relu", "gelu", "silu", "hardswish", "hardsigmoid", "leaky_relu", "clip", "elu", "softplus"} <= set(
        g.op_histogram())


def test_unary_math():
    check_import(Fn(lambda x: (
        torch.exp(x), torch.log(x.abs() + 1), torch.sqrt(x.abs()), torch.rsqrt(x.abs() + 1), -x, x.abs(),
        torch.reciprocal(x + 10), torch.sin(x), torch.cos(x), torch.erf(x), torch.floor(x), torch.ceil(x),
        torch.round(x), torch.sign(x), torch.expm1(x), torch.log1p(x.abs()))), torch.randn(3, 7) * 3)


def test_binary_arithmetic_and_promotion():
    x, y = torch.randn(2, 3, 4), torch.randn(3, 4)
    i = torch.randint(-20, 20, (2, 3, 4))
    check_import(Fn(lambda x, y, i: (
        x + y, torch.sub(x, y, alpha=2.5), x * y, x / (y.abs() + 1), x + 1.5, 2 - x, x ** 2, torch.pow(x.abs(), y),
        torch.maximum(x, y), torch.minimum(x, y), i + 1.5, i * 2, i // 3, i % 3, i / 2, x * i,
        torch.div(i, 4, rounding_mode="floor"), torch.div(x, y.abs() + 0.5, rounding_mode="trunc"), 2 ** x,
        torch.remainder(x, y.abs() + 1), x.clamp(min=y, max=y + 1))), x, y, i)


def test_comparisons_logic_where():
    x, y = torch.randn(2, 3, 4), torch.randn(3, 4)
    i = torch.randint(-3, 3, (2, 3, 4))
    check_import(Fn(lambda x, y, i: (
        x > y, x <= 0.5, x == y, x != 0.25, i == 2, i < x, x >= y, x <= y, x != y, torch.where(x > 0, x, y),
        torch.where(x > 0, x, 0.0), torch.logical_and(x > 0, y > 0), torch.logical_or(x > 0, i > 0),
        (x > 0) & (y < 0), (x > 0) | (y < 0), ~(x > 0), torch.logical_xor(x > 0, y > 0),
        x.masked_fill(x < 0, -1.0))), x, y, i)


def test_casts_and_copies():
    x, i = torch.randn(4, 5) * 10, torch.randint(0, 9, (4, 5))
    check_import(Fn(lambda x, i: (i.float(), x.long(), (x > 0).float(), x.to(torch.float64), x.clone(),
                                  x.contiguous() + 1)), x, i)


# -- reductions, softmax, normalization ----------------------------------------------------------
def test_reductions():
    check_import(Fn(lambda x: (
        x.sum(1), x.sum((0, 2), keepdim=True), x.mean(-1), x.mean(), x.amax(1), x.amin((1, 2)), x.max(), x.min(),
        x.var(1), torch.var(x, 2, unbiased=False, keepdim=True), x.std(1), x.prod(2), x.argmax(1), x.argmin(),
        *x.max(1), *x.min(2, keepdim=True), (x > 0).any(1), (x > 0).any(), (x > 0).all(), (x > 0).sum(1),
        x.cumsum(1), (x > 0).cumsum(-1), x.prod(), *torch.var_mean(x, 1))), torch.randn(3, 5, 6))


def test_softmax():
    check_import(Fn(lambda x: (x.softmax(-1), x.log_softmax(1), F.softmax(x, 0))), torch.randn(3, 5, 6) * 5)


def test_normalizations():
    class Norms(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.ln_plain, self.ln2 = nn.LayerNorm(8), nn.LayerNorm(8, elementwise_affine=False), nn.LayerNorm(
                (4, 8))
            self.bn, self.bn_plain = nn.BatchNorm2d(4), nn.BatchNorm2d(4, affine=False)
            self.gn, self.inorm, self.rms = nn.GroupNorm(2, 4), nn.InstanceNorm2d(4, affine=True), nn.RMSNorm(8)
            for m in (self.bn, self.bn_plain):
                m.running_mean.normal_()
                m.running_var.uniform_(0.5, 2)
            for p in self.parameters():
                p.data.normal_()

        def forward(self, x):
            return (self.ln(x), self.ln_plain(x), self.ln2(x), self.bn(x), self.bn_plain(x), self.gn(x),
                    self.inorm(x), self.rms(x))

    g = check_import(Norms(), torch.randn(2, 4, 4, 8))
    assert {"layer_norm", "batch_norm", "group_norm", "instance_norm", "rms_norm"} <= set(g.op_histogram())


# -- convolution, matrix products, pooling, resizing, attention ----------------------------------
def test_convolutions():
    class Convs(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv1d(4, 6, 3, padding=1)
            self.c2 = nn.Conv2d(4, 8, 3, stride=2, padding=1, bias=False)
            self.dil = nn.Conv2d(4, 4, 3, padding=2, dilation=2, groups=2)
            self.dw = nn.Conv2d(4, 4, 3, padding=1, groups=4)
            self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)

        def forward(self, x):
            return self.c1(x.flatten(2)), self.c2(x), self.dil(x), self.dw(x), self.up(x)

    g = check_import(Convs(), torch.randn(1, 4, 6, 6))
    assert {"conv1d", "conv2d", "conv_transpose2d"} <= set(g.op_histogram())


def test_linear_and_matmul():
    class Products(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.fc_plain = nn.Linear(8, 5), nn.Linear(8, 3, bias=False)

        def forward(self, x2, x3, a, b):
            return (self.fc(x2), self.fc(x3), self.fc_plain(x3), a @ b, torch.bmm(a, b), x2 @ x2.t(),
                    torch.matmul(x3, self.fc.weight.t()), torch.addmm(self.fc.bias, x2, self.fc.weight.t()))

    g = check_import(Products(), torch.randn(4, 8), torch.randn(2, 4, 8), torch.randn(3, 4, 6), torch.randn(3, 6, 5))
    assert "gemm" in g.op_histogram()


def test_the_graph_keeps_its_weights_when_the_module_changes():
    """import_module's graph holds copies of its own (the import takes views of the module's
    tensors, a linear layer's weight transposed too, and import_module copies them)."""
    model = nn.Sequential(nn.Linear(8, 5), nn.ReLU(), nn.Linear(5, 1), nn.ReLU(), nn.Linear(1, 3)).eval()
    g = import_module(model, (torch.randn(4, 8),))
    before = {k: v.copy() for k, v in g.constants.items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    assert before.keys() == g.constants.keys() and len(before) == 6
    for k, v in before.items():
        assert (g.constants[k] == v).all(), k


def test_import_views_takes_the_weights_where_they_lie():
    """The graph ember.compile imports views the module's weights, a linear layer's transposed too
    (a weight is not held twice while a model compiles), read-only: a pass cannot write into the
    module."""
    model = nn.Sequential(nn.Linear(8, 5), nn.ReLU(), nn.Linear(5, 1)).eval()
    g = import_views(model, (torch.randn(4, 8),))
    params = [p.detach().numpy() for p in model.parameters()]
    assert len(g.constants) == len(params)
    for data in g.constants.values():
        assert not data.flags.writeable
        assert sum(np.shares_memory(data, p) for p in params) == 1
    (w,) = (g.constants[n.inputs[1].name] for n in g.nodes if n.op == "gemm" and n.inputs[1].shape == (8, 5))
    np.testing.assert_array_equal(w, model[0].weight.detach().numpy().T)


def test_pooling_and_resize():
    check_import(Fn(lambda x: (
        F.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 2, ceil_mode=True), F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
        F.avg_pool2d(x, 2), F.adaptive_avg_pool2d(x, 1), F.adaptive_avg_pool2d(x[:, :, :6, :6], 3),
        x.mean((2, 3), keepdim=True), F.interpolate(x, scale_factor=2, mode="nearest"),
        F.interpolate(x, size=(9, 5), mode="bilinear", align_corners=False),
        F.interpolate(x, size=(4, 10), mode="bilinear", align_corners=True))), torch.randn(1, 3, 7, 7))


def test_attention_and_embedding():
    q, k, v = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 4)
    keep = torch.rand(5, 6) > 0.3
    keep[:, 0] = True
    bias = torch.randn(2, 1, 5, 6)
    ids = torch.randint(0, 10, (2, 5))
    emb = nn.Embedding(10, 4)
    check_import(Fn(lambda q, k, v, keep, bias, ids: (
        F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, attn_mask=keep),
        F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3),
        F.scaled_dot_product_attention(q, k[:, :, :5], v[:, :, :5], is_causal=True), emb(ids))),
        q, k, v, keep, bias, ids)


# -- shape and data movement ---------------------------------------------------------------------
def test_shape_ops():
    x, idx = torch.randn(2, 6, 4), torch.tensor([3, 0, 5, 3])
    check_import(Fn(lambda x, idx: (
        x.reshape(12, 4), x.view(2, -1), x.flatten(), x.permute(2, 0, 1), x.transpose(1, 2), x[0].t(),
        x[:, :1].expand(2, 5, 4), torch.cat([x, x * 2], 1), *torch.split(x, [2, 4], 1), *x.chunk(3, 1),
        x[:, 1:5:2], x[..., -1], x[1], x[:, :, 2:], x.unsqueeze(1), x[:, :1].squeeze(1), x[:, idx], x[idx[:2] % 2],
        x[idx[:2] % 2, idx[:2] - 6],
        torch.index_select(x, 2, idx[:2]), F.pad(x, (1, 2, 0, 3), value=0.5), x.repeat(2, 1, 3), *x.unbind(0))),
        x, idx)


# -- whole models --------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class TinyResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        self.layers = nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 16, 2))
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, c, expand):
        super().__init__()
        h = c * expand
        self.block = nn.Sequential(
            nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(inplace=True),
            nn.Conv2d(h, h, 3, 1, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(inplace=True),
            nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.block(x)


class TinyMobileNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6(inplace=True),
                                      InvertedResidual(8, 4), InvertedResidual(8, 6))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(8, classes))

    def forward(self, x):
        return self.classifier(self.features(x).mean([2, 3]))


def _randomize_batch_norms(model: nn.Module) -> nn.Module:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.normal_(0, 0.1)
    return model


def test_tiny_resnet():
    g = check_import(_randomize_batch_norms(TinyResNet()), torch.randn(2, 3, 32, 32))
    assert {"conv2d", "batch_norm", "max_pool2d", "gemm"} <= set(g.op_histogram())


def test_tiny_mobilenet():
    g = check_import(_randomize_batch_norms(TinyMobileNet()), torch.randn(1, 3, 32, 32))
    assert g.op_histogram()["clip"] == 5


def test_mlp():
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    g = check_import(mlp, torch.randn(3, 16))
    assert g.op_histogram() == {"gemm": 3, "relu": 2}


def test_bert():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, vocab_size=100, max_position_embeddings=32)
    model = transformers.BertModel(config)
    ids = torch.randint(0, 100, (2, 8))
    g = check_import(model, ids)
    assert g.op_histogram()["scaled_dot_product_attention"] == 2
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0
    check_import(model, ids, mask)  # a padding mask is a run-time input


def test_gpt2():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=32, use_cache=False)
    g = check_import(transformers.GPT2Model(config), torch.randint(0, 100, (2, 8)))
    # the causal mask is computed from constants only: folded at import, nothing of it runs
    assert set(g.op_histogram()) <= {"embedding", "add", "layer_norm", "reshape", "gemm", "split", "transpose",
                                     "scaled_dot_product_attention", "mul", "pow", "tanh"}


def test_fully_decomposed_programs():
    """import_program also takes programs lowered by torch's default table (no operator kept
    whole): native_layer_norm, bmm, _softmax, instance norm as batch statistics, ..."""
    transformers = pytest.importorskip("transformers")

    class Composites(nn.Module):
        def __init__(self):
            super().__init__()
            self.gn, self.inorm, self.rms = nn.GroupNorm(2, 4), nn.InstanceNorm2d(4), nn.RMSNorm(8)
            self.fc = nn.Linear(8, 3)

        def forward(self, x):
            return (self.gn(x), self.inorm(x), self.rms(x), F.silu(x), F.hardswish(x), F.softplus(x), self.fc(x),
                    F.layer_norm(x, (8,)), x @ x.transpose(-1, -2),
                    F.scaled_dot_product_attention(x, x, x, is_causal=True))

    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                     vocab_size=100, max_position_embeddings=32)
    ids, mask = torch.randint(0, 100, (2, 8)), torch.ones(2, 8, dtype=torch.int64)
    mask[0, 6:] = 0
    for model, inputs in [(Composites(), (torch.randn(2, 4, 8, 8),)), (transformers.BertModel(config), (ids, mask))]:
        graph = import_program(torch.export.export(model.eval(), inputs).run_decompositions())
        for k, (a, e) in enumerate(zip(run_ember(graph, inputs), expected_outputs(model, inputs))):
            assert_close(a, e, 1e-4, 1e-4, f"output {k} of {type(model).__name__}")


# -- dynamic shapes, folding ---------------------------------------------------------------------
def test_dynamic_batch():
    class Shifted(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = nn.Sequential(nn.Linear(16, 8), nn.GELU(), nn.Linear(8, 4))

        def forward(self, x):
            return self.mlp(x) + torch.full((x.shape[0], 1), 2.0)  # full of a symbolic size

    model = Shifted().eval()
    batch = torch.export.Dim("batch", min=2, max=64)
    g = import_module(model, (torch.randn(3, 16),), dynamic_shapes=({0: batch},))
    assert g.inputs[0].type.shape == ("batch", 16) and g.outputs[0].type.shape == ("batch", 4)
    compiled = compile_graph(g)  # compiled: the reference evaluator cannot expand to a symbolic size
    for n in (2, 7):
        x = torch.randn(n, 16)
        (want,) = expected_outputs(model, [x])
        assert_close(compiled(x.numpy()), want, 1e-4, 1e-4, f"batch {n}")


def test_dynamic_linear_over_three_dims():
    fc = nn.Linear(16, 4).eval()
    g = import_module(fc, (torch.randn(3, 5, 16),), dynamic_shapes=({0: torch.export.Dim("batch", max=64)},))
    assert g.outputs[0].type.shape == ("batch", 5, 4) and "matmul" in g.op_histogram()
    x = torch.randn(6, 5, 16)
    assert_close(run_ember(g, [x])[0], expected_outputs(fc, [x])[0], 1e-4, 1e-4, "linear")


def test_size_expressions_are_dimension_expressions():
    class Flat(nn.Module):
        def forward(self, x):
            return x.reshape(-1, 16) * 2  # (5 * batch, 16): a polynomial of the symbol (ember.dims)

    g = import_module(Flat(), (torch.randn(3, 5, 16),), dynamic_shapes=({0: torch.export.Dim("batch", max=64)},))
    assert g.outputs[0].shape == ("5*batch", 16)


def test_constant_subgraphs_are_folded():
    class Positions(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.tensor([0.5, 2.0, 3.0]))

        def forward(self, x):
            pos = torch.arange(x.shape[1]).float() * self.scale.sum() + torch.ones(x.shape[1]).cumsum(0)
            return x + pos

    g = check_import(Positions(), torch.randn(2, 5))
    assert g.op_histogram() == {"add": 1}


# -- errors --------------------------------------------------------------------------------------
def test_unsupported_ops_are_all_listed_with_their_source():
    class Spectral(nn.Module):
        def forward(self, x):
            y = torch.fft.rfft(x).abs()  # no ember operator
            z = torch.flip(x, [1])  # none either
            return y.sum() + torch.special.i0(z).sum()  # i0: none; abs, sum and add are fine

    with pytest.raises(UnsupportedOpError) as info:
        import_module(Spectral(), (torch.randn(2, 8),))
    msg = str(info.value)
    assert [op for op, _ in info.value.missing] == ["aten._fft_r2c.default", "aten.flip.default",
                                                     "aten.i0.default"], msg
    assert "node flip" in msg and "test_torch_import.py:" in msg and "z = torch.flip(x, [1])" in msg, msg


def test_unavailable_outputs_are_reported_when_used():
    with pytest.raises(UnsupportedOpError, match="saved mean of native_layer_norm"):
        import_module(Fn(lambda x: torch.ops.aten.native_layer_norm(x, [4], None, None, 1e-5)[1]),
                      (torch.randn(2, 4),))


def test_unsupported_variant_names_the_reason():
    with pytest.raises(UnsupportedOpError, match="boolean mask"):
        import_module(Fn(lambda x, m: x[m]), (torch.randn(4), torch.rand(4) > 0.5))


def test_non_tensor_output_is_refused():
    with pytest.raises(FrontendError, match="tensors"):
        import_module(Fn(lambda x: (x + 1, 3)), (torch.randn(2),))


def test_non_tensor_input_is_refused():
    class Scaled(nn.Module):
        def forward(self, x, k: float):
            return x * k

    with pytest.raises(FrontendError, match="input k is float, not a tensor"):
        import_module(Scaled(), (torch.randn(2), 3.0))


def test_example_inputs_that_share_memory_are_traced_as_distinct_inputs():
    """torch.export traces one tensor given twice as one input: compiled from (x, c, c), the model
    must still read its third argument where it is given another tensor."""
    import ember

    class Mix(nn.Module):
        def forward(self, x, a, b):
            return x + a * 2 + b * 3

    x, c, w = torch.randn(4), torch.randn(4), torch.randn(2, 4)
    for example in ((x, c, c), (x, w[0], w[1])):  # the same tensor twice; two views of one tensor
        cm = ember.compile(Mix(), example)
        a, b = torch.randn(4), torch.randn(4)
        assert_close(cm(x, a, b).numpy(), Mix()(x, a, b).numpy(), 1e-6, 1e-6, "aliased example inputs")

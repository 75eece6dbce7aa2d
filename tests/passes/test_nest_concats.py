"""nest_concats, and what it is for: a dense block in small (each layer a batch norm, ReLU and
convolution over the concat of every feature before it), its concats nested, in the blocked
layout and written in place (each convolution writes its slab, no kernel concatenates), checked
against torch; concats of other inputs left alone."""

import numpy as np
import pytest
import torch
from pass_check import check_same, ops
from torch import nn

import ember
from ember.frontend.torch import import_module
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.nest_concats import nest_concats


class DenseBlock(nn.Module):
    """torchvision's DenseNet block: layer k reads concat(x, f1, ..., f(k-1)); the block returns
    the concat of all of them, here through a transition's average pool."""

    def __init__(self, channels=16, growth=16, layers=3):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.BatchNorm2d(channels + k * growth), nn.ReLU(),
                          nn.Conv2d(channels + k * growth, growth, 3, padding=1, bias=False))
            for k in range(layers))

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            features.append(layer(torch.cat(features, 1)))
        return nn.functional.avg_pool2d(torch.relu(torch.cat(features, 1)), 2)


@pytest.fixture(scope="module")
def block():
    torch.manual_seed(0)
    model = DenseBlock().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    return model, import_module(model, (torch.randn(1, 16, 6, 6),))


def test_each_concat_takes_the_one_before(block):
    g = block[1]
    out = nest_concats(g)
    concats = [n for n in out.nodes if n.op == "concat"]
    assert [len(n.inputs) for n in concats] == [2, 2, 2]
    for inner, outer in zip(concats, concats[1:]):
        assert outer.inputs[0] is inner.outputs[0]
    check_same(g, out)


def test_a_dense_block_is_written_in_place(block):
    model, g = block
    cm = ember.compile(g)
    assert not any("concat" in k.ops for k in cm.kernels)  # every concat a view of one buffer
    # each convolution writes its slab of that buffer, blocked
    slabs = {t.name: t.shares for t in cm.plan.tensors if t.name.startswith("conv")}  # convolution, conv2d
    assert len(slabs) == 3 and all(name.endswith("c") for name in slabs) and len(set(slabs.values())) == 1
    assert None not in slabs.values()
    for _ in range(2):
        x = torch.randn(1, 16, 6, 6)
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(np.asarray(cm(x.numpy())), want, rtol=1e-4, atol=1e-4)


def test_other_concats_are_left_alone():
    g = Graph("concats")
    a, b, c = (g.add_input(name, TensorType((1, 4, 3))) for name in "abc")
    (ab,) = add_op(g, "concat", [a, b], {"axis": 1})
    (other,) = add_op(g, "concat", [a, b, c], {"axis": 2})  # another axis
    (reordered,) = add_op(g, "concat", [b, a, c], {"axis": 1})  # not a prefix
    g.set_outputs([ab, other, reordered])
    assert nest_concats(g) is g and ops(g) == ["concat"] * 3

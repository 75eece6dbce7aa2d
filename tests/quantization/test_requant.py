"""fold_requantization (ember/quantization/requant.py): a MobileNetV2-like block's int8 graph (a
convolution with ReLU6, a depthwise one, a projection with a residual add, a 1x1 convolution, a
linear head) with
each quantization folded into the product before it, against the unfolded graph on fresh
inputs by NumPy's reference evaluator: the uint8 codes of every convolution agree but for a
rare tie of rint, and the outputs within a small share of their range; the folds leave no
multiplication by a reciprocal scale or int32 clip after a product."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from ember.frontend import import_model
from ember.ops.evaluate import evaluate
from ember.passes.pipeline import TARGET_PASSES, run_pipeline
from ember.passes.rewrite import Rewriter
from ember.quantization.requant import fold_requantization
from ember.quantization.rewrite import products, quantize_products

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.dw, self.b2 = nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.BatchNorm2d(16)
        self.pw, self.out = nn.Conv2d(16, 16, 1), nn.Conv2d(16, 16, 1)
        self.fc = nn.Linear(16, 10)
        for b in (self.b1, self.b2):
            b.running_mean.uniform_(-0.5, 0.5)
            b.running_var.uniform_(0.5, 2)

    def forward(self, x):
        x = nn.functional.relu6(self.b1(self.c1(x)))
        y = self.pw(nn.functional.relu6(self.b2(self.dw(x)))) + x
        return self.fc(torch.relu(self.out(y)).mean((2, 3)))


@pytest.fixture(scope="module")
def graphs():
    x = torch.randn(1, 3, 8, 8)
    graph = run_pipeline(import_model(Block().eval(), (x,), caller="test"), 2, disabled_passes=TARGET_PASSES)
    ranges = {n.inputs[0].name: (-2.5, 5.0) for n in products(graph)}
    plain = quantize_products(graph, ranges)
    return plain, fold_requantization(plain)


def _reciprocal_scalings(graph) -> int:
    """Nodes that round a multiplication: the quantizations left unfolded."""
    return sum(n.op == "round" and n.inputs[0].node is not None and n.inputs[0].node.op == "mul" for n in graph.nodes)


def test_folds_every_quantization_after_a_product(graphs):
    plain, folded = graphs
    # (the input's and the mean's quantizations stay; the three after products fold, the
    # residual add's through its dequantized operand)
    assert (_reciprocal_scalings(plain), _reciprocal_scalings(folded)) == (5, 2)
    int_clips = [n for n in folded.nodes if n.op == "clip" and n.outputs[0].type.dtype == "int32"]
    assert len(int_clips) == 2


def test_folded_matches_unfolded(graphs):
    plain, folded = graphs
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
        (a,), (b,) = evaluate(plain, x), evaluate(folded, x)
        assert np.abs(a - b).max() <= 0.02 * np.abs(a).max(), np.abs(a - b).max()
        codes = [_codes(g, x) for g in (plain, folded)]
        assert len(codes[0]) == len(codes[1]) == 5
        for p, f in zip(*codes):
            assert np.abs(p.astype(int) - f.astype(int)).max() <= 1
            assert (p == f).mean() >= 0.99


def _codes(graph, x) -> list[np.ndarray]:
    """The uint8 operand of each int8 product, in graph order."""
    rw = Rewriter(graph)
    for node in graph.nodes:
        rw.copy(node, rw.inputs(node))
    rw.new.set_outputs([rw.value(n.inputs[0]) for n in graph.nodes if n.op in ("qgemm", "qdepthwise", "qconv")])
    return evaluate(rw.new, x)

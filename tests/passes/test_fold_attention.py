"""Attention written as matmul, scale, mask and softmax becomes one scaled_dot_product_attention
(ember/passes/fold_attention.py): a BERT-style block (head split, scores divided by sqrt(d), an
additive mask, head merge) from torch and from its ONNX export compiles to the fused kernel and
matches torch; the variants (a multiplied scale, the mask on the left, no scale, no mask) fold;
the patterns that must not fold are left alone."""

from __future__ import annotations

import io
import math
import warnings

import numpy as np
import pytest
import torch
from pass_check import check_same, ops

import ember
from ember.frontend import import_model
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.fold_attention import fold_attention
from ember.passes.pipeline import run_pipeline
from ember.testing import random_array

SDPA = "scaled_dot_product_attention"


class Block(torch.nn.Module):
    """Self-attention as BERT's eager code writes it: products, a scale, an additive mask, softmax."""

    def __init__(self, hidden=32, heads=4):
        super().__init__()
        self.heads, self.dim = heads, hidden // heads
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(3))
        self.out = torch.nn.Linear(hidden, hidden)

    def forward(self, x, mask):
        b, s, _ = x.shape
        q, k, v = (lin(x).view(b, s, self.heads, self.dim).transpose(1, 2) for lin in self.qkv)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.dim) + mask
        p = torch.softmax(scores, dim=-1)
        return self.out((p @ v).transpose(1, 2).reshape(b, s, -1))


def block_inputs(seq=19):
    torch.manual_seed(0)
    x = torch.rand(2, seq, 32) * 2 - 1
    mask = torch.where(torch.rand(2, 1, 1, seq) < 0.8, 0.0, -10000.0)
    return Block().eval(), (x, mask)


@pytest.mark.parametrize("source", ["torch", "onnx"])
def test_bert_style_block_compiles_to_the_fused_kernel(source):
    model, inputs = block_inputs()
    if source == "onnx":
        import onnx

        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, inputs, buf, dynamo=False, input_names=["x", "mask"])
        graph = import_model(onnx.load_from_string(buf.getvalue()))
    else:
        graph = import_model(model, inputs)
    after = run_pipeline(graph, 2)
    assert ops(after).count(SDPA) == 1 and "softmax" not in ops(after)
    cm = ember.compile(graph)
    with torch.no_grad():
        want = model(*inputs).numpy()
    np.testing.assert_allclose(cm(*[t.numpy() for t in inputs]), want, rtol=1e-4, atol=1e-5)


def products(scale_op="div", mask_left=False, mask=True, extra_use=False) -> Graph:
    """softmax(q @ kT (scale_op) c + mask) @ v on (2, 3, 5, 8) heads."""
    g = Graph("attention")
    q = g.add_input("q", TensorType((2, 3, 5, 8)))
    kt = g.add_input("kt", TensorType((2, 3, 8, 7)))
    v = g.add_input("v", TensorType((2, 3, 7, 8)))
    (s,) = add_op(g, "matmul", [q, kt])
    if scale_op:
        c = g.add_constant(np.array(0.35 if scale_op == "mul" else 2.8, "float32"), "c")
        (s,) = add_op(g, scale_op, [s, c] if scale_op == "div" else [c, s])
    if mask:
        m = g.add_constant(random_array((5, 7)), "m")
        (s,) = add_op(g, "add", [m, s] if mask_left else [s, m])
    (p,) = add_op(g, "softmax", [s], {"axis": -1})
    (out,) = add_op(g, "matmul", [p, v])
    g.set_outputs([out, p] if extra_use else [out])
    return g


@pytest.mark.parametrize("variant", [{}, {"scale_op": "mul"}, {"mask_left": True}, {"scale_op": None},
                                     {"mask": False}])
def test_variants_fold(variant):
    before = products(**variant)
    after = fold_attention(before)
    assert SDPA in ops(after)
    check_same(before, after)


def test_softmax_used_elsewhere_is_left_alone():
    before = products(extra_use=True)
    assert SDPA not in ops(fold_attention(before))


@pytest.mark.parametrize("kind, causal", [("tril", True), ("ones", False), ("zeros", False), ("random", None)])
def test_constant_masks_the_kernel_knows_are_dropped(kind, causal):
    g = Graph("attention")
    q, k, v = (g.add_input(n, TensorType((1, 2, 6, 8))) for n in "qkv")
    mask = {"tril": np.tril(np.ones((1, 1, 6, 6), bool)), "ones": np.ones((6, 6), bool),
            "zeros": np.zeros((1, 6), "float32"), "random": random_array((6, 6))}[kind]
    (out,) = add_op(g, SDPA, [q, k, v, g.add_constant(mask, "mask")])
    g.set_outputs([out])
    after = fold_attention(g)
    (node,) = after.nodes
    if causal is None:
        assert len(node.inputs) == 4 and not node.attrs["causal"]
    else:
        assert len(node.inputs) == 3 and node.attrs["causal"] == causal
    check_same(g, after)

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
from ember.ops.attention import SDPA
from ember.ops.nodes import add_op
from ember.passes.dce import dce
from ember.passes.fold_attention import fold_attention
from ember.passes.pipeline import run_pipeline
from ember.testing import random_array


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


def spelled(mask_form="where-inf", guard=False, split_scale=False, merged_kt=False, mask_value=None) -> Graph:
    """softmax(scores masked) @ v on (2, 3, 6, 8) heads, in the spellings of other exporters:
    mask_form "where-inf" (a bool mask input m: where(m, s, -inf)), "where-min" (where(mask_value,
    s, finfo.min), mask_value a constant) or None; the NaN guard after the softmax; the scale as
    sqrt(c) on q and on kT; kT as reshape(transpose(reshape(k)))."""
    g = Graph("spelled")
    q = g.add_input("q", TensorType((2, 3, 6, 8)))
    k = g.add_input("k", TensorType((2, 3, 6, 8)))
    v = g.add_input("v", TensorType((2, 3, 6, 8)))
    if merged_kt:
        (kt,) = add_op(g, "reshape", [k], {"shape": (6, 6, 8)})
        (kt,) = add_op(g, "transpose", [kt], {"perm": (0, 2, 1)})
        (kt,) = add_op(g, "reshape", [kt], {"shape": (2, 3, 8, 6)})
    else:
        (kt,) = add_op(g, "transpose", [k], {"perm": (0, 1, 3, 2)})
    if split_scale:
        root = g.add_constant(np.array(0.6, "float32"), "root")
        (q,) = add_op(g, "mul", [q, root])
        (kt,) = add_op(g, "mul", [root, kt])
    (s,) = add_op(g, "matmul", [q, kt])
    if mask_form == "where-inf":
        m = g.add_input("m", TensorType((2, 1, 6, 6), "bool"))
        (s,) = add_op(g, "where", [m, s, g.add_constant(np.array(-np.inf, "float32"), "ninf")])
    elif mask_form == "where-min":
        m = g.add_constant(mask_value, "m")
        (s,) = add_op(g, "where", [m, s, g.add_constant(np.array(np.finfo("float32").min, "float32"), "min")])
    (p,) = add_op(g, "softmax", [s], {"axis": -1})
    if guard:
        (nan,) = add_op(g, "not_equal", [p, p])
        (p,) = add_op(g, "where", [nan, g.add_constant(np.array(0.0, "float32"), "zero"), p])
    g.set_outputs(add_op(g, "matmul", [p, v]))
    return g


def _attention_of(graph: Graph):
    (node,) = [n for n in graph.nodes if n.op == SDPA]
    return node


@pytest.mark.parametrize("variant", [{}, {"split_scale": True}, {"merged_kt": True, "mask_form": None},
                                     {"guard": True, "mask_form": None, "split_scale": True, "merged_kt": True}])
def test_other_spellings_fold(variant):
    before = spelled(**variant)
    after = dce(fold_attention(before))
    node = _attention_of(after)
    assert "softmax" not in ops(after) and "matmul" not in ops(after)
    assert node.attrs["scale"] == pytest.approx(0.36 if variant.get("split_scale") else 1.0)
    assert node.inputs[1] is after.inputs[1] or not variant.get("merged_kt")  # k read as it is
    if "guard" in variant:
        assert "not_equal" not in ops(after)
    inputs = None
    if variant.get("mask_form", "where-inf") == "where-inf":  # every row keeps a key: no NaN
        keep = np.random.default_rng().random((2, 1, 6, 6)) < 0.7
        keep[..., 0] = True
        inputs = keep
    _check_with_mask(before, after, inputs)


def _check_with_mask(before: Graph, after: Graph, keep) -> None:
    from ember.graph.verify import verify
    from ember.ops import infer_types
    from ember.ops.evaluate import evaluate

    verify(after, infer_types)
    args = [random_array(v.shape) for v in before.inputs[:3]] + ([keep] if keep is not None else [])
    for want, got in zip(evaluate(before, *args), evaluate(after, *args), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_where_with_the_float_minimum_and_a_causal_constant_is_causal():
    """GPT-2's eager torch.where(causal, scores, finfo.min): the attention, causal, no mask input."""
    before = spelled("where-min", mask_value=np.tril(np.ones((1, 1, 6, 6), bool)))
    after = dce(fold_attention(before))
    node = _attention_of(after)
    assert node.attrs["causal"] and len(node.inputs) == 3
    check_same(before, after)


@pytest.mark.parametrize("why, graph", [
    ("a row with every key masked: finfo.min gives uniform weights, the kernel NaN",
     lambda: spelled("where-min", mask_value=np.tril(np.ones((6, 6), bool), -1))),
    ("the NaN guard with a mask that may mask out a whole row", lambda: spelled(guard=True)),
])
def test_spellings_that_differ_are_left_alone(why, graph):
    before = graph()
    assert SDPA not in ops(fold_attention(before)), why


class CausalBlock(torch.nn.Module):
    """GPT-2's older eager attention: torch.where(causal, scores, finfo.min), scaled by 1/sqrt(d)."""

    def __init__(self, hidden=32, heads=4, seq=12):
        super().__init__()
        self.heads, self.dim = heads, hidden // heads
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.register_buffer("causal", torch.tril(torch.ones(seq, seq, dtype=torch.bool)).view(1, 1, seq, seq))

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = (t.view(b, s, self.heads, self.dim).transpose(1, 2) for t in self.qkv(x).split(h, dim=2))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.dim)
        scores = torch.where(self.causal[:, :, :s, :s], scores, torch.finfo(scores.dtype).min)
        return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, h)


class SdpaBlock(CausalBlock):
    """The same attention through F.scaled_dot_product_attention (which the dynamo ONNX exporter
    writes out with a split scale, merged batch dimensions around kT and a NaN guard)."""

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = (t.view(b, s, self.heads, self.dim).transpose(1, 2) for t in self.qkv(x).split(h, dim=2))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out.transpose(1, 2).reshape(b, s, h)


@pytest.mark.parametrize("block, source", [(CausalBlock, "torch"), (CausalBlock, "onnx"), (SdpaBlock, "dynamo")])
def test_gpt2_style_causal_attention_compiles_to_the_causal_kernel(block, source):
    torch.manual_seed(0)
    model, x = block().eval(), torch.rand(1, 12, 32) * 2 - 1
    if source == "torch":
        graph = import_model(model, (x,))
    else:
        import onnx

        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (x,), buf, dynamo=source == "dynamo")
        graph = import_model(onnx.load_from_string(buf.getvalue()))
    after = run_pipeline(graph, 2)
    node = _attention_of(after)
    assert node.attrs["causal"] and len(node.inputs) == 3 and "softmax" not in ops(after)
    cm = ember.compile(graph)
    with torch.no_grad():
        want = model(x).numpy()
    got = cm(x.numpy())
    np.testing.assert_allclose(got[0] if isinstance(got, list | tuple) else got, want, rtol=1e-4, atol=1e-5)


def test_a_guard_that_fills_other_than_zero_is_left_alone():
    before = spelled(guard=True, mask_form=None)
    where = next(n for n in before.nodes if n.op == "where")
    before.constants[where.inputs[1].name] = np.array(1.0, "float32")  # where(isnan(p), 1, p)
    assert SDPA not in ops(fold_attention(before))

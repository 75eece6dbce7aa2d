"""Transposes folded into their readers: a transformer's head split and merge around attention
(the attention reads and writes heads after the sequence, the transposes cancel, the reshapes are
views and the block compiles to its projections and one attention kernel), transposed gemm and
matmul operands (trans_a, trans_b), and the patterns left alone."""

import numpy as np
import pytest
from pass_check import check_same, ops

import ember
from ember.graph import Graph, TensorType
from ember.ops.attention import SDPA
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.passes.algebraic import simplify
from ember.passes.dce import dce
from ember.passes.fold_transposes import fold_transposes
from ember.passes.pipeline import run_pipeline
from ember.testing import random_array

B, S, H, D = 2, 6, 3, 4


def attention_block(transposed=("q", "k", "v"), mask: bool = True) -> Graph:
    """x (B, S, H*D) -> q, k, v projections -> heads split (reshape, transpose) -> attention ->
    heads merged (transpose, reshape) -> output projection; only `transposed` of q, k, v go
    through the head transpose (the others are reshaped to (B, H, S, D) directly)."""
    g = Graph("attention")
    x = g.add_input("x", TensorType((B, S, H * D)))
    (x2,) = add_op(g, "reshape", [x], {"shape": (B * S, H * D)})
    heads = []
    for name in ("q", "k", "v"):
        (p,) = add_op(g, "gemm", [x2, g.add_constant(random_array((H * D, H * D)), f"w{name}")])
        if name in transposed:
            (p,) = add_op(g, "reshape", [p], {"shape": (B, S, H, D)})
            (p,) = add_op(g, "transpose", [p], {"perm": (0, 2, 1, 3)})
        else:
            (p,) = add_op(g, "reshape", [p], {"shape": (B, H, S, D)})
        heads.append(p)
    if mask:
        heads.append(g.add_constant(random_array((1, 1, S, S)), "mask"))
    (a,) = add_op(g, SDPA, heads)
    (a,) = add_op(g, "transpose", [a], {"perm": (0, 2, 1, 3)})
    (a,) = add_op(g, "reshape", [a], {"shape": (B * S, H * D)})
    (y,) = add_op(g, "gemm", [a, g.add_constant(random_array((H * D, H * D)), "wo")])
    g.set_outputs(add_op(g, "reshape", [y], {"shape": (B, S, H * D)}))
    return g


@pytest.mark.parametrize("mask", [True, False])
def test_head_split_and_merge_fold_into_attention(mask):
    g = attention_block(mask=mask)
    out = dce(simplify(fold_transposes(g)))
    assert "transpose" not in ops(out)
    (sdpa,) = [n for n in out.nodes if n.op == SDPA]
    assert sdpa.attrs["layout"] == "bshd" and sdpa.outputs[0].shape == (B, S, H, D)
    check_same(g, out)


def test_attention_block_compiles_to_its_projections_and_one_attention_kernel():
    g = attention_block()
    cm = ember.compile(g, opt_level=3)
    names = [k.name for k in cm.kernels]
    assert not any("transpose" in n or n.startswith("reshape") for n in names), names
    calls = sum(len(k.nodes) // len(k.ops) for k in cm.kernels)
    # the three projections as one GEMM (fuse_siblings), the attention reading its result in place
    # (fold_qkv_split), the output projection (with its reshape)
    assert calls == 3
    x = random_array((B, S, H * D))
    np.testing.assert_allclose(cm(x), evaluate(g, x)[0], rtol=1e-4, atol=1e-5)


def test_attention_with_some_heads_not_transposed_is_left_alone():
    g = attention_block(transposed=("q", "k"))
    out = fold_transposes(g)
    assert [n.attrs["layout"] for n in out.nodes if n.op == SDPA] == ["bhsd"]
    assert ops(out) == ops(g)


def test_keys_and_values_transposed_but_not_the_query_fold_with_the_query_transposed():
    """LLaMA's case (the rotary embedding applied to q heads-first): k and v fold, q takes one
    transpose."""
    g = attention_block(transposed=("k", "v"))
    out = dce(simplify(fold_transposes(g)))
    (sdpa,) = [n for n in out.nodes if n.op == SDPA]
    assert sdpa.attrs["layout"] == "bshd" and ops(out).count("transpose") == 1
    check_same(g, out)


def matrix_graph(op: str, transpose_a: bool, transpose_b: bool, attrs=None) -> Graph:
    g = Graph("matrices")
    a = g.add_input("a", TensorType((5, 7) if transpose_a else (7, 5)))
    b = g.add_input("b", TensorType((3, 5) if transpose_b else (5, 3)))
    if transpose_a:
        (a,) = add_op(g, "transpose", [a], {"perm": (1, 0)})
    if transpose_b:
        (b,) = add_op(g, "transpose", [b], {"perm": (-1, -2)})
    inputs = [a, b] + ([g.add_constant(random_array((3,)), "c")] if op == "gemm" else [])
    (y,) = add_op(g, op, inputs, attrs)
    g.set_outputs(add_op(g, "relu", [y]))
    return g


@pytest.mark.parametrize("op", ["gemm", "matmul"])
@pytest.mark.parametrize("transpose_a, transpose_b", [(True, False), (False, True), (True, True)])
def test_transposed_operands_fold_into_gemm(op, transpose_a, transpose_b):
    g = matrix_graph(op, transpose_a, transpose_b, {"alpha": 0.5} if op == "gemm" else None)
    out = dce(fold_transposes(g))
    assert ops(out) == ["gemm", "relu"]
    attrs = out.nodes[0].attrs
    assert (attrs["trans_a"], attrs["trans_b"]) == (transpose_a, transpose_b)
    check_same(g, out)


def test_gemm_with_transposed_flags_flips_them_back():
    g = Graph("flags")
    a = g.add_input("a", TensorType((7, 5)))
    (at,) = add_op(g, "transpose", [a], {"perm": (1, 0)})
    (y,) = add_op(g, "gemm", [at, g.add_constant(random_array((3, 5)), "b")], {"trans_a": True, "trans_b": True})
    g.set_outputs([y])
    out = dce(fold_transposes(g))
    assert ops(out) == ["gemm"] and out.nodes[0].attrs["trans_a"] is False and out.outputs[0].name == y.name
    check_same(g, out)


def test_left_alone_without_transposes_and_for_batched_matmul():
    g = Graph("batched")
    a = g.add_input("a", TensorType((2, 4, 5)))
    (at,) = add_op(g, "transpose", [g.add_input("b", TensorType((2, 3, 5)))], {"perm": (0, 2, 1)})
    (y,) = add_op(g, "matmul", [a, at])
    g.set_outputs([y])
    assert fold_transposes(g) is not None and ops(fold_transposes(g)) == ["transpose", "matmul"]
    check_same(g, run_pipeline(g, 3))

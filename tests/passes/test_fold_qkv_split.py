"""An attention reading the pieces of one split reads the split's input in place (ember.passes.
fold_qkv_split): the pattern on small graphs (pieces in any order, a mask, a piece nobody reads,
a batched split), the kernels compiled from it (the fused float32 kernel and the staged float64
one), the attention operator's `heads` against its reference, the patterns left alone, and the
split gone from small BERT and GPT-2."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pass_check import check_same, ops

import ember
from ember.graph import Graph, TensorType
from ember.ops import OpTypeError, infer_types
from ember.ops.attention import SDPA
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.passes.dce import dce
from ember.passes.fold_qkv_split import fold_qkv_split
from ember.testing import check_op, random_array

S, H, E = 6, 3, 4
TOL = {"rtol": 1e-5, "atol": 1e-5}


def qkv_block(order=(0, 1, 2), sizes=(H * E,) * 3, lead=(1, S), split_rank=2, mask=False, causal=False,
              dtype="float32", head_of=None) -> Graph:
    """x -> split on its last axis -> pieces order[0], order[1], order[2] reshaped to (*lead, H, E)
    as q, k, v -> attention (bshd); split_rank 2 splits x (S, N) (BERT's), 3 splits (1, S, N)
    (GPT-2's). head_of: the (H, E) each piece is reshaped to, if not (H, E) for all."""
    g = Graph("qkv")
    x = g.add_input("x", TensorType(((S, sum(sizes)) if split_rank == 2 else (1, S, sum(sizes))), dtype))
    pieces = add_op(g, "split", [x], {"axis": -1, "sizes": tuple(sizes)})
    heads = []
    for k, p in enumerate(order):
        h, e = head_of[k] if head_of else (H, E)
        (r,) = add_op(g, "reshape", [pieces[p]], {"shape": (*lead, h, e)})
        heads.append(r)
    if mask:
        heads.append(g.add_constant(random_array((1, 1, S, S), dtype), "mask"))
    g.set_outputs(add_op(g, SDPA, heads, {"layout": "bshd", "causal": causal}))
    return g


def _attention(graph: Graph):
    (node,) = [n for n in graph.nodes if n.op == SDPA]
    return node


@pytest.mark.parametrize("order, split_rank, mask, causal", [
    ((0, 1, 2), 2, False, False), ((0, 1, 2), 3, True, False), ((2, 0, 1), 2, False, True), ((1, 2, 0), 3, True, True)])
def test_attention_reads_the_split_input_in_place(order, split_rank, mask, causal):
    g = qkv_block(order, split_rank=split_rank, mask=mask, causal=causal)
    out = dce(fold_qkv_split(g))
    assert "split" not in ops(out)
    assert _attention(out).attrs["heads"] == (H, *(H * p for p in order))
    check_same(g, out)


def test_a_piece_nobody_reads_and_uneven_pieces():
    # four pieces: q, k, v of 2 heads each after a leading piece of 1 head that nothing reads
    g = qkv_block(order=(1, 2, 3), sizes=(E, 2 * E, 2 * E, 2 * E), head_of=[(2, E)] * 3)
    out = dce(fold_qkv_split(g))
    assert "split" not in ops(out) and _attention(out).attrs["heads"] == (2, 1, 3, 5)
    check_same(g, out)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_compiled_without_a_split_kernel(dtype):
    """float32: the fused kernel reads the heads with offsets; float64: the staged compute copies
    them out first."""
    g = qkv_block((2, 0, 1), split_rank=3, mask=True, dtype=dtype)
    cm = ember.compile(g)
    assert not any("split" in k.ops for k in cm.kernels) and [k.ops for k in cm.kernels] == [(SDPA,)]
    x = random_array((1, S, 3 * H * E), dtype)
    np.testing.assert_allclose(cm(x), evaluate(g, x)[0], **TOL)


@pytest.mark.parametrize("why, kwargs", [
    ("pieces of two splits", {}),
    ("offset not a whole head", {"sizes": (E + 1, H * E, H * E, H * E), "order": (1, 2, 3)}),
    ("head sizes differ", {"sizes": (H * E, H * E, 2 * H * E), "head_of": [(H, E), (H, E), (H, 2 * E)]}),
])
def test_left_alone(why, kwargs):
    g = qkv_block(**kwargs) if why != "pieces of two splits" else _two_splits()
    assert ops(fold_qkv_split(g)) == ops(g), why


def _two_splits() -> Graph:
    g = Graph("two")
    x = g.add_input("x", TensorType((S, 2 * H * E)))
    y = g.add_input("y", TensorType((S, H * E)))
    q, k = add_op(g, "split", [x], {"axis": 1, "sizes": (H * E, H * E)})
    (v,) = add_op(g, "split", [y], {"axis": 1, "sizes": (H * E,)})
    heads = [add_op(g, "reshape", [p], {"shape": (1, S, H, E)})[0] for p in (q, k, v)]
    g.set_outputs(add_op(g, SDPA, heads, {"layout": "bshd"}))
    return g


@settings(max_examples=6, deadline=None)
@given(count=st.integers(1, 3), firsts=st.lists(st.integers(0, 3), min_size=3, max_size=3),
       causal=st.booleans(), seq=st.integers(1, 9))
def test_heads_against_the_sliced_reference(count, firsts, causal, seq):
    """heads (count, q0, k0, v0) computes the attention of the sliced inputs, on the C target
    (the fused kernel) and the loop-IR interpreter."""
    x = random_array((2, seq, count + 3, 8))
    attrs = {"layout": "bshd", "causal": causal, "heads": (count, *firsts)}
    (got,) = check_op(SDPA, [x, x, x], attrs, **TOL, targets=("c", "python"))
    q, k, v = (torch.from_numpy(x[:, :, f:f + count]).transpose(1, 2) for f in firsts)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs, message", [
    ({"layout": "bhsd", "heads": (1, 0, 0, 0)}, "with layout bshd"),
    ({"layout": "bshd", "heads": (0, 0, 0, 0)}, "count >= 1"),
    ({"layout": "bshd", "heads": (2, 0, 0)}, "(count, q_first, k_first, v_first)"),
    ({"layout": "bshd", "heads": (2, 0, 3, 0)}, "k (1, 5, 4, 8) has no heads [3, 5)"),
])
def test_heads_errors(attrs, message):
    with pytest.raises(OpTypeError) as e:
        infer_types(SDPA, [TensorType((1, 5, 4, 8))] * 3, attrs)
    assert message in str(e.value)


@pytest.fixture(scope="module", params=["bert_base", "gpt2_small"])
def zoo_model(request):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.models import ZOO

    model, inputs = ZOO[request.param](small=True)
    return model, inputs, ember.compile(model, example_inputs=inputs)


def test_small_transformers_have_no_split_kernel(zoo_model):
    model, inputs, cm = zoo_model
    assert not any("split" in k.ops for k in cm.kernels)
    (attention,) = [k for k in cm.kernels if SDPA in k.ops]
    assert len(attention.nodes) == 2  # one per layer
    with torch.no_grad():
        want = model(*inputs).numpy()
    np.testing.assert_allclose(cm(*inputs).numpy(), want, rtol=1e-4, atol=1e-4)


def test_small_bert_through_onnx_with_biases_has_no_split_kernel():
    """ONNX writes each projection as MatMul then Add of its bias: fuse_siblings adds the three
    biases once before the split, so the attention still reads the product in place."""
    import io
    import warnings

    import onnx

    from ember.frontend import import_model

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.models import ZOO

    model, inputs = ZOO["bert_base"](small=True)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.5, 0.5)  # BERT's are initialized to zeros, which the exporter drops
        want = model(*inputs).numpy()
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, buf, dynamo=False)
    cm = ember.compile(import_model(onnx.load_from_string(buf.getvalue())))
    assert not any("split" in k.ops for k in cm.kernels)
    assert [k.ops for k in cm.kernels if SDPA in k.ops] == [(SDPA,)]
    np.testing.assert_allclose(cm(inputs[0].numpy()), want, rtol=1e-4, atol=1e-4)


def test_flash_attention_over_symbolic_tokens_reads_the_split_input_in_place():
    """The GPU's attention (flash_attention, layout bshd) over a symbolic number of tokens t: x (1,
    t, 3 H E) split and reshaped to (1, t, H, E) folds as at static sizes."""
    g = Graph("qkv")
    x = g.add_input("x", TensorType((1, "t", 3 * H * E)))
    pieces = add_op(g, "split", [x], {"axis": -1, "sizes": (H * E,) * 3})
    heads = [add_op(g, "reshape", [p], {"shape": (1, "t", H, E)})[0] for p in pieces]
    g.set_outputs(add_op(g, "flash_attention", heads, {"layout": "bshd", "causal": True}))
    out = dce(fold_qkv_split(g))
    assert ops(out) == ["reshape", "flash_attention"] and out.nodes[1].attrs["heads"] == (H, 0, H, 2 * H)
    assert out.nodes[0].outputs[0].type.shape == (1, "t", 3 * H, E)
    x_at = random_array((1, S, 3 * H * E), "float32")
    np.testing.assert_allclose(evaluate(out, x_at)[0], evaluate(g, x_at)[0], **TOL)

"""One query's attention (a decode step) on the decode routine (ember/codegen/c_attention_decode.py)
against torch.nn.functional.scaled_dot_product_attention: every mask kind, head dims that are
and are not whole vectors, grouped key/value heads (torch's enable_gqa: a call per key/value
head, its group's query heads in it), a cache in bfloat16 or int8 (per-row scales) read
converted in registers, the
step's own key and value appended; the interpreter's NumPy twin agrees. Grouped heads over
more queries take the attention routine (and float64 the staged stages), as torch computes them.

Tolerance: rtol 1e-4, atol 1e-5 against torch (float32, inputs in [-1, 1]); a bfloat16 cache is
compared with torch on the same bfloat16 values widened to float32."""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.graph.core import TensorType
from ember.ops.attention import SDPA
from ember.ops.registry import get
from ember.schedules.apply import node_kernel
from ember.testing import check_op
from ember.tir.arith import simplify
from ember.tir.expr import as_int
from ember.tir.functor import collect
from ember.tir.kv_int8 import dequantize_rows, quantize_rows
from ember.tir.stmt import CallRoutine, For

RNG = np.random.default_rng()
TOL = {"rtol": 1e-4, "atol": 1e-5}


def rand(*shape) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


def sdpa(q, k, v, mask=None, gqa=False):
    return F.scaled_dot_product_attention(q, k.float(), v.float(), attn_mask=mask, enable_gqa=gqa)


@pytest.mark.parametrize("mask, dim", [("none", 64), ("bool", 40), ("additive", 40)])
def test_masks_and_head_dims_against_torch(mask, dim):
    """200 keys: a full block of 128 and a partial one; 40 dims: two vectors and a tail."""
    q, k, v = rand(2, 3, 1, dim), rand(2, 3, 200, dim), rand(2, 3, 200, dim)
    keep = RNG.random((2, 1, 1, 200)) < 0.7
    keep[..., 0] = True
    extra = {"none": [], "bool": [keep], "additive": [rand(1, 3, 1, 200) * 4]}[mask]
    check_op(SDPA, [q, k, v, *extra], None, **TOL, targets=("c", "python"), torch_fn=sdpa)


def test_grouped_heads_one_call_per_batch():
    """8 query heads over 2 key/value heads, a per-head mask: one call per batch element computes
    every head (a block of keys at a time), the loop over the batch parallel; a batch of one is
    one call, its loop serial (the routine shares the keys among the threads itself)."""
    q, k, v, add = rand(2, 8, 1, 32), rand(2, 2, 77, 32), rand(2, 2, 77, 24), rand(2, 8, 1, 77)
    check_op(SDPA, [q, k, v, add], {"gqa": True}, **TOL, targets=("c", "python"),
             torch_fn=lambda *x: sdpa(*x, gqa=True))
    attrs = {"gqa": True, "causal": False, "scale": None, "layout": "bhsd"}
    for batch, kind in ((2, "parallel"), (1, "serial")):
        types = [TensorType((batch,) + x.shape[1:]) for x in (q, k, v)]
        s, args = node_kernel(SDPA, types, attrs, get(SDPA).infer(types, attrs))
        body = s.to_prim_func(args).body
        assert [c.routine for c in collect(body, lambda x: isinstance(x, CallRoutine))] == ["attention_decode"]
        (loop,) = collect(body, lambda x: isinstance(x, For))
        assert loop.kind == kind and as_int(simplify(loop.extent)) == batch


@pytest.mark.parametrize("kv, dim", [("float32", 16), ("bfloat16", 16), ("int8", 16), ("int8", 40), ("bfloat16", 80),
                                     ("int8", 72)])
def test_cache_read_in_place_bf16_int8_and_grouped(kv, dim):
    """A decode step in layout bshd: 4 query heads over 2 key/value heads, a cache of 130
    positions (in `kv`; int8: rows of codes and a scale, ember.tir.kv_int8; 40 and 72 dims:
    whole vectors and a tail; 80 and 72: a group's heads sharing each value's widening over 64
    of them) and the step's own float32 key and value appended (a block of one). The scores go
    a vector's width of keys at a time (130 keys: whole groups and a remainder in each block)."""
    past = 130
    q, kn, vn = rand(1, 1, 4, dim), rand(1, 1, 2, dim), rand(1, 1, 2, dim)
    store = {"float32": lambda x: x, "bfloat16": lambda x: x.astype(ml_dtypes.bfloat16), "int8": quantize_rows}[kv]
    k, v = (store(rand(1, past, 2, dim)) for _ in "kv")

    def fn(q, k, v, kn, vn):
        k, v = (torch.cat([c.float(), n], 1).transpose(1, 2) for c, n in ((k, kn), (v, vn)))
        return sdpa(q.transpose(1, 2), k, v, gqa=True).transpose(1, 2)

    attrs = {"layout": "bshd", "appended": True, "gqa": True}
    torch_fn = fn if kv == "float32" else None  # (torch takes no ml_dtypes array: the reference, float64)
    check_op(SDPA, [q, k, v, kn, vn], attrs, **TOL, targets=("c", "python"), torch_fn=torch_fn)
    if kv == "int8":  # the reference reads what the rows hold, within a row's rounding of the floats
        (got,) = get(SDPA).reference([q, k, v, kn, vn], {**get(SDPA).attrs, **attrs})
        want = fn(*(torch.from_numpy(x) for x in (q, dequantize_rows(k), dequantize_rows(v), kn, vn))).numpy()
        np.testing.assert_allclose(got, want, **TOL)


def test_grouped_heads_over_many_queries():
    """A prefill with grouped heads: the attention routine reads head h's keys at h // groups."""
    q, k, v = rand(1, 6, 45, 32), rand(1, 2, 45, 32), rand(1, 2, 45, 32)
    check_op(SDPA, [q, k, v], {"gqa": True, "causal": True}, **TOL,
             torch_fn=lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
    wide = [x.astype("float64") for x in (q, k, v)]  # the staged stages: each head repeated
    check_op(SDPA, wide, {"gqa": True}, rtol=1e-6, atol=1e-8)


def test_grouped_heads_must_divide():
    with pytest.raises(Exception, match="gqa needs static heads"):
        get(SDPA).infer([TensorType((1, 6, 1, 8)), TensorType((1, 4, 9, 8)), TensorType((1, 4, 9, 8))],
                        {"gqa": True, "causal": False, "scale": None, "layout": "bhsd"})



def test_keys_shared_among_threads():
    """2 key/value heads over 4500 positions: enough rows for two threads, each a half of the
    keys of every head, their parts merged. Head 1 keeps only the first 1000 keys (the second
    thread's part all masked out), head 2 none (0), as torch gives at one thread and at two."""
    import ember
    from ember.graph.core import Graph
    from ember.ops.nodes import add_op

    q, k, v = rand(1, 4, 1, 16), rand(1, 2, 4500, 16), rand(1, 2, 4500, 16)
    keep = RNG.random((1, 4, 1, 4500)) < 0.8
    keep[0, 1, 0, 1000:] = False
    keep[0, 2] = False
    g = Graph(name="decode")
    ins = [g.add_input(n, TensorType(x.shape, x.dtype.name)) for n, x in zip("qkvm", (q, k, v, keep))]
    (o,) = add_op(g, SDPA, ins, {"gqa": True})
    g.set_outputs([o])
    cm = ember.compile(g)
    want = sdpa(*(torch.from_numpy(x) for x in (q, k, v, keep)), gqa=True).numpy()
    for threads in (1, 2):
        cm.num_threads = threads
        np.testing.assert_allclose(cm(q, k, v, keep), want, **TOL)
    assert not want[0, 2].any()


@functools.cache
def int8_step(heads: int, groups: int, dim: int):
    """A decode step's attention compiled alone: heads * groups query heads over `heads` key/value
    heads, an int8 cache of a dynamic number of positions (layout bshd) and the step's own float32
    key and value appended."""
    import ember
    from ember.graph.core import Graph
    from ember.ops.nodes import add_op

    g = Graph(name=f"step_{heads}x{groups}x{dim}")
    shapes = {"q": ((1, 1, heads * groups, dim), "float32"), "k": ((1, "past", heads, dim + 4), "int8"),
              "v": ((1, "past", heads, dim + 4), "int8"), "kn": ((1, 1, heads, dim), "float32"),
              "vn": ((1, 1, heads, dim), "float32")}
    ins = [g.add_input(n, TensorType(shape, dtype)) for n, (shape, dtype) in shapes.items()]
    (o,) = add_op(g, SDPA, ins, {"layout": "bshd", "appended": True, "gqa": True})
    g.set_outputs([o])
    return ember.compile(g)


def int8_step_inputs(heads: int, groups: int, dim: int, past: int, spread: float = 3.0):
    """q, the int8 cache's k and v (keys `spread` times the queries' range) and the step's own, and
    the float rows the cache quantized."""
    q, kn, vn = rand(1, 1, heads * groups, dim), rand(1, 1, heads, dim), rand(1, 1, heads, dim)
    keys, values = rand(1, past, heads, dim) * spread, rand(1, past, heads, dim)
    return [q, quantize_rows(keys), quantize_rows(values), kn, vn], (keys, values)


def int8_step_reference(q, k, v, kn, vn) -> np.ndarray:
    """The step's attention in float64 over the rows' dequantized values (q as it is), or over
    float rows given as k and v."""
    heads, dim = kn.shape[2:]
    k, v = (dequantize_rows(x) if x.dtype == np.int8 else x for x in (k, v))
    keys = np.concatenate([k, kn], 1)[0].transpose(1, 0, 2).astype("float64")
    values = np.concatenate([v, vn], 1)[0].transpose(1, 0, 2).astype("float64")
    s = np.einsum("hge,hse->hgs", q[0, 0].reshape(heads, -1, dim).astype("float64"), keys) / np.sqrt(dim)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("hgs,hse->hge", p / p.sum(-1, keepdims=True), values).reshape(q.shape)


def test_grouped_cache_shared_among_threads():
    """LLaMA's step: 12 query heads over 4 key/value heads, 700 positions of an int8 cache (8400
    scores: two threads, where counting key/value heads' rows, 2800, kept one) and the step's own
    key and value, which the last thread takes: the same at one thread and at two, against NumPy
    in float64 over the rows' dequantized values."""
    cm = int8_step(4, 3, 64)
    inputs, _ = int8_step_inputs(4, 3, 64, 700)
    want = int8_step_reference(*inputs)
    for threads in (1, 2):
        cm.num_threads = threads
        np.testing.assert_allclose(cm(*inputs), want, **TOL)


@pytest.mark.parametrize("heads, groups, dim, past", [(12, 1, 64, 1000), (4, 3, 64, 1023), (2, 2, 128, 2100)])
def test_int8_scores_of_two_byte_queries(heads, groups, dim, past):
    """GPT-2's heads (12, none grouped), LLaMA's (12 over 4) and heads of 128 values over an int8
    cache: the scores and p v on VNNI where the target has it (the query in two bytes a value, p
    in 15 bits a block, ember.codegen.c_attention_decode_vnni), 16 and 2 keys at a time and the
    float path for the rest (1000, 1023, 2100 positions: blocks that end in part-groups). Against
    float64 over the dequantized rows at rtol 1e-4, atol 1e-5, as the float path (keys within the
    queries' range: the largest error seen 0.14 of that, over 15 draws of each), a one-hot
    query's head included (every value but one rounds to 0). One thread and two (each a half of
    the keys)."""
    cm = int8_step(heads, groups, dim)
    inputs, _ = int8_step_inputs(heads, groups, dim, past, spread=1.0)
    inputs[0][0, 0, 0] = 0.0
    inputs[0][0, 0, 0, 5] = 1.0
    want = int8_step_reference(*inputs)
    for threads in (1, 2):
        cm.num_threads = threads
        np.testing.assert_allclose(cm(*inputs), want, **TOL)


@settings(max_examples=30, deadline=None)
@given(past=st.integers(1, 300), spread=st.sampled_from([0.01, 1.0, 30.0]))
def test_int8_scores_any_length(past, spread):
    """LLaMA's step over any number of positions (whole and part groups of 16 keys and blocks of
    128) and keys small or large against the queries (softmax flat or peaked). The two-byte
    query's rounding grows with the scores (keys of 30x the queries' range: 1.7e-4 seen, where
    the float path's stays at float32's), so it is bounded against the int8 cache's own error
    (the attention over the float rows the cache quantized): at most 2% of it (0.9% seen, keys of
    0.01x to 100x), and within rtol 1e-4, atol 1e-5 of the dequantized rows' attention where the
    keys are within the queries' range. (One thread: 3600 scores at most.)"""
    cm = int8_step(4, 3, 64)
    cm.num_threads = 1
    inputs, rows = int8_step_inputs(4, 3, 64, past, spread)
    got, want = cm(*inputs), int8_step_reference(*inputs)
    cache_error = np.linalg.norm(int8_step_reference(inputs[0], *rows, *inputs[3:]) - want)
    assert np.linalg.norm(got - want) <= 0.02 * cache_error
    if spread <= 1:
        np.testing.assert_allclose(got, want, **TOL)


@settings(max_examples=25, deadline=None)
@given(shape=st.sampled_from([(12, 1), (4, 3)]), past=st.integers(1, 1100))
def test_int8_heads_and_positions_split_among_threads(shape, past):
    """GPT-2's heads (12, none grouped) and LLaMA's (12 over 4) over any number of positions at two
    threads: the threads take contiguous ranges of (block, key/value head) once there are
    PARALLEL_SCORES scores a thread (past 341 positions here), so that a few blocks are split by
    heads and partly by both. The same against float64 over the dequantized rows as at one thread
    (rtol 1e-4, atol 1e-5: keys within the queries' range)."""
    heads, groups = shape
    cm = int8_step(heads, groups, 64)
    inputs, _ = int8_step_inputs(heads, groups, 64, past, spread=1.0)
    want = int8_step_reference(*inputs)
    for threads in (1, 2):
        cm.num_threads = threads
        np.testing.assert_allclose(cm(*inputs), want, **TOL)

"""The fused float32 attention kernel (ember/ops/attention.py, the routine of
ember/codegen/c_attention.py) against torch.nn.functional.scaled_dot_product_attention: every mask
kind (none, causal, bool, additive, and causal with a mask), odd lengths on both sides of the
blocks of queries (32) and keys (128), head dims 64, 128 and 40 (a partial vector), batch and
heads > 1, cross attention (L != S), symbolic lengths; the kernel is one routine call per block
that allocates nothing (no L x S scores), the routine's scratch at the target's alignment; the
interpreter's NumPy twin agrees.

Tolerance: rtol 1e-4, atol 1e-5 against torch (float32, inputs in [-1, 1]): the kernel sums the
scores in another order than torch's and exp is c_vmath's (within 4 ULP), so results differ from
torch's in the last bits, well inside these bounds."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import ember
from ember.graph.core import TensorType
from ember.ops.attention import SDPA
from ember.ops.registry import get
from ember.schedules.apply import node_kernel
from ember.target import Target
from ember.testing import check_op
from ember.tir.functor import collect
from ember.tir.lower import lower
from ember.tir.routines import ATTENTION_ROWS
from ember.tir.stmt import Allocate, CallRoutine, For

RNG = np.random.default_rng()
TOL = {"rtol": 1e-4, "atol": 1e-5}


def rand(*shape) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


def torch_sdpa(causal=False, scale=None):
    def fn(q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale)

    return fn


def keep_mask(*shape) -> np.ndarray:
    """A random bool mask that keeps key 0 of every row (no row all masked out)."""
    keep = RNG.random(shape) < 0.7
    keep[..., 0] = True
    return keep


@pytest.mark.parametrize("mask", ["none", "causal", "bool", "additive", "causal+bool"])
@pytest.mark.parametrize("seq", [1, 7, 129, 1000])
def test_masks_and_odd_lengths_against_torch(mask, seq):
    heads, dim = (2, 64) if seq < 1000 else (1, 64)
    q, k, v = rand(1, heads, seq, dim), rand(1, heads, seq, dim), rand(1, heads, seq, dim)
    extra = {"bool": [keep_mask(seq, seq)], "additive": [rand(1, heads, seq, seq) * 4],
             "causal+bool": [keep_mask(seq, seq)]}.get(mask, [])
    causal = mask.startswith("causal")
    check_op(SDPA, [q, k, v, *extra], {"causal": causal}, **TOL, torch_fn=torch_sdpa(causal))


@pytest.mark.parametrize("dim", [64, 128, 40])
def test_head_dims_batch_and_heads(dim):
    q, k, v = rand(2, 3, 45, dim), rand(2, 3, 45, dim), rand(2, 3, 45, dim)
    check_op(SDPA, [q, k, v], None, **TOL, torch_fn=torch_sdpa())
    check_op(SDPA, [q, k, v], {"causal": True, "scale": 0.05}, **TOL, torch_fn=torch_sdpa(True, 0.05))


def test_cross_attention_broadcast_masks_and_value_width():
    """L != S on both sides of a block, a value width unlike the key's, masks that broadcast
    along heads, queries or keys (strides of 0)."""
    q, k, v = rand(2, 3, 33, 16), rand(2, 3, 200, 16), rand(2, 3, 200, 24)
    check_op(SDPA, [q, k, v], {"causal": True}, **TOL, torch_fn=torch_sdpa(True))
    for mask in (keep_mask(2, 1, 33, 200), rand(3, 1, 200), rand(33, 1)):
        check_op(SDPA, [q, k, v, mask], None, **TOL, torch_fn=torch_sdpa())


def test_heads_after_sequence_layout():
    q, k, v = rand(2, 70, 4, 32), rand(2, 70, 4, 32), rand(2, 70, 4, 32)

    def fn(q, k, v):
        return F.scaled_dot_product_attention(*(x.transpose(1, 2) for x in (q, k, v)), is_causal=True).transpose(1, 2)

    check_op(SDPA, [q, k, v], {"layout": "bshd", "causal": True}, **TOL, torch_fn=fn)


def test_rows_all_masked_out_are_zero():
    q, k, v = rand(1, 2, 40, 8), rand(1, 2, 150, 8), rand(1, 2, 150, 8)
    keep = keep_mask(40, 150)
    keep[3] = False
    keep[35] = False
    (out,) = check_op(SDPA, [q, k, v, keep], None, **TOL, torch_fn=F.scaled_dot_product_attention)
    assert (out[:, :, [3, 35]] == 0).all() and not np.isnan(out).any()


def test_one_routine_call_per_block_and_no_scores_in_memory():
    """The kernel allocates nothing (the routine's scratch is one block of scores); the routine runs
    per block of queries, in parallel."""
    seq, dim = 1024, 64
    types = [TensorType((1, 12, seq, dim))] * 3
    out_types = get(SDPA).infer(types, {"causal": True, "scale": None, "layout": "bhsd"})
    s, args = node_kernel(SDPA, types, {"causal": True, "scale": None, "layout": "bhsd"}, out_types)
    func = lower(s.to_prim_func(args), debug=True)  # the verifier after every loop pass
    assert "routine.attention(" in str(func)
    calls = collect(func.body, lambda x: isinstance(x, CallRoutine))
    assert [c.routine for c in calls] == ["attention"]
    assert not collect(func.body, lambda x: isinstance(x, Allocate))
    (loop,) = collect(func.body, lambda x: isinstance(x, For))
    assert loop.kind == "parallel" and int(loop.extent.value) == 12 * seq // ATTENTION_ROWS


def test_interpreter_runs_the_routine_twin():
    q, k, v = rand(1, 2, 9, 8), rand(1, 2, 11, 8), rand(1, 2, 11, 4)
    check_op(SDPA, [q, k, v, keep_mask(9, 11)], {"causal": False}, **TOL, targets=("c", "python"))
    check_op(SDPA, [q, k, v, rand(9, 11)], {"causal": True}, **TOL, targets=("c", "python"),
             torch_fn=lambda q, k, v, m: F.scaled_dot_product_attention(
                 q, k, v, attn_mask=m + torch.triu(torch.full((9, 11), -torch.inf), 1)))


def test_tuner_leaves_the_fused_kernel_out():
    from ember.graph import Graph
    from ember.ops.nodes import add_op
    from ember.tune.extract import extract_tasks

    g = Graph("attention")
    q, k, v = (g.add_input(n, TensorType((1, 2, 40, 16))) for n in "qkv")
    (out,) = add_op(g, SDPA, [q, k, v], {"causal": True})
    g.set_outputs([out])
    assert extract_tasks(g) == []


def test_symbolic_lengths_fused_one_compile():
    """Query and key lengths that are symbols (a prefill of any length; a decode step, one query
    over a cache of any length) still run the fused routine, one compile for every size; causal
    with one symbol for both lengths."""
    import ember

    class Attention(torch.nn.Module):
        def __init__(self, causal):
            super().__init__()
            self.causal = causal

        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)

    seq, past = torch.export.Dim("seq", min=1, max=4096), torch.export.Dim("past", min=1, max=4096)
    example = [torch.rand(1, 2, 8, 64), torch.rand(1, 2, 16, 64), torch.rand(1, 2, 16, 64)]
    cross = ember.compile(Attention(False), example, dynamic_shapes=({2: seq}, {2: past}, {2: past}))
    assert "ember_attention_none(" in cross.source
    for length, keys in [(1, 1), (1, 77), (7, 129), (33, 300), (129, 5)]:
        q, k, v = rand(1, 2, length, 64), rand(1, 2, keys, 64), rand(1, 2, keys, 64)
        want = F.scaled_dot_product_attention(*(torch.from_numpy(x) for x in (q, k, v)))
        np.testing.assert_allclose(cross(q, k, v), want.numpy(), **TOL)
    example = [torch.rand(1, 2, 16, 64) for _ in range(3)]  # distinct: export reads one tensor passed thrice as one
    causal = ember.compile(Attention(True), example, dynamic_shapes=({2: seq}, {2: seq}, {2: seq}))
    assert "ember_attention_none_causal(" in causal.source
    for length in (1, 31, 33, 257):
        q, k, v = rand(1, 2, length, 64), rand(1, 2, length, 64), rand(1, 2, length, 64)
        want = F.scaled_dot_product_attention(*(torch.from_numpy(x) for x in (q, k, v)), is_causal=True)
        np.testing.assert_allclose(causal(q, k, v), want.numpy(), **TOL)


@pytest.mark.parametrize("align", [64, 128])
def test_the_routine_s_scratch_takes_the_target_s_alignment(align):
    class Attention(torch.nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v)

    q, k, v = (torch.from_numpy(rand(1, 2, 40, 16)) for _ in range(3))
    cm = ember.compile(Attention(), example_inputs=(q, k, v), target=Target(align=align))
    assert re.findall(r"aligned_alloc\((\d+),", cm.source) == [str(align)]  # the routine's scratch
    np.testing.assert_allclose(cm(q, k, v).numpy(), torch_sdpa()(q, k, v).numpy(), **TOL)


@pytest.mark.parametrize("past", [5, 127, 130])
def test_appended_row_after_a_cache_read_in_place(past):
    """appended: one query over a cache of `past` keys and the step's own key and value (k_new,
    v_new), the cache read where it is; in layout bshd with the decode step's bool mask, float64
    (the staged stages), and bhsd, against torch over the concatenated keys (past + 1 = 128: the new key alone in the
    last group of a full block)."""
    q, kn, vn = (rand(1, 1, 3, 16) for _ in range(3))
    k, v = rand(1, past, 3, 16), rand(1, past, 3, 16)
    keep = keep_mask(1, 1, 1, past + 1)

    def fn(q, k, v, keep, kn, vn):
        k, v = torch.cat([k, kn], 1).transpose(1, 2), torch.cat([v, vn], 1).transpose(1, 2)
        return F.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=keep).transpose(1, 2)

    check_op(SDPA, [q, k, v, keep, kn, vn], {"layout": "bshd", "appended": True}, **TOL, targets=("c", "python"),
             torch_fn=fn)
    wide = [x.astype("float64") for x in (q, k, v, kn, vn)]  # the staged stages: the keys concatenated
    check_op(SDPA, wide, {"layout": "bshd", "appended": True}, rtol=1e-6, atol=1e-8)
    heads = [np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v, kn, vn)]
    check_op(SDPA, heads, {"appended": True, "causal": False}, **TOL,
             torch_fn=lambda q, k, v, kn, vn: F.scaled_dot_product_attention(q, torch.cat([k, kn], 2),
                                                                                torch.cat([v, vn], 2)))

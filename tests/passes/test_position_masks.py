"""Masks made of positions (ember/passes/position_masks.py): a decode step's arange against the
cache's size keeps every key (also as torch's trace of transformers writes it, constants added
to both and the mask broadcast, which fold_attention then drops from the attention), a
prefill's two aranges the causal triangle (also as onnxscript's causal attention writes it,
which fold_attention then folds to the causal kernel), each judged from how it is made (the
lengths symbolic, as an export writes them) and checked against the mask's values at a few
lengths; the masks that differ from those (one position too many, an arange from 1, the
triangle the other way, the size less one) are left unread."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pass_check import check_same

from ember import dims
from ember.graph import Graph, TensorType
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.passes.dce import dce
from ember.passes.fold_attention import fold_attention
from ember.passes.position_masks import ALL, CAUSAL, kept_keys


def _decode_mask(past="past", extra: int = 0, start: int = 0, rows_plus=None, cols_plus=None,
                 expand: bool = False) -> Graph:
    """less_equal(arange(start, past + 1 + extra), size(past)) over (1, 1, 1, past + 1 + extra);
    rows_plus and cols_plus: constants added to the size and the arange (torch's trace of
    transformers: past + arange(1), arange(past + 1) + 0); expand: the mask broadcast to 2 heads."""
    g = Graph(name="decode_mask")
    cache = g.add_input("k", TensorType((1, past, 2, 4)))
    (ar,) = add_op(g, "arange", [], {"length": dims.add(past, 1 + extra), "start": start})
    if cols_plus is not None:
        (ar,) = add_op(g, "add", [ar, g.add_constant(np.array(cols_plus, np.int64), "cols_plus")])
    (cols,) = add_op(g, "unsqueeze", [ar], {"axes": (0, 1, 2)})
    bind = (("past", 0, 1),) if isinstance(past, str) else ()
    (n,) = add_op(g, "size", [cache], {"dim": past, "bind": bind})
    if rows_plus is not None:
        (n,) = add_op(g, "add", [g.add_constant(np.array(rows_plus, np.int64), "rows_plus"), n])
    (rows,) = add_op(g, "reshape", [n], {"shape": (1, 1, 1, 1)})
    g.outputs = add_op(g, "less_equal", [cols, rows])
    if expand:
        g.outputs = add_op(g, "expand", g.outputs, {"shape": (1, 2, 1, dims.add(past, 1 + extra))})
    return g


def _prefill_mask(seq="seq", swapped: bool = False, sub: bool = False, g: Graph | None = None,
                  rows_plus=None, cols_plus=None, dtype: str = "int64") -> Graph:
    """less_equal(cols, rows) of one arange(seq), the columns on the last axis (swapped: the rows;
    sub: as onnxscript's causal attention writes it, less_equal(sub(cols, rows), 0) over (seq, seq));
    rows_plus and cols_plus: constants added to a second arange of the rows and to the columns' (torch's
    trace of transformers' GPT-2 prefill: cache_position = 0 + arange(seq), one per side); dtype:
    the positions'."""
    g = g or Graph(name="prefill_mask")
    g.add_input("ids", TensorType((1, seq)))
    (ar,) = add_op(g, "arange", [], {"length": seq, "dtype": dtype})
    if rows_plus is not None or cols_plus is not None:
        (second,) = add_op(g, "arange", [], {"length": seq, "dtype": dtype})
        plus = [add_op(g, "add", [x, g.add_constant(np.array(c).astype(dtype), f"plus_{i}")])[0] if c is not None else x
                for i, (x, c) in enumerate(((ar, cols_plus), (second, rows_plus)))]
        (cols,) = add_op(g, "unsqueeze", [plus[0]], {"axes": (0, 1, 2)})
        (rows,) = add_op(g, "unsqueeze", [plus[1]], {"axes": (0, 1, 3)})
        g.outputs = add_op(g, "less_equal", [cols, rows])
        return g
    if sub:
        (rows,) = add_op(g, "reshape", [ar], {"shape": (seq, 1)})
        (d,) = add_op(g, "sub", [ar, rows])
        g.outputs = add_op(g, "less_equal", [d, g.add_constant(np.array(0, dtype), "zero")])
        return g
    (cols,) = add_op(g, "unsqueeze", [ar], {"axes": (0, 1, 2)})
    (rows,) = add_op(g, "unsqueeze", [ar], {"axes": (0, 1, 3)})
    g.outputs = add_op(g, "less_equal", [rows, cols] if swapped else [cols, rows])
    return g


@pytest.mark.parametrize("make,options,kind", [(_decode_mask, {}, ALL), (_prefill_mask, {}, CAUSAL),
                                               (_decode_mask, {"extra": 1}, None),
                                               (_decode_mask, {"start": 1}, None),
                                               (_prefill_mask, {"sub": True}, CAUSAL),
                                               (_prefill_mask, {"swapped": True}, None),
                                               (_decode_mask, {"rows_plus": [0], "cols_plus": 0, "expand": True}, ALL),
                                               (_decode_mask, {"rows_plus": [-1]}, None),
                                               (_decode_mask, {"rows_plus": [1], "cols_plus": 1}, ALL),
                                               (_decode_mask, {"cols_plus": 1}, None),
                                               (_prefill_mask, {"rows_plus": 0, "cols_plus": 0}, CAUSAL),
                                               (_prefill_mask, {"rows_plus": [3], "cols_plus": 3}, CAUSAL),
                                               (_prefill_mask, {"rows_plus": -1, "cols_plus": 0}, None),
                                               (_prefill_mask, {"cols_plus": 1}, None),
                                               (_prefill_mask, {"rows_plus": [-1]}, None)])
def test_kept_keys_as_the_mask_computes(make, options, kind):
    g = make(**options)
    assert kept_keys(g.outputs[0], g.constants) == kind
    for n in (2, 5):
        g = make(n, **options)
        x = np.random.default_rng(n).standard_normal(g.inputs[0].type.shape).astype(np.float32)
        (mask,) = evaluate(g, x)
        tril = np.tril(np.ones(mask.shape[-2:], bool))
        assert mask.all() == (kind == ALL)
        assert (mask.shape[-2] == mask.shape[-1] and (mask.reshape(tril.shape) == tril).all()) == (kind == CAUSAL)


def test_prefill_mask_shifted_near_overflow_is_left_unread():
    """arange + c on both sides with c near int64's limit: the sums could wrap, so no shift is
    taken for nothing (the mask stays an array)."""
    g = _prefill_mask(rows_plus=2**62 + 1, cols_plus=2**62 + 1)
    assert kept_keys(g.outputs[0], g.constants) is None


@pytest.mark.parametrize("n, options", [(8, {"dtype": "int32", "rows_plus": 2**31 - 4, "cols_plus": 2**31 - 4}),
                                        (8, {"dtype": "uint64", "sub": True}), (8, {"dtype": "uint32", "sub": True}),
                                        (200, {"dtype": "int8"}), (2100, {"dtype": "float16"})])
def test_positions_that_wrap_or_round_are_left_unread(n, options):
    """The triangle read from positions that do not stay integers: int32 positions plus a constant
    near 2**31 wrap, uint64's cols - rows is large where a key comes after its query, int8's
    arange wraps at 128, float16's positions round from 2048 on. Each was read as causal, and its
    attention given the causal kernel (a silent wrong answer); now none is read."""
    g = _prefill_mask(**options)
    assert kept_keys(g.outputs[0], g.constants) is None
    g = _prefill_mask(n, **options)
    (mask,) = evaluate(g, np.zeros((1, n), np.float32))
    assert not (mask.reshape(n, n) == np.tril(np.ones((n, n), bool))).all()  # (what the causal kernel would keep)


@given(dtype=st.sampled_from(["int64", "int32", "int16", "uint32", "float32"]), sub=st.booleans(),
       swapped=st.booleans(), shift=st.sampled_from([None, 0, 3, -2, 2**30, 2**31 - 4, 2**62 + 1]),
       other=st.sampled_from([None, 0, 3, -1, 2**31 - 4]))
@settings(max_examples=40, deadline=None)
def test_a_mask_read_as_causal_is_the_triangle(dtype, sub, swapped, shift, other):
    """Soundness over masks near the forms read (a dtype, a constant added to either side, the
    sides swapped, onnxscript's subtraction): a mask read as causal is the lower triangle at every
    length tried (300: past int8's and int16's small ranges of shifts)."""
    info = np.finfo(dtype) if dtype == "float32" else np.iinfo(dtype)
    options = {"dtype": dtype, "sub": sub, "swapped": swapped}
    if shift is not None or other is not None:  # (the constants' form has no sub or swap of its own)
        if any(c is not None and not info.min <= c <= info.max for c in (shift, other)):
            return
        options = {"dtype": dtype, "cols_plus": shift, "rows_plus": other}
    g = _prefill_mask(**options)
    if kept_keys(g.outputs[0], g.constants) == CAUSAL:
        for n in (3, 9, 300):
            (mask,) = evaluate(_prefill_mask(n, **options), np.zeros((1, n), np.float32))
            np.testing.assert_array_equal(mask.reshape(n, n), np.tril(np.ones((n, n), bool)), err_msg=f"{n}")


def test_onnxscript_causal_attention_folds_to_the_causal_kernel():
    """softmax(q kT + where(equal(where(m, 1, 0), 0), -inf, 0)) v, m the triangle of positions:
    torch.onnx's causal scaled_dot_product_attention as onnxscript writes it, the causal kernel."""
    g = Graph(name="causal")
    q, k, v = (g.add_input(x, TensorType((1, 2, 6, 8))) for x in "qkv")
    (m,) = _prefill_mask(6, sub=True, g=g).outputs
    f = lambda x, name: g.add_constant(np.array(x, np.float32), name)  # noqa: E731
    (kept,) = add_op(g, "where", [m, f(1.0, "one"), f(0.0, "zero_f")])
    (dropped,) = add_op(g, "equal", [kept, f(0.0, "zero_e")])
    (mask,) = add_op(g, "where", [dropped, f(-np.inf, "fill"), f(0.0, "zero_m")])
    (kt,) = add_op(g, "transpose", [k], {"perm": (0, 1, 3, 2)})
    (s,) = add_op(g, "matmul", [q, kt])
    (s,) = add_op(g, "add", [s, mask])
    (p,) = add_op(g, "softmax", [s], {"axis": -1})
    g.set_outputs(add_op(g, "matmul", [p, v]))
    out = dce(fold_attention(g))
    (attention,) = [n for n in out.nodes if n.op == "scaled_dot_product_attention"]
    assert attention.attrs["causal"] and len(attention.inputs) == 3
    check_same(g, out)


def test_torch_decode_mask_is_dropped_from_the_attention():
    """torch's trace of a transformers decode step passes arange(past + 1) + 0 <= past + arange(1)
    (broadcast) to scaled_dot_product_attention: every key, dropped; one that keeps fewer stays."""
    for rows_plus, dropped in (([0], True), ([-1], False)):
        g = _decode_mask(rows_plus=rows_plus, cols_plus=0, expand=True)
        (mask,) = g.outputs
        q = g.add_input("q", TensorType((1, 2, 1, 4)))
        kv = [g.add_input(x, TensorType((1, 2, dims.add("past", 1), 4))) for x in "ab"]
        g.set_outputs(add_op(g, "scaled_dot_product_attention", [q, *kv, mask]))
        out = dce(fold_attention(g))
        (attention,) = [n for n in out.nodes if n.op == "scaled_dot_product_attention"]
        assert (len(attention.inputs) == 3) == dropped

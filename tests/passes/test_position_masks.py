"""Masks made of positions (ember/passes/position_masks.py): a decode step's arange against the
cache's size keeps every key, a prefill's two aranges the causal triangle (also as onnxscript's
causal attention writes it, which fold_attention then folds to the causal kernel), each judged
from how it is made (the lengths symbolic, as an export writes them) and checked against the
mask's values at a few lengths; the masks that differ from those (one position too many, an
arange from 1, the triangle the other way) are left unread."""

from __future__ import annotations

import numpy as np
import pytest
from pass_check import check_same

from ember import dims
from ember.graph import Graph, TensorType
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.passes.dce import dce
from ember.passes.fold_attention import fold_attention
from ember.passes.position_masks import ALL, CAUSAL, kept_keys


def _decode_mask(past="past", extra: int = 0, start: int = 0) -> Graph:
    """less_equal(arange(start, past + 1 + extra), size(past)) over (1, 1, 1, past + 1 + extra)."""
    g = Graph(name="decode_mask")
    cache = g.add_input("k", TensorType((1, past, 2, 4)))
    (ar,) = add_op(g, "arange", [], {"length": dims.add(past, 1 + extra), "start": start})
    (cols,) = add_op(g, "unsqueeze", [ar], {"axes": (0, 1, 2)})
    bind = (("past", 0, 1),) if isinstance(past, str) else ()
    (n,) = add_op(g, "size", [cache], {"dim": past, "bind": bind})
    (rows,) = add_op(g, "reshape", [n], {"shape": (1, 1, 1, 1)})
    g.outputs = add_op(g, "less_equal", [cols, rows])
    return g


def _prefill_mask(seq="seq", swapped: bool = False, sub: bool = False, g: Graph | None = None) -> Graph:
    """less_equal(cols, rows) of one arange(seq), the columns on the last axis (swapped: the rows;
    sub: as onnxscript's causal attention writes it, less_equal(sub(cols, rows), 0) over (seq, seq))."""
    g = g or Graph(name="prefill_mask")
    g.add_input("ids", TensorType((1, seq)))
    (ar,) = add_op(g, "arange", [], {"length": seq})
    if sub:
        (rows,) = add_op(g, "reshape", [ar], {"shape": (seq, 1)})
        (d,) = add_op(g, "sub", [ar, rows])
        g.outputs = add_op(g, "less_equal", [d, g.add_constant(np.array(0, np.int64), "zero")])
        return g
    (cols,) = add_op(g, "unsqueeze", [ar], {"axes": (0, 1, 2)})
    (rows,) = add_op(g, "unsqueeze", [ar], {"axes": (0, 1, 3)})
    g.outputs = add_op(g, "less_equal", [rows, cols] if swapped else [cols, rows])
    return g


@pytest.mark.parametrize("make,options,kind", [(_decode_mask, {}, ALL), (_prefill_mask, {}, CAUSAL),
                                               (_decode_mask, {"extra": 1}, None),
                                               (_decode_mask, {"start": 1}, None),
                                               (_prefill_mask, {"sub": True}, CAUSAL),
                                               (_prefill_mask, {"swapped": True}, None)])
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

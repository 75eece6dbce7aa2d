"""Masks made of positions (ember/passes/position_masks.py): a decode step's arange against the
cache's size keeps every key, a prefill's two aranges the causal triangle, each judged from how
it is made (the lengths symbolic, as an export writes them) and checked against the mask's
values at a few lengths; the masks that differ from those (one position too many, an arange
from 1, the triangle the other way) are left unread."""

from __future__ import annotations

import numpy as np
import pytest

from ember import dims
from ember.graph import Graph, TensorType
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
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


def _prefill_mask(seq="seq", swapped: bool = False) -> Graph:
    """less_equal(cols, rows) of one arange(seq), the columns on the last axis (swapped: the rows)."""
    g = Graph(name="prefill_mask")
    g.add_input("ids", TensorType((1, seq)))
    (ar,) = add_op(g, "arange", [], {"length": seq})
    (cols,) = add_op(g, "unsqueeze", [ar], {"axes": (0, 1, 2)})
    (rows,) = add_op(g, "unsqueeze", [ar], {"axes": (0, 1, 3)})
    g.outputs = add_op(g, "less_equal", [rows, cols] if swapped else [cols, rows])
    return g


@pytest.mark.parametrize("make,options,kind", [(_decode_mask, {}, ALL), (_prefill_mask, {}, CAUSAL),
                                               (_decode_mask, {"extra": 1}, None),
                                               (_decode_mask, {"start": 1}, None),
                                               (_prefill_mask, {"swapped": True}, None)])
def test_kept_keys_as_the_mask_computes(make, options, kind):
    assert kept_keys(make(**options).outputs[0]) == kind
    for n in (2, 5):
        g = make(n, **options)
        x = np.random.default_rng(n).standard_normal(g.inputs[0].type.shape).astype(np.float32)
        (mask,) = evaluate(g, x)
        tril = np.tril(np.ones(mask.shape[-2:], bool))
        assert mask.all() == (kind == ALL)
        assert (mask.shape[-2] == mask.shape[-1] and (mask[0, 0] == tril).all()) == (kind == CAUSAL)

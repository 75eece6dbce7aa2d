"""ember.passes.fold_repeat_kv: key/value heads repeated for the attention (unsqueeze, expand,
reshape: transformers' repeat_kv and ONNX exports of it) become the attention's gqa over the
heads as they are, the repeat gone; the compiled step against torch's attention on the repeated
heads (rtol 1e-4, atol 1e-5). Heads tiled rather than repeated are left as they are."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import ember
from ember.graph.core import Graph, TensorType
from ember.ops.attention import SDPA
from ember.ops.nodes import add_op
from ember.passes.dce import dce
from ember.passes.fold_repeat_kv import fold_repeat_kv

RNG = np.random.default_rng()


def repeat_graph(tiled: bool = False) -> Graph:
    """One query of 4 heads over k and v of 2 heads, 40 positions, each head repeated twice
    (tiled: the heads' whole list twice instead, head h reading h % 2, which gqa is not)."""
    g = Graph("repeat")
    q = g.add_input("q", TensorType((1, 4, 1, 16)))
    kv = []
    for name in "kv":
        x = g.add_input(name, TensorType((1, 2, 40, 16)))
        (x,) = add_op(g, "unsqueeze", [x], {"axes": (1 if tiled else 2,)})
        (x,) = add_op(g, "expand", [x], {"shape": (1, 2, 2, 40, 16)})
        (x,) = add_op(g, "reshape", [x], {"shape": (1, 4, 40, 16)})
        kv.append(x)
    g.set_outputs(add_op(g, SDPA, [q, *kv]))
    return g


def test_repeat_becomes_gqa_and_matches_torch():
    folded = dce(fold_repeat_kv(repeat_graph()))  # (the repeats left to no reader go)
    (attn,) = [n for n in folded.nodes if n.op == SDPA]
    assert attn.attrs["gqa"] and [v.name for v in attn.inputs[1:]] == ["k", "v"]
    assert not {"expand", "reshape", "unsqueeze"} & {n.op for n in folded.nodes}
    cm = ember.compile(repeat_graph())
    assert "ember_attention_decode_none_float32_16_16_2(" in cm.source  # the key/value heads grouped
    q = RNG.uniform(-1, 1, (1, 4, 1, 16)).astype("float32")
    k, v = RNG.uniform(-1, 1, (2, 1, 2, 40, 16)).astype("float32")
    want = F.scaled_dot_product_attention(*(torch.from_numpy(x) for x in (q, k, v)), enable_gqa=True).numpy()
    np.testing.assert_allclose(cm(q, k, v), want, rtol=1e-4, atol=1e-5)


def test_tiled_heads_are_left():
    g = repeat_graph(tiled=True)
    assert fold_repeat_kv(g).nodes[-1].attrs["gqa"] is False

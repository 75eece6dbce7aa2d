"""Operators of the ai.onnx.preview domain.

- FlexAttention (1): attention with optional score_mod and prob_mod subgraphs. Without them it is
  one `scaled_dot_product_attention` (the fused kernel where the dtype allows), computed in the
  softmax precision (float32 for float16 inputs: cast in, cast back); grouped-query heads reach
  it as a broadcast batch (q as (B, Hkv, G, L, E) against k, v as (B, Hkv, 1, S, E)), so no K/V
  head is copied. With a subgraph the attention is unfused: matmul -> scale -> score_mod ->
  softmax -> prob_mod -> matmul, each subgraph imported inline over the (B, Hq, L, S) scores or
  probabilities (control.inline; its nodes fuse with the elementwise neighbours as any others),
  the K/V heads expanded to the query heads.
"""

from __future__ import annotations

import math

import numpy as np

from ..node import NodeContext, to_dtype
from ..registry import converts
from .control import inline

PREVIEW = "ai.onnx.preview"


@converts("FlexAttention", domain=PREVIEW)
def _flex_attention(cx: NodeContext):
    q, k, v = cx.input(0), cx.input(1), cx.input(2)
    tq, tk, tv = cx.type(q), cx.type(k), cx.type(v)
    if not tq.rank == tk.rank == tv.rank == 4:
        raise cx.error(f"Q, K and V must be rank-4, got {tq.shape}, {tk.shape}, {tv.shape}")
    (b, hq, n, e), hkv = cx.static_shape(q, "Q"), cx.static_shape(k, "K")[1]
    if hq % hkv:
        raise cx.error(f"Q's {hq} heads are not a multiple of K's {hkv}")
    precision = cx.attr("softmax_precision")
    compute = to_dtype(precision, cx.where) if precision is not None else \
        "float32" if tq.dtype in ("float16", "bfloat16") else tq.dtype
    scale = cx.attr("scale") or 1.0 / math.sqrt(e)
    q, k, v = (t if cx.type(t).dtype == compute else cx.op("cast", [t], {"dtype": compute}) for t in (q, k, v))
    score_mod, prob_mod = cx.attr("score_mod"), cx.attr("prob_mod")
    group = hq // hkv
    if score_mod is None and prob_mod is None:
        if group > 1:
            q = cx.op("reshape", [q], {"shape": (b, hkv, group, n, e)})
            k, v = (cx.op("unsqueeze", [t], {"axes": (2,)}) for t in (k, v))
        y = cx.op("scaled_dot_product_attention", [q, k, v, None], {"causal": False, "scale": float(scale)})
        y = cx.op("reshape", [y], {"shape": (b, hq, n, cx.type(y).shape[-1])}) if group > 1 else y
    else:
        if group > 1:
            k, v = (_repeat_heads(cx, t, group) for t in (k, v))
        scores = cx.op("matmul", [q, cx.op("transpose", [k], {"perm": (0, 1, 3, 2)})])
        scores = cx.op("mul", [scores, np.array(scale, compute)])
        if score_mod is not None:
            scores = _modify(cx, score_mod, scores, compute, "score_mod")
        probs = cx.op("softmax", [scores], {"axis": -1})
        if prob_mod is not None:
            probs = _modify(cx, prob_mod, probs, compute, "prob_mod")
        y = cx.op("matmul", [probs, v])
    return [y if cx.type(y).dtype == tv.dtype else cx.op("cast", [y], {"dtype": tv.dtype})]


def _repeat_heads(cx: NodeContext, t, group: int):
    """K or V (B, Hkv, S, D) with each head repeated `group` times: (B, Hkv * group, S, D)."""
    b, h, s, d = cx.static_shape(t, "K/V")
    t = cx.op("expand", [cx.op("unsqueeze", [t], {"axes": (2,)})], {"shape": (b, h, group, s, d)})
    return cx.op("reshape", [t], {"shape": (b, h * group, s, d)})


def _modify(cx: NodeContext, graph, x, dtype: str, what: str):
    """Subgraph `graph` (one tensor in, one out, of x's shape and type) applied to x, inline."""
    if len(graph.input) != 1 or len(graph.output) != 1:
        raise cx.error(f"{what} must take one tensor and give one, got {len(graph.input)} inputs and "
                       f"{len(graph.output)} outputs")
    (y,) = inline(cx, graph, [x])
    if cx.type(y).shape != cx.type(x).shape:
        raise cx.error(f"{what} changes the shape {cx.type(x).shape} to {cx.type(y).shape}")
    return y if cx.type(y).dtype == dtype else cx.op("cast", [y], {"dtype": dtype})

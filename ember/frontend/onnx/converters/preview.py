"""Operators of the ai.onnx.preview domain.

- FlexAttention (1): attention with optional score_mod and prob_mod subgraphs. Without them it is
  one `scaled_dot_product_attention` (the fused kernel where the dtype allows), computed in the
  softmax precision (float32 for float16 inputs: cast in, cast back); grouped-query heads reach
  it as a broadcast batch (q as (B, Hkv, G, L, E) against k, v as (B, Hkv, 1, S, E)), so no K/V
  head is copied. A score_mod that adds a constant bias to the scores or keeps them where a
  constant condition holds (-inf elsewhere: a causal mask, a relative-position bias; constants
  once its Shape -> Range arithmetic folds) is that attention's mask (`_as_mask`). Any other
  score_mod, or a prob_mod, makes the attention unfused: matmul -> scale -> score_mod -> softmax
  -> prob_mod -> matmul, each subgraph imported inline over the (B, Hq, L, S) scores or
  probabilities (control.inline; its nodes fuse with the elementwise neighbours as any others),
  the K/V heads expanded to the query heads.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

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
    group, s = hq // hkv, cx.static_shape(k, "K")[2]
    mask = None if score_mod is None or prob_mod is not None else _as_mask(cx, score_mod, (b, hq, n, s), compute)
    if prob_mod is None and (score_mod is None or mask is not None):
        if group > 1:
            q = cx.op("reshape", [q], {"shape": (b, hkv, group, n, e)})
            k, v = (cx.op("unsqueeze", [t], {"axes": (2,)}) for t in (k, v))
            if mask is not None:  # (..., Hq, L, S) -> (..., Hkv, G, L, S)
                mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
                mask = mask[:, :, None] if mask.shape[1] == 1 else mask.reshape(-1, hkv, group, *mask.shape[2:])
        y = cx.op("scaled_dot_product_attention", [q, k, v, mask], {"causal": False, "scale": float(scale)})
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


def _as_mask(cx: NodeContext, graph, shape: tuple[int, ...], dtype: str) -> np.ndarray | None:
    """score_mod as a mask of scaled_dot_product_attention, where it is one: its output node adds
    a constant bias to the scores (`Add`), or keeps them where a constant condition holds and
    gives -inf elsewhere (`Where`), and no other node reads the scores but `Shape`. The bias or
    condition is imported from the subgraph's other nodes (the scores a stand-in of their shape);
    a condition keeps a key for every query and a bias is finite somewhere in every row (a row
    with none: NaN in ONNX's reference, which the fused attention need not match). None otherwise."""
    subgraphs = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    if len(graph.input) != 1 or len(graph.output) != 1 or any(a.type in subgraphs for nd in graph.node
                                                               for a in nd.attribute):
        return None
    scores, out = graph.input[0].name, graph.output[0].name
    producer = next((nd for nd in graph.node if out in nd.output), None)
    others = [nd for nd in graph.node if nd is not producer]
    if producer is None or producer.domain not in ("", "ai.onnx") or any(
            scores in nd.input for nd in others if nd.op_type != "Shape"):
        return None
    ins = list(producer.input)
    if producer.op_type == "Add" and len(ins) == 2 and ins.count(scores) == 1:
        form, operands = "add", [i for i in ins if i != scores]
    elif producer.op_type == "Where" and len(ins) == 3 and ins[1:].count(scores) == 1 and ins[0] != scores:
        form, operands = ("keep" if ins[1] == scores else "drop"), [ins[0], ins[2] if ins[1] == scores else ins[1]]
    else:
        return None
    prefix = onnx.helper.make_graph(others, "score_mod_operands", [graph.input[0]],
                                    [onnx.helper.make_empty_tensor_value_info(o) for o in operands],
                                    list(graph.initializer))
    stand_in = np.broadcast_to(np.zeros((), dtype), shape)
    values = inline(cx, prefix, [stand_in])
    if not all(isinstance(t, np.ndarray) for t in values) or values[0].ndim > 4:
        return None
    if form == "add":
        (bias,) = values
        full = np.broadcast_to(bias, np.broadcast_shapes(bias.shape, shape)) if bias.dtype == dtype else None
        return bias if full is not None and full.shape == shape and np.isfinite(full).any(-1).all() else None
    cond, fill = values
    if cond.dtype != bool or not (fill.dtype == dtype and fill.size and np.all(fill == -np.inf)):
        return None
    keep = cond if form == "keep" else ~cond
    full = np.broadcast_to(keep, np.broadcast_shapes(keep.shape, shape))
    return keep if full.shape == shape and full.any(-1).all() else None

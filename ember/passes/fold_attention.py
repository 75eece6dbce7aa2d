"""Attention written out as products and a softmax becomes one scaled_dot_product_attention, so
that it runs as the fused kernel (ember.ops.attention) instead of materializing the scores:

    matmul(softmax(matmul(q, kT) [* c | / c] [+ mask], axis=-1), v)
        -> scaled_dot_product_attention(q, T(kT), v [, mask]; scale=c | 1/c | 1)

which is how ONNX exports of BERT and GPT-2 (and models written with explicit products in torch)
spell attention. And a constant mask that says nothing the kernel does not know is dropped:

    scaled_dot_product_attention(q, k, v, mask)  -> scaled_dot_product_attention(q, k, v; causal=True)
        where mask is a constant bool lower triangle (key j kept for query i when j <= i: GPT-2's)
    scaled_dot_product_attention(q, k, v, mask)  -> scaled_dot_product_attention(q, k, v)
        where mask is a constant bool of all True, or a constant float of all zeros (BERT's, with
        no padding)

so that the kernel computes the causal mask from the indices (and skips the keys above the
diagonal) instead of reading a mask. kT is the keys with their last two axes swapped; when a transpose made it, T is
folded into that transpose (so that fold_transposes, which runs next, sees the head split of
q, k and v). c is a scalar constant; the mask is added (a float mask) and must broadcast to the
scores. Each intermediate (the scores, scaled, masked, and the softmax) must have no other use.
"""

from __future__ import annotations

import numpy as np

from ..graph.core import Graph, Node, Value
from ..ops.registry import OpTypeError
from .rewrite import Rewriter, rebuild

SDPA = "scaled_dot_product_attention"


def fold_attention(graph: Graph) -> Graph:
    uses: dict[Value, int] = {}
    for node in graph.nodes:
        for v in node.inputs:
            uses[v] = uses.get(v, 0) + 1
    for v in graph.outputs:
        uses[v] = uses.get(v, 0) + 1
    if not any((n.op == "matmul" and n.inputs[0].node is not None and n.inputs[0].node.op == "softmax")
               or (n.op == SDPA and len(n.inputs) == 4 and graph.is_constant(n.inputs[3])) for n in graph.nodes):
        return graph  # nothing to fold: the graph itself (the pipeline reports it unchanged)
    return rebuild(graph, lambda rw, node, inputs: _fold(rw, node, uses) or _plain_mask(rw, node, inputs))


def _plain_mask(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
    """The attention without its constant mask, where the mask keeps every key or exactly the
    causal ones (see the module doc), or None."""
    if node.op != SDPA or len(inputs) != 4:
        return None
    mask = rw.constant_data(inputs[3])
    if mask is None:
        return None
    rank = node.outputs[0].type.rank
    heads_first = node.attrs["layout"] == "bhsd"
    q, k = (x.type.shape for x in inputs[:2])
    l_dim, s_dim = (q[-2], k[-2]) if heads_first else (q[-3], k[-3])
    if not (isinstance(l_dim, int) and isinstance(s_dim, int)) or mask.ndim > rank:
        return None
    full = np.broadcast_to(mask, mask.shape[:-2] + (l_dim, s_dim)) if mask.ndim >= 2 else np.broadcast_to(
        mask, (l_dim, s_dim))
    causal = node.attrs["causal"]
    if mask.dtype == bool and full.all():
        pass
    elif mask.dtype == bool and (full == np.tril(np.ones((l_dim, s_dim), bool))).all():
        causal = True
    elif mask.dtype != bool and not full.any():
        pass
    else:
        return None
    return rw.emit(SDPA, inputs[:3], {**node.attrs, "causal": causal}, hint=node.name,
                   out_names=[node.outputs[0].name])


def _fold(rw: Rewriter, node: Node, uses: dict[Value, int]) -> list[Value] | None:
    """The attention that `node` (a matmul of a softmax and v) ends, or None."""
    if node.op != "matmul":
        return None
    p, v = node.inputs
    sole = lambda x: x.node is not None and uses.get(x, 0) == 1  # noqa: E731
    if not (sole(p) and p.node.op == "softmax" and p.node.attrs["axis"] % p.type.rank == p.type.rank - 1):
        return None
    x = p.node.inputs[0]
    found, mask = _scaled_scores(rw, x, sole), None
    if found is None and sole(x) and x.node.op == "add":
        a, b = x.node.inputs
        found, mask = _scaled_scores(rw, a, sole), b
        if found is None:
            found, mask = _scaled_scores(rw, b, sole), a
    if found is None:
        return None
    q, kt, scale = found
    if min(q.type.rank, kt.type.rank, v.type.rank) < 2 or q.type.dtype != v.type.dtype:
        return None
    k = _swap_last(rw, kt)
    ins = [rw.value(q), k, rw.value(v)] + ([rw.value(mask)] if mask is not None else [])
    try:
        return rw.emit(SDPA, ins, {"causal": False, "scale": scale, "layout": "bhsd"}, hint=node.name,
                       out_names=[node.outputs[0].name])
    except OpTypeError:  # a mask that does not broadcast to the scores, batch dims that do not match
        return None


def _scaled_scores(rw: Rewriter, x: Value, sole) -> tuple[Value, Value, float] | None:
    """(q, kT, scale) when x is matmul(q, kT), times or divided by a scalar constant if at all."""
    scale = 1.0
    if sole(x) and x.node.op in ("mul", "div"):
        a, b = x.node.inputs
        c = _scalar(rw, b)
        if c is None and x.node.op == "mul":
            a, c = b, _scalar(rw, a)
        if c is None or c == 0:
            return None
        x, scale = a, (c if x.node.op == "mul" else 1.0 / c)
    if not (sole(x) and x.node.op == "matmul"):
        return None
    q, kt = x.node.inputs
    return q, kt, scale


def _scalar(rw: Rewriter, v: Value) -> float | None:
    """The value of a constant of one element, or None."""
    data = rw.constant_data(rw.value(v)) if v.node is None else None
    if data is None or data.size != 1 or not np.issubdtype(data.dtype, np.floating):
        return None
    return float(data.reshape(()))


def _swap_last(rw: Rewriter, kt: Value) -> Value:
    """kt with its last two axes swapped, in the new graph: a transpose folded into the one that
    made kt, or none when they cancel."""
    rank = kt.type.rank
    swap = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    source, perm = rw.value(kt), swap
    if kt.node is not None and kt.node.op == "transpose":
        first = tuple(a % rank for a in kt.node.attrs["perm"])
        source, perm = rw.value(kt.node.inputs[0]), tuple(first[a] for a in swap)
    if perm == tuple(range(rank)):
        return source
    (out,) = rw.emit("transpose", [source], {"perm": perm}, hint=f"{kt.name}_keys")
    return out

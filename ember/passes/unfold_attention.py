"""For a GPU target, scaled_dot_product_attention written out as products and a softmax:

    scaled_dot_product_attention(q, k, v [, mask]; causal, scale)
        -> matmul(softmax(where(causal, matmul(q, T(k)) * scale, -inf) [+ mask | where mask], axis=-1), v)

since its kernel (ember.ops.attention) is a CPU routine called through te.extern, which the GPU
schedules cannot bind to blocks and threads, while matmul and softmax have GPU schedules. Only
the form the frontends make is unfolded (layout "bhsd", no heads: it runs where fold_attention,
which the GPU target leaves out, would run, before fold_transposes and fold_qkv_split could
change it). A row whose every key is masked out is NaN here (softmax's 0 / 0) where the fused
kernel gives 0; causal needs static sequence lengths. Targets of the CPU family keep the fused
attention: the pass reads the target and changes nothing for them.
"""

from __future__ import annotations

import math

import numpy as np

from ..graph.core import Graph, Node, Value
from .rewrite import Rewriter, rebuild

SDPA = "scaled_dot_product_attention"


def unfold_attention(graph: Graph, target=None) -> Graph:
    if target is None or target.schedules != "gpu" or not any(n.op == SDPA for n in graph.nodes):
        return graph  # nothing to unfold: the graph itself (the pipeline reports it unchanged)
    return rebuild(graph, _unfolded)


def _unfolded(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
    if node.op != SDPA or node.attrs.get("layout", "bhsd") != "bhsd" or node.attrs.get("heads") is not None:
        return None
    q, k, v, *mask = inputs
    rank, dtype = k.type.rank, q.type.dtype
    length, keys, e = (d if isinstance(d, int) else None
                       for d in (q.type.shape[-2], k.type.shape[-2], q.type.shape[-1]))
    if e is None or (node.attrs["causal"] and (length is None or keys is None)):
        return None  # (the scale or the causal mask would need a symbolic size)
    scale = node.attrs["scale"] if node.attrs["scale"] is not None else 1 / math.sqrt(e)
    (kt,) = rw.emit("transpose", [k], {"perm": tuple(range(rank - 2)) + (rank - 1, rank - 2)}, hint=f"{node.name}_kt")
    (s,) = rw.emit("matmul", [q, kt], hint=f"{node.name}_scores")
    (s,) = rw.emit("mul", [s, rw.constant(np.array(scale, dtype))], hint=f"{node.name}_scaled")
    minus_inf = rw.constant(np.array(-np.inf, dtype))
    if node.attrs["causal"]:
        keep = rw.constant(np.tril(np.ones((length, keys), bool)))
        (s,) = rw.emit("where", [keep, s, minus_inf], hint=f"{node.name}_causal")
    if mask:
        m = mask[0]
        (s,) = (rw.emit("where", [m, s, minus_inf], hint=f"{node.name}_masked") if m.type.dtype == "bool"
                else rw.emit("add", [s, m], hint=f"{node.name}_masked"))
    (p,) = rw.emit("softmax", [s], {"axis": -1}, hint=f"{node.name}_p")
    return rw.emit("matmul", [p, v], hint=node.name, out_names=[node.outputs[0].name])

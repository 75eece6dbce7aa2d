"""A decode step's cache read in place: an attention whose keys and values are a cache with the
step's own position concatenated after it reads the two where they are:

    scaled_dot_product_attention(q, concat(k, k_new), concat(v, v_new), mask?)
        -> scaled_dot_product_attention(q, k, v, mask?, k_new, v_new; appended)

(the concatenation on the attention's sequence axis, k_new and v_new one position long). The
concatenation copied the whole cache at every step, a copy that grows with the context; folded,
a cache the caller keeps in one preallocated buffer (benchmarks/models/decode.py: the rows each
step returns written at their position) is read once, by the attention, and never copied. A
concatenation something else reads (a graph output) stays for that reader.
"""

from __future__ import annotations

from ..graph.core import Graph, Node, Value
from ..ops.attention import SDPA
from .rewrite import Rewriter, rebuild


def fold_cache_append(graph: Graph) -> Graph:
    if not any(n.op == SDPA for n in graph.nodes):
        return graph  # unchanged: the same graph
    return rebuild(graph, _fold)


def _fold(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
    if node.op != SDPA or node.attrs["appended"] or node.attrs["heads"] is not None:
        return None
    axis = -3 if node.attrs["layout"] == "bshd" else -2
    parts = [_appended(x, axis) for x in inputs[1:3]]
    if None in parts:
        return None
    (k, kn), (v, vn) = parts
    return rw.emit(SDPA, [inputs[0], k, v, *inputs[3:], kn, vn], {**node.attrs, "appended": True}, hint=node.name,
                   out_names=[node.outputs[0].name])


def _appended(x: Value, axis: int) -> tuple[Value, Value] | None:
    """(cache, row) of x = concat(cache, row) on `axis` with a row one position long, else None."""
    n = x.node
    if n is None or n.op != "concat" or len(n.inputs) != 2 or n.attrs["axis"] % x.type.rank != axis % x.type.rank:
        return None
    cache, row = n.inputs
    return (cache, row) if row.type.shape[axis] == 1 else None

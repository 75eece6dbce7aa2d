"""Grouped key/value heads repeated for the attention (transformers' repeat_kv, which a model
that passes a mask makes, and ONNX exports of grouped attention) read as they are:

    scaled_dot_product_attention(q, reshape(expand(unsqueeze(k, -3))), reshape(...(v)), mask?)
        -> scaled_dot_product_attention(q, k, v, mask?; gqa)

(layout bhsd: k (..., Hkv, S, E) given a one-long axis before its sequence (an unsqueeze or a
reshape), broadcast to G on it, and reshaped into Hkv G heads: head h is k's head h // G, what
`gqa` reads). The repeat copied the keys and values G times at every call, and hid a decode
step's cache behind it; folded, the decode routine reads each key/value head once for the G
query heads of its group, and a cache concatenated with the step's row is left right before
the attention, where fold_cache_append makes it an appended attention read in place. A repeat
something else also reads stays for that reader.
"""

from __future__ import annotations

from ..graph.core import Graph, Node, Value
from ..ops.attention import SDPA
from .rewrite import Rewriter, rebuild


def fold_repeat_kv(graph: Graph) -> Graph:
    if not any(n.op == SDPA for n in graph.nodes):
        return graph  # unchanged: the same graph
    return rebuild(graph, _fold)


def _fold(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
    attrs = node.attrs
    if node.op != SDPA or attrs["gqa"] or attrs["layout"] != "bhsd" or attrs["heads"] is not None or \
            attrs["appended"]:
        return None
    parts = [_repeated(x) for x in inputs[1:3]]
    if None in parts or parts[0][1] != parts[1][1]:
        return None
    (k, _), (v, _) = parts
    return rw.emit(SDPA, [inputs[0], k, v, *inputs[3:]], {**attrs, "gqa": True}, hint=node.name,
                   out_names=[node.outputs[0].name])


def _repeated(x: Value) -> tuple[Value, int] | None:
    """(k, G) where x is k's heads each repeated G times (see the module doc), else None."""
    merge = x.node
    spread = merge.inputs[0].node if merge is not None and merge.op == "reshape" else None
    axis = spread.inputs[0].node if spread is not None and spread.op == "expand" else None
    if axis is None or axis.op not in ("unsqueeze", "reshape"):
        return None
    k = axis.inputs[0]
    shape = tuple(k.type.shape)
    if len(shape) < 3 or tuple(axis.outputs[0].type.shape) != shape[:-2] + (1,) + shape[-2:]:
        return None
    spread_shape = tuple(spread.outputs[0].type.shape)
    groups = spread_shape[-3]
    if spread_shape != shape[:-2] + (groups,) + shape[-2:] or not isinstance(groups, int) or \
            not isinstance(shape[-3], int) or tuple(x.type.shape) != shape[:-3] + (shape[-3] * groups,) + shape[-2:]:
        return None
    return k, groups

"""Common subexpression elimination: two nodes that apply the same operator to the same inputs
with the same attributes compute the same values, so the later one is replaced by the earlier
one; constants with the same dtype, shape and bytes are merged first (same_bytes), so that nodes
on equal weights merge too. One walk in
topological order: a merge makes the users of the merged values identical, so chains merge in
the same walk.
"""

from __future__ import annotations

from ..graph.core import Graph, Node, Value
from .rewrite import Rewriter
from .same_bytes import SameBytes


def cse(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    first: SameBytes[Value] = SameBytes()  # the constant kept for each content
    by_type: dict[tuple, int] = {}
    for data in graph.constants.values():
        by_type[(data.dtype.name, data.shape)] = by_type.get((data.dtype.name, data.shape), 0) + 1
    for name, data in graph.constants.items():
        if by_type[(data.dtype.name, data.shape)] > 1:  # only equal-typed constants can be equal
            kept = first.setdefault(data, lambda name=name: graph.value(name))
            rw.alias(graph.value(name), rw.value(kept))

    seen: dict[tuple, Node] = {}  # (op, inputs, attrs) -> the first node of the new graph
    for node in graph.nodes:
        ins = rw.inputs(node)
        key = (node.op, tuple(id(v) for v in ins), node.attrs, tuple(id(r) for r in node.regions))
        same = seen.get(key)
        if same is not None and _same_types(node, same) and rw.replace(node, same.outputs):
            continue
        outs = rw.copy(node, ins)
        seen.setdefault(key, outs[0].node)
    return rw.finish()


def _same_types(node: Node, other: Node) -> bool:
    return [v.type for v in node.outputs] == [v.type for v in other.outputs]

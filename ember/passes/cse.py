"""Common subexpression elimination: two nodes that apply the same operator to the same inputs
with the same attributes compute the same values, so the later one is replaced by the earlier
one; constants with the same dtype, shape and bytes are merged first, so that nodes on equal
weights merge too (their bytes compared in full only where a sample of 64 agrees). One walk in
topological order: a merge makes the users of the merged values identical, so chains merge in
the same walk.
"""

from __future__ import annotations

import numpy as np

from ..graph.core import Graph, Node, Value
from .rewrite import Rewriter


def cse(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    first: dict[tuple, list[tuple[Value, np.ndarray]]] = {}  # (dtype, shape, sample) -> the constants kept
    by_type: dict[tuple, int] = {}
    for data in graph.constants.values():
        by_type[(data.dtype.name, data.shape)] = by_type.get((data.dtype.name, data.shape), 0) + 1
    for name, data in graph.constants.items():
        if by_type[(data.dtype.name, data.shape)] > 1:  # only equal-typed constants can be equal
            flat = _bytes(data)
            bucket = first.setdefault((data.dtype.name, data.shape, flat[::max(1, flat.size // 64)].tobytes()), [])
            kept = next((v for v, other in bucket if np.array_equal(other, flat)), None)
            if kept is None:
                kept = graph.value(name)
                bucket.append((kept, flat))
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


def _bytes(data: np.ndarray) -> np.ndarray:
    """A constant's bytes, as a flat uint8 view (no copy of a contiguous one: BERT-base's 415 MB
    were copied, and hashed as Python bytes, to be compared)."""
    return np.ascontiguousarray(data).reshape(-1).view(np.uint8)


def _same_types(node: Node, other: Node) -> bool:
    return [v.type for v in node.outputs] == [v.type for v in other.outputs]

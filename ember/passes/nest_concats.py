"""A concat whose first inputs are those of an earlier concat (same axis, same order) takes that
concat in their place: concat(a, b, c) after concat(a, b) is concat(concat(a, b), c).

DenseNet's layers each concatenate all the features before them (concat(x0..xk) for k = 1, 2,
...), so that every feature is read by every later concat and none could be written in place
into one buffer (ember.passes.plan_memory: an input of one concat only); nested, each concat
holds the one before it as a prefix, the block is one buffer that each layer's convolution writes
its slab of, and no concat copies. The values are the same.
"""

from __future__ import annotations

from ..graph.core import Graph, Value
from .rewrite import Rewriter


def nest_concats(graph: Graph) -> Graph:
    made: dict[tuple, Value] = {}  # (axis, inputs) -> the old concat's output
    nested = {}
    for node in graph.nodes:
        if node.op != "concat":
            continue
        axis, xs = node.attrs["axis"] % node.outputs[0].type.rank, tuple(node.inputs)
        prefix = next((k for k in range(len(xs) - 1, 1, -1) if (axis, xs[:k]) in made), None)
        if prefix is not None:
            nested[node] = (made[axis, xs[:prefix]], xs[prefix:])
        made.setdefault((axis, xs), node.outputs[0])
    if not nested:
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node in nested:
            inner, rest = nested[node]
            rw.copy(node, [rw.value(inner), *map(rw.value, rest)])
        else:
            rw.copy(node, rw.inputs(node))
    return rw.finish()

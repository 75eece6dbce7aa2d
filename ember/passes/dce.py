"""Dead code elimination: nodes none of whose outputs reach a graph output are removed (one walk
backwards from the outputs), and so are the constants no remaining node uses. Graph inputs stay,
used or not: they are the model's signature.
"""

from __future__ import annotations

from ..graph.core import Graph
from .rewrite import Rewriter


def dce(graph: Graph) -> Graph:
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(v in live for v in node.outputs):
            kept.append(node)
            live.update(node.inputs)
    rw = Rewriter(graph)  # copies only the constants the kept nodes use
    for node in reversed(kept):
        rw.copy(node, rw.inputs(node))
    return rw.finish()

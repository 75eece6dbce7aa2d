"""A qgemm over the patches of a convolution reads them from the convolution's input itself:

    qgemm(im2col(x), w, bias, scale?)  ->  qconv(x, w, bias, scale?)

where the patches go nowhere else (ember.ops.quantized). The kernel then gathers each row tile's
patches just before its products (schedules/cpu/quantized.py) instead of writing all of them to
memory (9 bytes of patches per byte of the input, for a 3x3 convolution of stride 1) and reading
them back, as MLAS's indirect convolution does.
"""

from __future__ import annotations

from ..graph.core import Graph
from .rewrite import Rewriter


def gather_patches(graph: Graph) -> Graph:
    users = graph.users()
    outputs = {id(v) for v in graph.outputs}
    folded = {id(node): cols for node in graph.nodes
              if node.op == "qgemm" and (cols := node.inputs[0].node) is not None and cols.op == "im2col"
              and len(users[node.inputs[0]]) == 1 and id(node.inputs[0]) not in outputs}
    if not folded:
        return graph
    gathered = {id(cols) for cols in folded.values()}
    rw = Rewriter(graph)
    for node in graph.nodes:
        if id(node) in gathered:
            continue
        if id(node) not in folded:
            rw.copy(node, rw.inputs(node))
            continue
        cols = folded[id(node)]
        inputs = [rw.value(v) for v in (cols.inputs[0], *node.inputs[1:])]
        (y,) = rw.emit("qconv", inputs, {**cols.attrs, **node.attrs}, hint=node.name)
        rw.alias(node.outputs[0], y)
    return rw.finish()

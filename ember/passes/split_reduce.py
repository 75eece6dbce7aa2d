"""For a GPU target, a whole float tensor reduced to one value (sum, mean, prod, max, min:
`x.sum()`, a loss) over many elements as two kernels, since one block (the GPU family's schedule of a 0-d
output) uses one multiprocessor of the GPU's:

    sum(x)   ->  sum(reduce_parts(reshape(x, (n,)); "sum", parts))          [cast to x's type]
    mean(x)  ->  div(sum(reduce_parts(...; "sum", parts)), n)              [cast]
    max(x)   ->  max(reduce_parts(...; "max", parts))                      (prod and min alike)

parts = PARTS_PER_SM blocks a multiprocessor of the target's (two waves), each reducing a
contiguous range of x into a partial in x's accumulation dtype (ember.ops.reduce_parts: float32
for half, float64 for float64), then one block reduces
the partials in their order: the same input gives the same bits (no atomics, no last-block-done
scheme, whose order of arrival would not). Static sizes of at least LARGE elements are split,
and symbolic ones (but mean, which needs its count static) whose static dimensions alone
hold LARGE / 64 (the size at a symbol's 64: one kernel serves every size). keepdims' ones are a
reshape of the result.
"""

from __future__ import annotations

import numpy as np

from .. import dims
from ..graph.core import Graph, Node, Value
from ..tir import dtype as dt
from .rewrite import Rewriter, rebuild

LARGE = 1 << 18  # elements from which a reduction to one value takes two kernels (one block reads 1 MiB of fp32)
PARTS_PER_SM = 2  # partials a multiprocessor: two waves of blocks
KINDS = {"sum": "sum", "mean": "sum", "prod": "prod", "max": "max", "min": "min"}  # the reduction -> its partials' kind


def split_reduce(graph: Graph, target=None) -> Graph:
    if target is None or target.schedules != "gpu" or not any(n.op in KINDS for n in graph.nodes):
        return graph  # (the pipeline reports it unchanged)
    parts = PARTS_PER_SM * target.gpu.multiprocessors
    return rebuild(graph, lambda rw, node, inputs: _split(rw, node, inputs, parts))


def _split(rw: Rewriter, node: Node, inputs: list[Value], parts: int) -> list[Value] | None:
    if node.op not in KINDS:
        return None
    (x,), out = inputs, node.outputs[0]
    n = dims.mul(*x.type.shape)
    static = dims.mul(*(d for d in x.type.shape if isinstance(d, int)))
    if not dt.is_float(x.type.dtype) or any(d != 1 for d in out.type.shape) \
            or (n < LARGE if isinstance(n, int) else node.op == "mean" or static < LARGE // 64):
        return None  # (not a reduction to one value, or a small one)
    flat = x if x.type.rank == 1 else rw.emit("reshape", [x], {"shape": (n,)}, hint=f"{node.name}_flat")[0]
    (value,) = rw.emit("reduce_parts", [flat], {"kind": KINDS[node.op], "parts": parts}, hint=f"{node.name}_partials")
    steps = [(KINDS[node.op], [], {})]  # the partials' reduction, then what makes it the node's result
    if node.op == "mean":
        steps.append(("div", [rw.constant(np.array(n, value.type.dtype))], {}))
    if x.type.dtype != value.type.dtype:
        steps.append(("cast", [], {"dtype": x.type.dtype}))
    if out.type.shape:  # (keepdims)
        steps.append(("reshape", [], {"shape": out.type.shape}))
    for k, (op, extra, attrs) in enumerate(steps):
        named = {"hint": node.name, "out_names": [out.name]} if k == len(steps) - 1 else {"hint": f"{node.name}_{op}"}
        (value,) = rw.emit(op, [value, *extra], attrs, **named)  # (a graph output keeps its name)
    return [value]

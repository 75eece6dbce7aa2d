"""Constant folding: a node whose inputs are all constants is evaluated once, at compile time,
with its operator's NumPy reference (ember.ops.get(op).reference), and its outputs become
constants. One walk in topological order folds whole constant subgraphs, such as the shape
arithmetic (gathers, concats, casts of constant shapes) that ONNX and torch.export leave behind.

A node is left alone when an output has a symbolic dimension, or when folding would grow the
weights: its outputs take more than MAX_GROWTH_BYTES and more than its inputs together (an
`expand` of a scalar to a large tensor is cheaper to compute than to store).

Control flow (ember.ops.control): an `if` whose condition is a constant becomes the branch it
selects (its nodes inlined); a `loop` on constants alone, of at most MAX_FOLD_TRIPS iterations, is
run by the reference evaluator (shape arithmetic some exporters write as loops). The pipeline folds
inside regions too.
"""

from __future__ import annotations

import numpy as np

from ..errors import IndexOutOfRangeError
from ..graph.core import Graph, Node, Value
from ..ops.control import run_regions
from ..ops.evaluate import evaluate
from ..ops.registry import get
from .rewrite import Rewriter, rebuild

MAX_GROWTH_BYTES = 1 << 20
MAX_FOLD_TRIPS = 1024


def fold_constants(graph: Graph) -> Graph:
    return rebuild(graph, _fold)


def _fold(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
    if node.op == "if":
        return _select_branch(rw, node, inputs)
    data = [rw.constant_data(v) for v in inputs]
    if not inputs or any(d is None for d in data) or not all(v.type.is_static for v in node.outputs):
        return None  # (an output sized by a symbol, like an expand to the batch size, is not constant)
    if node.op == "loop" and int(data[0].reshape(())) > MAX_FOLD_TRIPS:
        return None
    in_bytes = sum(d.nbytes for d in data)
    out_bytes = sum(v.type.numel * np.dtype(v.dtype).itemsize for v in node.outputs)
    if out_bytes > max(MAX_GROWTH_BYTES, in_bytes):
        return None
    op = get(node.op)
    attrs = op.bind_attrs(node.attrs)
    try:
        outs = run_regions(node.op, data, attrs, node.regions, evaluate) if node.regions else op.reference(data, attrs)
    except IndexOutOfRangeError as e:  # an index among the constants outside its axis
        raise IndexOutOfRangeError(f"node {node.name}: {e}", e.index, e.size) from None
    values = []
    for v, out in zip(node.outputs, outs, strict=True):
        out = np.asarray(out)
        if out.shape != v.shape or out.dtype.name != v.dtype:
            raise ValueError(f"fold_constants: node {node.name} ({node.op}): the reference gives "
                             f"{out.dtype.name}{list(out.shape)}, the node's type says {v.type}")
        values.append(rw.constant(out, v.name))
    return values


def _select_branch(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
    """The outputs of the branch a constant condition selects, inlined (outputs of the graph keep
    their names through an identity)."""
    cond = rw.constant_data(inputs[0])
    if cond is None:
        return None
    values = rw.inline(node.regions[0 if bool(cond.reshape(())) else 1], inputs[1:])
    if rw.defines_output(node):
        values = [rw.emit("identity", [v], out_names=[old.name])[0] for v, old in zip(values, node.outputs)]
    return values

"""Horizontal fusion (TensorRT's): sibling matrix products that read the same input, each with
its own constant weights, become one product over the weights concatenated once, here, and a
split of its result.

    q = gemm(x, Wq, bq); k = gemm(x, Wk, bk); v = gemm(x, Wv, bv)
      -> qkv = gemm(x, [Wq Wk Wv], [bq bk bv]); q, k, v = split(qkv, axis=1)

One wide GEMM reuses each row of x across all the columns (the Q, K and V projections of an
attention block, the gate and up projections of a SwiGLU MLP) and is one kernel instead of several;
the split is a copy per piece, which fusion lets the consumers absorb when they are elementwise.

Siblings: `gemm` nodes with the same input a (not transposed), the same attributes and dtype, a
constant 2-D b (concatenated along its column axis: 1, or 0 when trans_b) and no bias or a
constant bias that is per column (shape (N,), (1, N) or a scalar; one missing where others have
one is zeros); `matmul` nodes with the same input and a constant 2-D b (concatenated along axis
1, the result split along its last axis). Each product is computed exactly as before: every
element is the same dot product. A sibling that defines a graph output keeps its own node (the
output keeps its name).

A bias a matmul sibling's only reader adds (ONNX exports write linear layers as MatMul then Add
of a constant per-column bias, (n,), (1, ..., n) or one value) is added once to the wide product, before
the split, when every sibling has one (none is zeros):

    q = matmul(x, Wq) + bq; ... -> qkv = matmul(x, [Wq Wk Wv]) + [bq bk bv]; q, k, v = split(qkv)

so that the split's pieces are the projections themselves (ember.passes.fold_qkv_split reads
them in place).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..graph.core import Graph, Node, Value
from .flatten_products import bias_add
from .rewrite import Rewriter


def fuse_siblings(graph: Graph) -> Graph:
    groups = [g for g in _siblings(graph).values() if len(g) > 1]
    if not groups:
        return graph
    first = {g[0]: g for g in groups}
    users = graph.users()
    biases = {g[0]: _bias_adds(graph, g, users) for g in groups}
    fused = {n for g in groups for n in g} | {a for adds in biases.values() for a in adds or ()}
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node in first:
            _emit(graph, rw, first[node], biases[node])
        elif node not in fused:
            rw.copy(node, rw.inputs(node))
    return rw.finish()


def _bias_adds(graph: Graph, group: list[Node], users: dict[Value, list[Node]]) -> list[Node] | None:
    """The add of a constant per-column bias (flatten_products.bias_add) that is each matmul
    sibling's only reader, or None (a gemm takes its bias itself)."""
    if group[0].op != "matmul":
        return None
    outputs = set(graph.outputs)
    adds = [bias_add(graph, node, users, outputs) for node in group]
    if any(add is None or add.outputs[0] in outputs for add in adds):
        return None
    return adds


def _siblings(graph: Graph) -> dict[tuple, list[Node]]:
    outputs = set(graph.outputs)
    groups: dict[tuple, list[Node]] = defaultdict(list)
    for node in graph.nodes:
        key = _key(graph, node)
        if key is not None and not any(v in outputs for v in node.outputs):
            groups[key].append(node)
    return groups


def _key(graph: Graph, node: Node) -> tuple | None:
    """Nodes with the same key are siblings; None: not a candidate."""
    if node.op not in ("gemm", "matmul") or len(node.inputs) < 2:
        return None
    a, b = node.inputs[:2]
    if not graph.is_constant(b) or b.type.rank != 2 or a.type.dtype != b.type.dtype:
        return None
    if node.op == "matmul":
        return ("matmul", a, b.type.shape[0], b.type.dtype)
    if node.attrs["trans_a"]:
        return None
    if len(node.inputs) == 3 and not _per_column_bias(graph, node.inputs[2]):
        return None
    k = b.type.shape[1] if node.attrs["trans_b"] else b.type.shape[0]
    return ("gemm", a, k, b.type.dtype, tuple(sorted(node.attrs.items())))


def _per_column_bias(graph: Graph, c: Value) -> bool:
    return graph.is_constant(c) and (c.type.rank <= 1 or c.type.shape[0] == 1)


def _emit(graph: Graph, rw: Rewriter, group: list[Node], bias_adds: list[Node] | None) -> None:
    head = group[0]
    a = rw.value(head.inputs[0])
    trans_b = head.op == "gemm" and head.attrs["trans_b"]
    weights = [graph.constants[n.inputs[1].name] for n in group]
    widths = [w.shape[0] if trans_b else w.shape[1] for w in weights]
    b = rw.derived(("siblings", trans_b, *(n.inputs[1] for n in group)),
                   lambda: np.concatenate(weights, axis=0 if trans_b else 1), f"{head.inputs[1].name}.siblings")
    inputs = [a, b]
    if head.op == "gemm" and any(len(n.inputs) == 3 for n in group):
        biases = [np.broadcast_to(graph.constants[n.inputs[2].name].reshape(-1), (w,)) if len(n.inputs) == 3
                  else np.zeros(w, weights[0].dtype) for n, w in zip(group, widths)]
        inputs.append(rw.constant(np.concatenate(biases), f"{head.name}.siblings_bias"))
    (wide,) = rw.emit(head.op, inputs, head.attrs, hint=f"{head.name}.siblings")
    ends = group
    if bias_adds:
        bias = np.concatenate([np.broadcast_to(graph.constants[next(v for v in a.inputs if v is not n.outputs[0]).name]
                                               .reshape(-1), (w,)) for a, n, w in zip(bias_adds, group, widths)])
        (wide,) = rw.emit("add", [wide, rw.constant(bias, f"{head.name}.siblings_bias")], hint=f"{head.name}.bias")
        ends = bias_adds
    pieces = rw.emit("split", [wide], {"axis": wide.type.rank - 1, "sizes": tuple(widths)}, hint=f"{head.name}.split",
                     out_names=[n.outputs[0].name for n in ends])
    for node, piece in zip(ends, pieces):
        rw.alias(node.outputs[0], piece)

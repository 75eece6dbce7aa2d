"""Batch-norm folding: an inference batch_norm right after a conv1d/conv2d, or after a gemm or a 2-D
matmul (whose columns are the channels, axis 1 of the result), is a per-channel affine map
y = x * scale + shift with scale = weight / sqrt(var + eps) and shift = bias - mean * scale; it is
folded into the preceding operator's weights and bias, computed once here (in float64):

    conv(x, w, b)            -> conv(x, w * scale[:, None, ...], b * scale + shift)
    gemm(a, b, c; alpha, beta) -> gemm(a, b * scale (per column of b'), beta * c * scale + shift; beta=1)
    matmul(a, b)             -> gemm(a, b * scale[None, :], shift)

Only when every batch_norm input but x is a constant, so are the weight and bias of the preceding
operator, and nothing else uses that operator's output (it disappears). The folded node takes the
batch_norm's output name.
"""

from __future__ import annotations

import numpy as np

from ..graph.core import Graph, Node
from .rewrite import Rewriter

CHANNEL_OPS = ("conv1d", "conv2d", "gemm", "matmul")


def fold_batch_norm(graph: Graph) -> Graph:
    folds = _foldable(graph)  # producer -> its batch_norm
    by_bn = {bn: producer for producer, bn in folds.items()}
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node in folds:
            continue  # emitted at its batch_norm, folded
        if node in by_bn:
            producer = by_bn[node]
            op, ins, attrs = _folded(graph, rw, producer, node)
            out, = rw.emit(op, ins, attrs, hint=producer.name, out_names=[node.outputs[0].name])
            rw.alias(node.outputs[0], out)
            continue
        rw.copy(node, rw.inputs(node))
    return rw.finish()


def _foldable(graph: Graph) -> dict[Node, Node]:
    users = graph.users()
    outputs = set(graph.outputs)
    folds = {}
    for bn in graph.nodes:
        if bn.op != "batch_norm" or not all(graph.is_constant(v) for v in bn.inputs[1:]):
            continue
        x = bn.inputs[0]
        producer = x.node
        if producer is None or producer.op not in CHANNEL_OPS or x in outputs or len(users[x]) != 1 \
                or producer.attrs.get("w_block"):  # (weights packed already: ember.passes.pack_weights)
            continue
        match producer.op:
            case "conv1d" | "conv2d" | "gemm":
                weights = producer.inputs[1:]
            case "matmul":
                a, b = producer.inputs
                if a.type.rank != 2 or b.type.rank != 2:
                    continue
                weights = (b,)
        if all(graph.is_constant(v) for v in weights):
            folds[producer] = bn
    return folds


def _folded(graph: Graph, rw: Rewriter, producer: Node, bn: Node):
    """(op, new-graph inputs, attributes) of the producer with the batch_norm folded in."""
    mean, var, weight, bias = (graph.constants[v.name].astype(np.float64) for v in bn.inputs[1:])
    scale = weight / np.sqrt(var + bn.attrs["eps"])
    shift = bias - mean * scale
    dtype = producer.outputs[0].dtype
    data = [graph.constants[v.name] for v in producer.inputs[1:]]
    x = rw.value(producer.inputs[0])
    match producer.op:
        case "conv1d" | "conv2d":
            w = data[0].astype(np.float64) * scale.reshape((-1,) + (1,) * (data[0].ndim - 1))
            b = (data[1].astype(np.float64) if len(data) > 1 else 0.0) * scale + shift
            return producer.op, [x, _const(rw, w, dtype, producer.inputs[1].name),
                                 _const(rw, b, dtype, f"{producer.name}_bias")], producer.attrs
        case "gemm":
            w = data[0].astype(np.float64) * (scale[:, None] if producer.attrs["trans_b"] else scale[None, :])
            c = (producer.attrs["beta"] * data[1].astype(np.float64) if len(data) > 1 else 0.0) * scale + shift
            attrs = {**producer.attrs, "beta": 1.0}
        case "matmul":
            w = data[0].astype(np.float64) * scale[None, :]
            c = shift
            attrs = {}
    return "gemm", [x, _const(rw, w, dtype, producer.inputs[1].name),
                    _const(rw, c, dtype, f"{producer.name}_bias")], attrs


def _const(rw: Rewriter, data: np.ndarray, dtype: str, hint: str):
    return rw.constant(np.asarray(data).astype(dtype), hint)

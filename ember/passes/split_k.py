"""Split-K for a GPU: a float32 linear layer whose output tiles would leave multiprocessors idle
(BERT-base's 768-wide layers at 128 tokens) as partial sums over parts of K, then their sum:

    gemm(x, W, c?)  ->  sum_partials(gemm_partials(x, W')) [+ c]

W' the weights ((N, K) with trans_b, else (K, N)) cut once at compile time into (S, N, K/S)
(ember.ops.gemm_partials). The target's backend says into how many parts
(`Backend.k_splits(M, N, K, target)`: the GPU's ember.schedules.gpu.split_k.splits_for, for the
target's multiprocessors; 1 leaves the gemm as it is), so a target without it
changes nothing. Only gemms of float32 or half activations (not marked tf32), constant weights,
static shapes, alpha and beta 1 and no transposed a are rewritten. The sum is in a fixed order
(deterministic), its epilogue (the bias, an activation, a residual) fused after it.

Half operands (a model in fp16 or bf16) take Tensor Cores for the partial sums, float32 all the
same, and a constant bias: a linear layer's of more than one row (one row, a decode step's, is
the GPU's gemv: 8 threads a column, no Tensor Core tile of 16 rows). A convolution as an implicit
GEMM (ember.passes.conv_gemm: ResNet's 3x3 convolutions at 14x14 and 7x7, whose few blocks each
walk a K of C*9 taps), half or float32, is split over parts of its taps the same way:

    gemm(x, W, b?)         ->  cast(sum_partials(gemm_partials(x, W')) [+ float32(b)])
    conv2d_gemm(x, W, b?)  ->  cast?(sum_partials(conv2d_gemm_partials(x, W')) [+ float32(b)])

W' (S, 1, OC, Q/S) for a convolution, the weights (OC, Q) cut into parts of the taps; the cast to
the half type is the one the product's epilogue made (none for float32). A channels-last one
(conv2d_nhwc_gemm, ember.passes.channels_last) likewise, its partials (S, N, OH, OW, OC), the
bias along their last axis.
"""

from __future__ import annotations

import numpy as np

from ..graph.core import Graph, Node
from .conv_gemm import HALF
from .rewrite import Rewriter, rebuild

CONVOLUTIONS = ("conv2d_gemm", "conv2d_nhwc_gemm")  # implicit GEMMs, NCHW and channels-last (ember.ops.conv_gemm)


def split_k(graph: Graph, target=None) -> Graph:
    splits_of = getattr(getattr(target, "backend", None), "k_splits", None)
    if splits_of is None or not any(n.op in ("gemm", *CONVOLUTIONS) for n in graph.nodes):
        return graph  # (the pipeline reports it unchanged)
    return rebuild(graph, lambda rw, node, inputs: _split(rw, node, inputs, graph, splits_of, target))


def _split(rw: Rewriter, node: Node, inputs, graph: Graph, splits_of, target):
    if node.op in CONVOLUTIONS:
        return _split_conv(rw, node, inputs, graph, splits_of, target)
    a = node.attrs
    if (node.op != "gemm" or a["trans_a"] or a["b_panels"] or a["tf32"] or a["alpha"] != 1.0
            or (len(inputs) == 3 and a["beta"] != 1.0)):
        return None
    x, w = node.inputs[:2]
    bias = node.inputs[2] if len(node.inputs) == 3 else None
    half = x.type.dtype in HALF
    if ((x.type.dtype != "float32" and not half) or not x.type.is_static or x.type.rank != 2
            or not graph.is_constant(w) or (half and bias is not None and not graph.is_constant(bias))):
        return None
    weights = graph.constants[w.name] if a["trans_b"] else graph.constants[w.name].T  # (N, K)
    (m, k), n = x.type.shape, weights.shape[0]
    splits = 1 if half and m == 1 else splits_of(m, n, k, target)  # (one row: the GPU's gemv)
    if splits < 2:
        return None
    weights = weights.reshape(n, splits, k // splits).transpose(1, 0, 2)
    parts = rw.constant(np.ascontiguousarray(weights), f"{w.name}.parts")
    (partials,) = rw.emit("gemm_partials", [inputs[0], parts], hint=f"{node.name}_partials")
    if half:
        return _summed(rw, node, partials, graph, bias, (n,))
    out = [node.outputs[0].name]  # (a graph output keeps its name)
    if len(inputs) == 2:
        return rw.emit("sum_partials", [partials], hint=node.name, out_names=out)
    (total,) = rw.emit("sum_partials", [partials], hint=f"{node.name}_sum")
    return rw.emit("add", [total, inputs[2]], hint=node.name, out_names=out)


def _split_conv(rw: Rewriter, node: Node, inputs, graph: Graph, splits_of, target):
    """A convolution as an implicit GEMM of half operands (ember.passes.conv_gemm), split over
    its taps (see the module doc)."""
    w, bias = node.inputs[1], node.inputs[2] if len(node.inputs) == 3 else None
    if not graph.is_constant(w) or (bias is not None and not graph.is_constant(bias)):
        return None
    weights = graph.constants[w.name]  # (OC, C*KH*KW), or (OC, KH*KW*C) channels-last
    (oc, q), positions = weights.shape, int(np.prod(node.outputs[0].type.shape)) // weights.shape[0]
    splits = splits_of(oc, positions, q, target)  # (the images as more positions)
    if splits < 2:
        return None
    weights = weights.reshape(oc, splits, q // splits).transpose(1, 0, 2)[:, None]  # (S, 1, OC, Q/S)
    parts = rw.constant(np.ascontiguousarray(weights), f"{w.name}.parts")
    (partials,) = rw.emit(f"{node.op}_partials", [inputs[0], parts], node.attrs, hint=f"{node.name}_partials")
    return _summed(rw, node, partials, graph, bias, (oc,) if node.op == "conv2d_nhwc_gemm" else (oc, 1, 1))


def _summed(rw: Rewriter, node: Node, partials, graph: Graph, bias, bias_shape):
    """The node's output from its float32 partial sums: their sum, the constant `bias` in float32
    (as `bias_shape`), then the cast to the node's half type that its epilogue made (the same
    sums in another order); the last of them under the node's output name."""
    dtype = node.outputs[0].type.dtype
    steps = ["sum", *(["bias"] if bias is not None else []), *(["cast"] if dtype != "float32" else [])]
    named = {"hint": node.name, "out_names": [node.outputs[0].name]}  # (a graph output keeps its name)
    (total,) = rw.emit("sum_partials", [partials], **(named if steps[-1] == "sum" else {"hint": f"{node.name}_sum"}))
    if bias is not None:
        wide = rw.constant(graph.constants[bias.name].astype(np.float32).reshape(bias_shape), f"{bias.name}.wide")
        (total,) = rw.emit("add", [total, wide], **(named if steps[-1] == "bias" else {"hint": f"{node.name}_bias"}))
    if dtype != "float32":
        (total,) = rw.emit("cast", [total], {"dtype": dtype}, **named)
    return [total]

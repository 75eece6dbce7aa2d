"""The weights of linear layers and convolutions in bf16 (`ember.compile(..., precision="bf16")`):

    gemm(a, W, c?; beta)   ->  gemm_bf16(a, pack(bf16(W')), c?; beta)      W' = W.T when trans_b
    conv2d(x, W, b?)       ->  conv2d_bf16(x, bf16(W as (OC, C * KH * KW / 2, 2), padded to even), b?)

bf16(W) rounds to nearest even; pack lays it out as the bf16 units read it ([N / 16][K / 2][16][2],
ember.ops.matmul_bf16), once, at compile time (a convolution's weights are the product's left
operand, rows of pairs, and its windows the packed one). The product then runs on AMX or AVX512-BF16 where
the target has them (ember.schedules.cpu.matmul_bf16), with a rounded to bf16 and the sums in
fp32; the bias, the epilogue and everything else (normalizations, softmax, reductions) stay fp32.

Rewritten: a gemm of a constant 2-D floating-point W (not transposed a, alpha 1) whose N is a
multiple of 16, K of 2 and M a number known at compile time (flatten_products, which runs before,
has made every linear layer such a gemm); a conv2d of constant weights, groups 1, whose output
channels are a multiple of 16 and whose shapes are known (fold_batch_norm, which runs before, has
folded its batch norm into it). Others keep fp32: a product of two activations (attention's,
whose routine computes in fp32), a depthwise or grouped convolution, a symbolic number of rows, a
classifier of 1000 columns. A convolution in bf16 reads and writes NCHW (the layout pass, after,
leaves it so), its windows gathered into a matrix at each call (im2col).
"""

from __future__ import annotations

import numpy as np

from ..graph.core import Graph, Node, Value
from ..intrinsics.tiles import LANES, pack
from ..ops.matmul_bf16 import GROUP
from ..tir import dtype as dt
from .rewrite import Rewriter, rebuild


def bf16_weights(graph: Graph) -> Graph:
    return rebuild(graph, _rewrite)


def _rewrite(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
    if node.op == "conv2d":
        return _conv(rw, node, inputs)
    if node.op != "gemm" or node.attrs["trans_a"] or node.attrs["b_panels"] or node.attrs["alpha"] != 1:
        return None
    a, b = inputs[:2]
    weights = rw.constant_data(b)
    if weights is None or weights.ndim != 2 or not dt.is_float(b.type.dtype) or not dt.is_float(a.type.dtype):
        return None
    w = weights.T if node.attrs["trans_b"] else weights
    (m, k), n = a.type.shape, w.shape[1]
    if not isinstance(m, int) or k % GROUP or n % LANES:
        return None
    packed = rw.constant(pack(w.astype(dt.to_numpy("bfloat16")), GROUP), f"{b.name}.bf16")
    return rw.emit("gemm_bf16", [a, packed, *inputs[2:]], {"beta": node.attrs["beta"]}, hint=node.name,
                   out_names=[node.outputs[0].name])


def _conv(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
    x, w = inputs[:2]
    weights = rw.constant_data(w)
    static = all(isinstance(d, int) for d in x.type.shape)
    if weights is None or node.attrs["groups"] != 1 or not static or weights.shape[0] % LANES \
            or not dt.is_float(x.type.dtype) or not dt.is_float(w.type.dtype):
        return None
    oc, taps = weights.shape[0], weights[0].size
    rows = np.zeros((oc, taps + taps % GROUP), dt.to_numpy("bfloat16"))
    rows[:, :taps] = weights.reshape(oc, taps)
    packed = rw.constant(rows.reshape(oc, -1, GROUP), f"{w.name}.bf16")
    attrs = {"kernel": weights.shape[2:], **{k: node.attrs[k] for k in ("strides", "padding", "dilations")}}
    return rw.emit("conv2d_bf16", [x, packed, *inputs[2:]], attrs, hint=node.name, out_names=[node.outputs[0].name])

"""gemm_partials and sum_partials: a float32 product's partial sums over parts of K (split-K, what a GPU computes
where a product's tiles would leave multiprocessors idle; ember.passes.split_k writes it):

    out[s, i, j] = sum over k < K/S of x[i, s*K/S + k] * w[s, j, k]

x (M, K) an activation, w (S, N, K/S) a linear layer's (N, K) weights cut into S parts of K
(once, at compile time). The parts of x are a stage of the kernel, never a tensor in memory: the
GPU schedule reads them in place as it copies their tiles into shared memory
(ember.schedules.gpu.split_k).

    sum_partials(p)[i, j] = sum over s of p[s, i, j], in the order of s

is their sum, another kernel: an anchor as a product is (pattern out_elementwise_fusable), so
that the epilogue the gemm had (the bias, an activation, a residual) fuses after it, which a
reduction's kernel would not take.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir.expr import as_int
from .registry import OpDef, OpTypeError, register

PARTS = "k_parts"  # the tag of x's parts' stage


def _infer(types, attrs):
    x, w = types
    if (x.rank != 2 or w.rank != 3 or {x.dtype, w.dtype} != {"float32"}
            or any(isinstance(d, str) for d in (*x.shape, *w.shape))):
        raise OpTypeError(f"gemm_partials: x (M, K) and w (S, N, K/S), float32 and static, got {x} and {w}")
    (m, k), (s, n, part) = x.shape, w.shape
    if s * part != k:
        raise OpTypeError(f"gemm_partials: w's {s} parts of {part} must make x's K = {k}")
    return [TensorType((s, m, n), "float32")]


def _reference(inputs, attrs):
    x, w = inputs
    s, _, part = w.shape
    parts = x.astype(np.float64).reshape(x.shape[0], s, part)
    return [np.einsum("isk,sjk->sij", parts, w.astype(np.float64)).astype(np.float32)]


def _compute(inputs, attrs, out_types):
    x, w = inputs
    s, n, part = (as_int(d) for d in w.shape)
    m = as_int(x.shape[0])
    xs = te.compute((s, m, part), lambda p, i, k: x[i, p * part + k], name="parts", tag=PARTS)
    r = te.reduce_axis((0, part), name="k")
    return [te.compute((s, m, n), lambda p, i, j: te.sum(xs[p, i, r] * w[p, j, r], axis=r), name="partials")]


register(OpDef(
    name="gemm_partials",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="opaque",  # (its consumer, the sum over the parts, is a kernel of its own)
    num_inputs=(2, 2),
    doc="Split-K's partial sums: out[s] = x[:, part s] @ w[s]^T.",
    takes_prologue=False,
))


def _infer_sum(types, attrs):
    (p,) = types
    if p.rank != 3 or p.dtype != "float32" or any(isinstance(d, str) for d in p.shape):
        raise OpTypeError(f"sum_partials: partial sums (S, M, N), float32 and static, got {p}")
    return [TensorType(p.shape[1:], "float32")]


def _sum_compute(inputs, attrs, out_types):
    (p,) = inputs
    r = te.reduce_axis((0, as_int(p.shape[0])), name="s")
    return [te.compute(tuple(p.shape[1:]), lambda i, j: te.sum(p[r, i, j], axis=r), name="total")]


register(OpDef(
    name="sum_partials",
    infer=_infer_sum,
    reference=lambda inputs, attrs: [inputs[0].astype(np.float64).sum(axis=0).astype(np.float32)],
    compute=_sum_compute,
    pattern="out_elementwise_fusable",
    num_inputs=(1, 1),
    doc="Split-K's sum of the partial sums over their first axis, in order; its epilogue fuses after it.",
))

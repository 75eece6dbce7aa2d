"""gemm_partials and sum_partials: a float32 product's partial sums over parts of K (split-K, what a GPU computes
where a product's tiles would leave multiprocessors idle; ember.passes.split_k writes it):

    out[s, i, j] = sum over k < K/S of x[i, s*K/S + k] * w[s, j, k]

x (M, K) an activation, w (S, N, K/S) a linear layer's (N, K) weights cut into S parts of K
(once, at compile time); float32, or both of one half type (a model in fp16 or bf16: the products
on Tensor Cores, the partial sums float32 all the same). The parts of x are a stage of the
kernel, never a tensor in memory: the GPU schedule reads them in place as it copies their tiles
into shared memory (ember.schedules.gpu.split_k).

and a convolution's as an implicit GEMM (ember.ops.conv_gemm: half or float32 operands), its
taps q = (c, ky, kx) cut into S parts:

    conv2d_gemm_partials(x, w)[s, n, o, oh, ow] = sum over q < Q/S of w[s, 0, o, q] * cols[n, s*Q/S + q, (oh, ow)]

w (S, 1, OC, Q/S) the weights (OC, Q) cut once (the 1 a broadcast over the images), the sums in
float32, the columns a stage computed as their tiles are copied, as conv2d_gemm's; and a
channels-last one's (conv2d_nhwc_gemm), x (N, H, W, C), q = (ky, kx, c), its partial sums
(S, N, OH, OW, OC).

    sum_partials(p)[...] = sum over s of p[s, ...], in the order of s

is their sum, another kernel: an anchor as a product is (pattern out_elementwise_fusable), so
that the epilogue the gemm had (the bias, an activation, a residual) fuses after it, which a
reduction's kernel would not take.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir.expr import as_int, cast
from .conv_gemm import COLUMN_ATTRS, COLUMNS, column_reader
from .registry import OpDef, OpTypeError, get, infer_types, register

PARTS = "k_parts"  # the tag of x's parts' stage


def _infer(types, attrs):
    x, w = types
    if (x.rank != 2 or w.rank != 3 or x.dtype != w.dtype or x.dtype not in ("float32", "float16", "bfloat16")
            or any(isinstance(d, str) for d in (*x.shape, *w.shape))):
        raise OpTypeError(f"gemm_partials: x (M, K) and w (S, N, K/S), float32, float16 or bfloat16 alike and "
                          f"static, got {x} and {w}")
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
    if x.dtype == "float32":
        return [te.compute((s, m, n), lambda p, i, j: te.sum(xs[p, i, r] * w[p, j, r], axis=r), name="partials")]
    acc = te.compute((s, m, n), lambda p, i, j: te.sum(cast("float32", xs[p, i, r]) * cast("float32", w[p, j, r]),
                                                          axis=r), name="partials")
    # (Tensor Cores' fragments are stored into a shared tile, from which the block writes the output)
    return [te.compute((s, m, n), lambda p, i, j: acc[p, i, j], name="half_partials")]


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


def _infer_conv(types, attrs, whole: str = "conv2d_gemm"):
    x, w = types
    if w.rank != 4 or w.shape[1] != 1 or any(isinstance(d, str) for d in w.shape):
        raise OpTypeError(f"{whole}_partials: w (S, 1, OC, Q/S), static, got {w}")
    s, _, oc, part = w.shape
    _, (out,) = infer_types(whole, [x, TensorType((oc, s * part), w.dtype)], attrs)
    return [TensorType((s, *out.shape), "float32")]


def _conv_reference(inputs, attrs, whole: str = "conv2d_gemm"):
    x, w = inputs
    s, _, oc, part = w.shape
    parts = []
    for p in range(s):  # the part's taps, the others' weights zero
        flat = np.zeros((oc, s * part), np.float32)
        flat[:, p * part:(p + 1) * part] = w[p, 0]
        parts.append(get(whole).reference([x.astype(np.float32), flat], attrs)[0])
    return [np.stack(parts)]


def _conv_compute(inputs, attrs, out_types):
    x, w = inputs
    s, _, oc, part = (as_int(d) for d in w.shape)
    n = as_int(x.shape[0])
    column, (oh, ow) = column_reader(x, attrs)
    cols = te.compute((s, n, part, oh * ow), lambda p, b, k, q: column(b, p * part + k, q), name="cols", tag=COLUMNS)
    r = te.reduce_axis((0, part), name="q")
    acc = te.compute((s, n, oc, oh * ow), lambda p, b, o, q: te.sum(
        cast("float32", w[p, 0, o, r]) * cast("float32", cols[p, b, r, q]), axis=r), name="partials")
    return [te.compute((s, n, oc, oh, ow), lambda p, b, o, y, z: acc[p, b, o, y * ow + z], name="conv_partials")]


register(OpDef(
    name="conv2d_gemm_partials",
    infer=_infer_conv,
    reference=_conv_reference,
    compute=_conv_compute,
    pattern="opaque",
    attrs=COLUMN_ATTRS,
    num_inputs=(2, 2),
    doc="Split-K's partial sums of a convolution as an implicit GEMM: out[s] = w[s] @ im2col(x)[part s].",
    takes_prologue=False,
))


def _nhwc_conv_compute(inputs, attrs, out_types):
    x, w = inputs
    s, _, oc, part = (as_int(d) for d in w.shape)
    n = as_int(x.shape[0])
    column, (oh, ow) = column_reader(x, attrs, channels_last=True)
    cols = te.compute((s, n, oh * ow, part), lambda p, b, q, k: column(b, p * part + k, q), name="cols", tag=COLUMNS)
    r = te.reduce_axis((0, part), name="q")
    acc = te.compute((s, n, oh * ow, oc), lambda p, b, q, o: te.sum(
        cast("float32", cols[p, b, q, r]) * cast("float32", w[p, 0, o, r]), axis=r), name="partials")
    return [te.compute((s, n, oh, ow, oc), lambda p, b, y, z, o: acc[p, b, y * ow + z, o], name="conv_partials")]


register(OpDef(
    name="conv2d_nhwc_gemm_partials",
    infer=lambda types, attrs: _infer_conv(types, attrs, "conv2d_nhwc_gemm"),
    reference=lambda inputs, attrs: _conv_reference(inputs, attrs, "conv2d_nhwc_gemm"),
    compute=_nhwc_conv_compute,
    pattern="opaque",
    attrs=COLUMN_ATTRS,
    num_inputs=(2, 2),
    doc="Split-K's partial sums of a channels-last convolution: out[s] = im2col(x)[part s] @ w[s]^T, NHWC.",
    takes_prologue=False,
))


def _infer_sum(types, attrs):
    (p,) = types
    if p.rank < 3 or p.dtype != "float32" or any(isinstance(d, str) for d in p.shape):
        raise OpTypeError(f"sum_partials: partial sums (S, ...), float32 and static, got {p}")
    return [TensorType(p.shape[1:], "float32")]


def _sum_compute(inputs, attrs, out_types):
    (p,) = inputs
    r = te.reduce_axis((0, as_int(p.shape[0])), name="s")
    return [te.compute(tuple(p.shape[1:]), lambda *i: te.sum(p[(r, *i)], axis=r), name="total")]


register(OpDef(
    name="sum_partials",
    infer=_infer_sum,
    reference=lambda inputs, attrs: [inputs[0].astype(np.float64).sum(axis=0).astype(np.float32)],
    compute=_sum_compute,
    pattern="out_elementwise_fusable",
    num_inputs=(1, 1),
    doc="Split-K's sum of the partial sums over their first axis, in order; its epilogue fuses after it.",
))

"""ONNX operators written with a few of ember's: Swish (x sigmoid(alpha x)), LpNormalization
(x over its L1 or L2 norm along an axis, 0 where the norm is 0), LpPool (the p-th root of an
average pool of |x|^p times the window size), ReverseSequence (a gather_elements along the time
axis with each sequence's positions reversed up to its length), AffineGrid (a constant grid of
normalized coordinates times theta, one batched matmul), EyeLike (a constant)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ....tir import dtype as dt
from ..node import NodeContext, to_dtype
from ..registry import converts
from .nn import _pool


@converts("Swish")
def _swish(cx: NodeContext):
    x = cx.input(0)
    alpha = cx.attr("alpha", 1.0)
    scaled = x if alpha == 1.0 else cx.op("mul", [x, cx.scalar(alpha, x)])
    return [cx.op("mul", [x, cx.op("sigmoid", [scaled])])]


@converts("LpNormalization")
def _lp_normalization(cx: NodeContext):
    x = cx.input(0)
    axis, p = cx.attr("axis", -1), cx.attr("p", 2)
    if p not in (1, 2):
        raise cx.error(f"p must be 1 or 2, got {p}")
    attrs = {"axes": (axis,), "keepdims": True}
    norm = cx.op("l2_norm", [x], attrs) if p == 2 else cx.op("sum", [cx.op("abs", [x])], attrs)
    zero = cx.scalar(0, x)
    return [cx.op("where", [cx.op("equal", [norm, zero]), zero, cx.op("div", [x, norm])])]


@converts("LpPool")
def _lp_pool(cx: NodeContext):
    x = cx.input(0)
    p = cx.attr("p", 2)
    powered = cx.op("pow", [cx.op("abs", [x]), cx.scalar(p, x)])
    attrs = {**cx.attrs, "count_include_pad": 1}
    (mean,) = _pool(dataclasses.replace(cx, inputs=[powered], attrs=attrs))
    total = cx.op("mul", [mean, cx.scalar(math.prod(cx.attr("kernel_shape")), x)])
    return [cx.op("pow", [total, cx.scalar(1 / p, x)])]


@converts("ReverseSequence")
def _reverse_sequence(cx: NodeContext):
    """position t of sequence b reads t' = lengths[b] - 1 - t for t < lengths[b], t itself after."""
    x, lengths = cx.input(0), cx.input(1)
    shape = cx.static_shape(x, "ReverseSequence")
    batch, time = cx.attr("batch_axis", 1), cx.attr("time_axis", 0)
    lengths = cx.op("cast", [lengths], {"dtype": "int64"})
    along = [1] * len(shape)
    along[batch] = shape[batch]
    lengths = cx.op("reshape", [lengths], {"shape": tuple(along)})
    positions = np.arange(shape[time], dtype="int64").reshape([-1 if d == time else 1 for d in range(len(shape))])
    reversed_ = cx.op("sub", [cx.op("sub", [lengths, np.asarray(1, "int64")]), positions])
    index = cx.op("where", [cx.op("less", [positions, lengths]), reversed_, positions])
    index = cx.op("expand", [index], {"shape": tuple(shape)})
    return [cx.op("gather_elements", [x, index], {"axis": time})]


@converts("AffineGrid")
def _affine_grid(cx: NodeContext):
    """theta (N, 2, 3) or (N, 3, 4) applied to the normalized coordinates of an output of `size`
    (x first, as torch.nn.functional.affine_grid)."""
    theta = cx.input(0)
    size = cx.const_ints(1, "size")
    spatial = size[2:]
    align = bool(cx.attr("align_corners", 0))

    def axis(n: int) -> np.ndarray:
        if align:
            return np.linspace(-1, 1, n) if n > 1 else np.zeros(1)
        return (2 * np.arange(n) + 1) / n - 1

    grids = np.meshgrid(*[axis(n) for n in spatial], indexing="ij")[::-1]  # x (the last dim) first
    base = np.stack([*grids, np.ones(spatial)], axis=-1).reshape(-1, len(spatial) + 1)
    dtype = cx.type(theta).dtype
    points = cx.op("matmul", [base.astype(dtype), cx.op("transpose", [theta], {"perm": (0, 2, 1)})])
    return [cx.op("reshape", [points], {"shape": (size[0], *spatial, len(spatial))})]


@converts("EyeLike")
def _eye_like(cx: NodeContext):
    """Ones on the k-th diagonal of a matrix of the input's (static) shape: a constant."""
    shape = cx.static_shape(cx.input(0), "EyeLike")
    dtype = to_dtype(cx.attr("dtype"), cx.where) if cx.attr("dtype") is not None else cx.type(cx.input(0)).dtype
    return [np.eye(*shape, k=cx.attr("k", 0), dtype=dt.to_numpy(dtype))]

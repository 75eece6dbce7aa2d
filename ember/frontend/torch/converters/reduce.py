"""Reductions, softmax, normalizations, cumsum and cumprod, determinants.

ATen's reductions take `dim` as a list (empty or None: every axis) and `keepdim`; ember's take
`axes` (None: every axis) and `keepdims`. Integer and bool inputs are cast to the result dtype
torch gives (sum of bools is int64). The normalizations that return saved statistics for the
backward pass (native_layer_norm, native_group_norm, batch norm) give `Unavailable` for them.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..node import Unsupported, torch_dtype
from ..registry import Unavailable, handles


def _axes(dim):
    if dim is None or (isinstance(dim, list | tuple) and not dim):
        return None
    return tuple(dim) if isinstance(dim, list | tuple) else (dim,)


def _reduce(op: str):
    def handler(b, x, dim=None, keepdim=False, *, dtype=None):
        return b.op(op, [b.v(x, b.out.dtype)], axes=_axes(dim), keepdims=keepdim)

    handler.__name__ = op
    return handler


handles("sum.dim_IntList")(_reduce("sum"))
handles("mean.dim", "mean.default")(_reduce("mean"))
handles("amax.default", "max.default")(_reduce("max"))
handles("amin.default", "min.default")(_reduce("min"))
handles("prod.dim_int", "prod.default")(_reduce("prod"))


@handles("any.dim", "any.dims", "any.default")
def any_(b, x, dim=None, keepdim=False):
    """any = max over the input as int8 (all decomposes to not any not)."""
    y = b.op("max", [b.v(x, "int8")], axes=_axes(dim), keepdims=keepdim)
    return b.cast(y, "bool")


@handles("var.correction")
def var(b, x, dim=None, *, correction=None, keepdim=False):
    return b.op("var", [b.v(x)], axes=_axes(dim), keepdims=keepdim, correction=1 if correction is None else correction)


@handles("var_mean.correction")
def var_mean(b, x, dim=None, *, correction=None, keepdim=False):
    return var(b, x, dim, correction=correction, keepdim=keepdim), _reduce("mean")(b, x, dim, keepdim)


@handles("std.correction")
def std(b, x, dim=None, *, correction=None, keepdim=False):
    return b.op("std", [b.v(x)], axes=_axes(dim), keepdims=keepdim, correction=1 if correction is None else correction)


@handles("std_mean.correction")
def std_mean(b, x, dim=None, *, correction=None, keepdim=False):
    return std(b, x, dim, correction=correction, keepdim=keepdim), _reduce("mean")(b, x, dim, keepdim)


@handles("linalg_vector_norm.default")
def vector_norm(b, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """ord 2 is ember's l2_norm (scaled: finite where the norm is); 1, inf, -inf and 0 are a sum,
    max, min of magnitudes and a count of nonzeros, which need no scaling."""
    y = b.v(x, b.out.dtype)
    attrs = {"axes": _axes(dim), "keepdims": keepdim}
    p = float(ord)
    if p == 2:
        return b.op("l2_norm", [y], **attrs)
    if p == 0:
        return b.op("sum", [b.cast(b.op("not_equal", [y, b.scalar(0.0, b.out.dtype)]), b.out.dtype)], **attrs)
    if p in (1, math.inf, -math.inf):
        reducer = {1: "sum", math.inf: "max", -math.inf: "min"}[p]
        return b.op(reducer, [b.op("abs", [y])], **attrs)
    raise Unsupported(f"linalg.vector_norm of ord={ord} (only 0, 1, 2, inf and -inf)")


def _arg(op: str):
    def handler(b, x, dim=None, keepdim=False):
        y = b.v(x)
        if dim is None:  # over every element: flatten first
            y = b.op(op, [b.op("reshape", [y], shape=(b.type_of(y).numel,))], axis=0)
            return b.op("reshape", [y], shape=b.out.shape) if keepdim else y
        return b.op(op, [y], axis=dim, keepdims=keepdim)

    handler.__name__ = op
    return handler


handles("argmax.default")(_arg("argmax"))
handles("argmin.default")(_arg("argmin"))


def _value_and_index(op: str, arg: str):
    def handler(b, x, dim, keepdim=False):
        y = b.v(x)
        return b.op(op, [y], axes=(dim,), keepdims=keepdim), b.op(arg, [y], axis=dim, keepdims=keepdim)

    handler.__name__ = op
    return handler


handles("max.dim")(_value_and_index("max", "argmax"))
handles("min.dim")(_value_and_index("min", "argmin"))


@handles("_softmax.default")
def softmax(b, x, dim, half_to_float=False):
    return b.op("softmax", [b.v(x, b.out.dtype)], axis=dim)


@handles("_log_softmax.default")
def log_softmax(b, x, dim, half_to_float=False):
    return b.op("log_softmax", [b.v(x, b.out.dtype)], axis=dim)


@handles("cumsum.default", "cumprod.default")
def cumsum(b, x, dim, *, dtype=None):
    return b.op(str(b.node.target).split(".")[1], [b.v(x, b.out.dtype)], axis=dim)  # aten.cumsum.default


@handles("_linalg_det.default")
def linalg_det(b, x):
    why = "the {} of _linalg_det's LU factorization (for its backward pass)"
    return b.op("det", [b.v(x)]), Unavailable(why.format("factors")), Unavailable(why.format("pivots"))


# -- normalizations ------------------------------------------------------------------------------
def _affine(b, weight, bias, shape, dtype: str) -> list:
    """The optional weight and bias inputs of a normalization: [], [w] or [w, b] (w = 1 when
    only a bias is given)."""
    if bias is None:
        return [] if weight is None else [b.v(weight)]
    w = b.v(weight) if weight is not None else b.const(np.ones(shape, dtype), "ones")
    return [w, b.v(bias)]


def _layer_norm(b, x, normalized_shape, weight, bias, eps):
    y = b.v(x)
    affine = _affine(b, weight, bias, tuple(normalized_shape), y.dtype)
    return b.op("layer_norm", [y, *affine], normalized_ndim=len(normalized_shape), eps=float(eps))


@handles("native_layer_norm.default")
def native_layer_norm(b, x, normalized_shape, weight, bias, eps):
    why = "the saved {} of native_layer_norm (training only)"
    return (_layer_norm(b, x, normalized_shape, weight, bias, eps),
            Unavailable(why.format("mean")), Unavailable(why.format("rstd")))


@handles("layer_norm.default")
def layer_norm(b, x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    return _layer_norm(b, x, normalized_shape, weight, bias, eps)


@handles("rms_norm.default")
def rms_norm(b, x, normalized_shape, weight=None, eps=None):
    y = b.v(x)
    eps = torch.finfo(torch_dtype(y.dtype)).eps if eps is None else eps
    inputs = [y] if weight is None else [y, b.v(weight)]
    return b.op("rms_norm", inputs, normalized_ndim=len(normalized_shape), eps=float(eps))


@handles("_native_batch_norm_legit_no_training.default")
def batch_norm(b, x, weight, bias, running_mean, running_var, momentum, eps):
    y = b.v(x)
    channels = b.type_of(y).shape[1]
    w = b.v(weight) if weight is not None else b.const(np.ones(channels, y.dtype), "ones")
    c = b.v(bias) if bias is not None else b.const(np.zeros(channels, y.dtype), "zeros")
    out = b.op("batch_norm", [y, b.v(running_mean), b.v(running_var), w, c], eps=float(eps))
    why = "the saved {} of batch norm (training only)"
    return out, Unavailable(why.format("mean")), Unavailable(why.format("invstd"))


@handles("_native_batch_norm_legit.no_stats")
def batch_norm_batch_stats(b, x, weight, bias, training, momentum, eps):
    """Batch norm with the batch's own statistics (what instance_norm decomposes to): over every
    axis but the channels (1), biased variance."""
    y = b.v(x)
    t = b.type_of(y)
    per_channel = (t.shape[1],) + (1,) * (t.rank - 2)
    # a layer norm of the channel-major layout: its statistics are scaled (no overflow of the
    # variance of values of 1e20, no underflow at 1e-20)
    to_channels = (1, 0, *range(2, t.rank))
    out = b.op("transpose", [y], perm=to_channels)
    out = b.op("layer_norm", [out], normalized_ndim=t.rank - 1, eps=float(eps))
    out = b.op("transpose", [out], perm=to_channels)
    if weight is not None:
        out = b.op("mul", [out, b.op("reshape", [b.v(weight)], shape=per_channel)])
    if bias is not None:
        out = b.op("add", [out, b.op("reshape", [b.v(bias)], shape=per_channel)])
    why = "the saved {} of batch norm (training only)"
    return out, Unavailable(why.format("mean")), Unavailable(why.format("rstd"))


@handles("native_group_norm.default")
def native_group_norm(b, x, weight, bias, N, C, HxW, group, eps):
    y = b.v(x)
    out = b.op("group_norm", [y, *_affine(b, weight, bias, (C,), y.dtype)], num_groups=group, eps=float(eps))
    why = "the saved {} of native_group_norm (training only)"
    return out, Unavailable(why.format("mean")), Unavailable(why.format("rstd"))


@handles("group_norm.default")
def group_norm(b, x, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    y = b.v(x)
    channels = b.type_of(y).shape[1]
    affine = _affine(b, weight, bias, (channels,), y.dtype)
    return b.op("group_norm", [y, *affine], num_groups=num_groups, eps=float(eps))


@handles("instance_norm.default")
def instance_norm(b, x, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn_enabled):
    if not use_input_stats:  # eval mode with tracked statistics: a batch norm
        return batch_norm(b, x, weight, bias, running_mean, running_var, momentum, eps)[0]
    y = b.v(x)
    channels = b.type_of(y).shape[1]
    return b.op("instance_norm", [y, *_affine(b, weight, bias, (channels,), y.dtype)], eps=float(eps))


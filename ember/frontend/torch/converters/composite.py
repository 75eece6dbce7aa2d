"""Composite operators that torch.export's trace keeps and its decomposition breaks up (conv2d,
batch_norm, dropout, max_pool2d, adaptive_avg_pool2d, flatten, reshape, transpose, softmax,
to, ...), each converted into what its decomposition gives, by that decomposition's own handlers:
a trace converted without `run_decompositions` (ember.frontend.torch.direct) makes the graph the
decomposed program makes.

A variant the decomposition would turn into something else (a batch norm that trains, a dropout
that drops, an unbatched convolution) is `Unsupported`: the trace is then decomposed and
converted as before.
"""

from __future__ import annotations

from ..node import Unsupported
from ..registry import HANDLERS, handles
from .elementwise import copy, to_copy
from .nn import adaptive_avg_pool2d, convolution, max_pool_with_indices
from .reduce import batch_norm, log_softmax, softmax
from .shape import INT64_MAX, constant_pad_nd, permute, view


def _each(v, n: int) -> list:
    """A size per spatial dimension (conv's stride, padding, dilation: one int or a list)."""
    v = list(v) if isinstance(v, list | tuple) else [v]
    return v * n if len(v) == 1 else v


@handles("conv1d.default", "conv2d.default", "conv3d.default")
def conv(b, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    n = b.type_of(weight).rank - 2
    if b.type_of(x).rank != n + 2:
        raise Unsupported("an unbatched convolution")  # (its decomposition adds the batch axis)
    return convolution(b, x, weight, bias, _each(stride, n), _each(padding, n), _each(dilation, n), False,
                       [0] * n, groups)


@handles("batch_norm.default")
def batch_norm_eval(b, x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled):
    if training or running_mean is None or running_var is None:
        raise Unsupported("a batch norm over the batch's own statistics")
    return batch_norm(b, x, weight, bias, running_mean, running_var, momentum, eps)[0]


@handles("dropout.default")
def dropout(b, x, p, train):
    if train:
        raise Unsupported("a dropout in training mode")
    return copy(b, x)


@handles("max_pool2d.default", "max_pool3d.default")
def max_pool(b, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return max_pool_with_indices(b, x, kernel_size, stride, padding, dilation, ceil_mode)[0]


@handles("adaptive_avg_pool2d.default")
def adaptive_avg_pool(b, x, output_size):
    if list(output_size) == [1, 1]:  # (ATen's composite: the mean over both axes, kept)
        return HANDLERS["aten.mean.dim"](b, x, [-1, -2], True)
    return adaptive_avg_pool2d(b, x, output_size)


@handles("flatten.using_ints", "reshape.default")
def reshape(b, x, *_, **__):
    return view(b, x, b.out.shape)


@handles("transpose.int")
def transpose(b, x, dim0, dim1):
    dims = list(range(len(b.out.shape)))
    dims[dim0], dims[dim1] = dims[dim1], dims[dim0]
    return permute(b, x, dims)


@handles("t.default")
def t(b, x):
    return permute(b, x, [1, 0]) if len(b.out.shape) == 2 else copy(b, x)


@handles("softmax.int")
def softmax_int(b, x, dim, dtype=None):
    return softmax(b, x, dim)  # (the handler casts to the result's dtype, as the decomposition's _to_copy does)


@handles("log_softmax.int")
def log_softmax_int(b, x, dim, dtype=None):
    return log_softmax(b, x, dim)


@handles("to.dtype", "to.dtype_layout")
def to(b, x, *_, device=None, **__):
    return to_copy(b, x, device=device)


@handles("to.device")
def to_device(b, x, device, *_, **__):
    return to_copy(b, x, device=device)


@handles("to.other")
def to_other(b, x, other, *_, **__):
    return to_copy(b, x)  # (the importer's tensors are all on the CPU)


@handles("pad.default")
def pad(b, x, pad, mode="constant", value=None):
    if mode != "constant":
        raise Unsupported(f"padding mode {mode!r}")
    return constant_pad_nd(b, x, pad, 0 if value is None else value)


@handles("adaptive_avg_pool1d.default")
def adaptive_avg_pool1d(b, x, output_size):
    y = b.op("unsqueeze", [b.v(x)], axes=(b.type_of(x).rank - 1,))
    y = adaptive_avg_pool2d(b, y, (1, *output_size))
    return b.op("squeeze", [y], axes=(b.out.rank - 1,))


@handles("diff.default")
def diff(b, x, n=1, dim=-1, prepend=None, append=None):
    """The n-th forward difference along dim of prepend, x and append joined: n times, the
    elements after the first less those before the last (on bools, whether they differ); n=0: x
    itself, not joined (as torch and NumPy give)."""
    if n == 0:
        return x
    dtype, dim = b.out.dtype, dim % b.out.rank
    parts = [b.v(p, dtype) for p in (prepend, x, append) if p is not None]
    y = b.op("concat", parts, axis=dim) if len(parts) > 1 else parts[0]
    for _ in range(n):
        later = b.op("slice", [y], starts=(1,), ends=(INT64_MAX,), axes=(dim,))
        earlier = b.op("slice", [y], starts=(0,), ends=(-1,), axes=(dim,))
        y = b.op("not_equal" if dtype == "bool" else "sub", [later, earlier])
    return y


@handles("sum.default")
def sum_all(b, x, *, dtype=None):
    return HANDLERS["aten.sum.dim_IntList"](b, x, None)

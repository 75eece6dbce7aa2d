"""Pooling over the spatial dimensions of N, C, H, W tensors: max_pool2d, avg_pool2d (window,
strides, ONNX-style padding, dilations, ceil_mode, count_include_pad), global_avg_pool (all spatial
dimensions, kept as 1) and adaptive_avg_pool2d (PyTorch's windows: floor(i*H/OH) to
ceil((i+1)*H/OH)).

max/avg pooling read a padded copy of the input (a PACK stage holding -inf or 0 around it, as far
as the last window reaches), so that their window loops need no bounds checks and vectorize
along the output columns. An average divides by the taps of its window that fall inside the
input (count_include_pad=False) or inside the padded input (True; a ceil_mode window reaching
past the padding counts only up to its end, as PyTorch does).
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import as_int, cast, max_, min_
from .common import check_float
from .conv import window_attrs, window_out
from .hints import PACK
from .registry import REQUIRED, OpDef, OpTypeError, register

ANCHOR = "pool"
POOL_ATTRS = {"kernel": REQUIRED, "strides": None, "padding": (0, 0, 0, 0), "dilations": (1, 1),
              "ceil_mode": False, "count_include_pad": True}


def _nchw(op: str, x: TensorType) -> tuple[int, int]:
    if x.rank != 4:
        raise OpTypeError(f"{op}: x must be N, C, H, W, got shape {x.shape}")
    if any(isinstance(d, str) for d in x.shape[2:]):
        raise OpTypeError(f"{op}: the spatial dimensions of {x.shape} must be known sizes")
    return x.shape[2], x.shape[3]


def _window(op: str, attrs):
    kernel = tuple(attrs["kernel"])
    if len(kernel) != 2 or not all(isinstance(k, int) and k >= 1 for k in kernel):
        raise OpTypeError(f"{op}: kernel {kernel} must be 2 positive integers")
    strides, pads_b, pads_e, dilations = window_attrs(op, attrs, 2, kernel)
    if any(p < 0 for p in pads_b + pads_e):
        raise OpTypeError(f"{op}: padding {attrs['padding']} must not be negative")
    return kernel, strides, pads_b, pads_e, dilations


def _pool_sizes(op: str, shape, attrs) -> tuple[int, int]:
    kernel, strides, pads_b, pads_e, dilations = _window(op, attrs)
    return tuple(window_out(op, size, k, s, pb, pe, d, attrs["ceil_mode"])
                 for size, k, s, pb, pe, d in zip(shape[2:], kernel, strides, pads_b, pads_e, dilations))


def _infer_pool(op: str):
    def infer(types, attrs):
        (x,) = types
        _nchw(op, x)
        if op == "avg_pool2d":
            check_float(op, x)
        return [TensorType(tuple(x.shape[:2]) + _pool_sizes(op, x.shape, attrs), x.dtype)]

    return infer


def _taps(start, k: int, dilation: int, lo, hi, mn, mx):
    """How many of the taps start + t*dilation (t < k) lie in [lo, hi); on ints (mn, mx: min and
    max) or te expressions (te's min_ and max_)."""
    first = mx(0 - (start - lo) // dilation, 0)
    last = mn((hi - 1 - start) // dilation, k - 1)
    return mx(last - first + 1, 0)


def _reference_pool(op: str):
    def reference(inputs, attrs):
        (x,) = inputs
        kernel, strides, pads_b, pads_e, dilations = _window(op, attrs)
        out_hw = _pool_sizes(op, x.shape, attrs)
        reach = [(o - 1) * s + d * (k - 1) + 1 for o, s, d, k in zip(out_hw, strides, dilations, kernel)]
        fill = -np.inf if op == "max_pool2d" else 0
        if op == "max_pool2d" and not dt.is_float(x.dtype.name):
            fill = dt.int_range(x.dtype.name)[0]
        width = [(0, 0), (0, 0)] + [(pb, max(r - size - pb, 0)) for pb, r, size in zip(pads_b, reach, x.shape[2:])]
        xp = np.pad(x.astype(np.float64) if op == "avg_pool2d" else x, width, constant_values=fill)
        taps = [xp[:, :, kh * dilations[0]:kh * dilations[0] + (out_hw[0] - 1) * strides[0] + 1:strides[0],
                   kw * dilations[1]:kw * dilations[1] + (out_hw[1] - 1) * strides[1] + 1:strides[1]]
                for kh in range(kernel[0]) for kw in range(kernel[1])]
        if op == "max_pool2d":
            return [np.max(taps, axis=0)]
        counts = []
        for axis in range(2):
            start = np.arange(out_hw[axis]) * strides[axis] - pads_b[axis]
            size = x.shape[2 + axis]
            lo, hi = (-pads_b[axis], size + pads_e[axis]) if attrs["count_include_pad"] else (0, size)
            counts.append(np.array([_taps(int(s), kernel[axis], dilations[axis], lo, hi, min, max) for s in start]))
        return [(np.sum(taps, axis=0) / np.multiply.outer(*counts)).astype(x.dtype)]

    return reference


def _compute_pool(op: str):
    def compute(inputs, attrs, out_types):
        (x,) = inputs
        kernel, strides, pads_b, pads_e, dilations = _window(op, attrs)
        out_hw = out_types[0].shape[2:]
        size = [as_int(d) for d in x.shape[2:]]
        reach = [max((o - 1) * s + d * (k - 1) + 1, n + pb) for o, s, d, k, n, pb in
                 zip(out_hw, strides, dilations, kernel, size, pads_b)]
        is_max = op == "max_pool2d"
        fill = te.max.identity(x.dtype) if is_max else te.const(0, x.dtype)
        xp = x
        if any(r != n for r, n in zip(reach, size)) or any(pads_b):
            xp = te.compute(
                tuple(x.shape[:2]) + tuple(reach),
                lambda n, c, h, w: te.if_then_else(
                    te.all(h >= pads_b[0], h < size[0] + pads_b[0], w >= pads_b[1], w < size[1] + pads_b[1]),
                    x[n, c, h - pads_b[0], w - pads_b[1]], fill),
                name="x_padded", tag=PACK)
        rh = te.reduce_axis((0, kernel[0]), name="kh")
        rw = te.reduce_axis((0, kernel[1]), name="kw")
        acc_dtype = x.dtype if is_max else dt.compute_dtype(x.dtype)

        def tap(n, c, h, w):
            return cast(acc_dtype, xp[n, c, h * strides[0] + rh * dilations[0], w * strides[1] + rw * dilations[1]])

        reducer = te.max if is_max else te.sum
        acc = te.compute(x.shape[:2] + tuple(out_hw), lambda n, c, h, w: reducer(tap(n, c, h, w), axis=[rh, rw]),
                         name="pool", tag=ANCHOR)
        if is_max:
            return [acc]

        def count(i, axis):
            lo, hi = (-pads_b[axis], size[axis] + pads_e[axis]) if attrs["count_include_pad"] else (0, size[axis])
            return _taps(i * strides[axis] - pads_b[axis], kernel[axis], dilations[axis], lo, hi, min_, max_)

        return [te.compute(acc.shape, lambda n, c, h, w: cast(
            x.dtype, acc[n, c, h, w] / cast(acc_dtype, count(h, 0) * count(w, 1))), name="avg_pool")]

    return compute


for _op in ("max_pool2d", "avg_pool2d"):
    register(OpDef(
        name=_op, infer=_infer_pool(_op), reference=_reference_pool(_op), compute=_compute_pool(_op),
        pattern="reduction", attrs=POOL_ATTRS,
        doc=f"2-d {_op.split('_')[0]} pooling with ONNX-style padding, dilations and ceil_mode.",
    ))


# -- global and adaptive average pooling ---------------------------------------------------------


def _infer_global(types, attrs):
    (x,) = types
    check_float("global_avg_pool", x)
    if x.rank < 3:
        raise OpTypeError(f"global_avg_pool: x must be N, C, spatial..., got shape {x.shape}")
    return [TensorType(tuple(x.shape[:2]) + (1,) * (x.rank - 2), x.dtype)]


def _compute_global(inputs, attrs, out_types):
    (x,) = inputs
    axes = [te.reduce_axis((0, d), name=f"r{k}") for k, d in enumerate(x.shape[2:])]
    acc_dtype = dt.compute_dtype(x.dtype)
    total = te.compute(x.shape[:2], lambda n, c: te.sum(cast(acc_dtype, x[(n, c, *axes)]), axis=axes), name="sum")
    count = 1
    for d in x.shape[2:]:
        count = count * d
    return [te.compute(tuple(x.shape[:2]) + (1,) * (x.ndim - 2),
                       lambda *i: cast(x.dtype, total[i[0], i[1]] / cast(acc_dtype, count)), name="global_avg_pool")]


register(OpDef(
    name="global_avg_pool",
    infer=_infer_global,
    reference=lambda inputs, attrs: [inputs[0].mean(axis=tuple(range(2, inputs[0].ndim)), keepdims=True,
                                                    dtype=np.float64).astype(inputs[0].dtype)],
    compute=_compute_global,
    pattern="reduction",
    doc="The mean over every spatial dimension, kept as size 1.",
))


def _adaptive_sizes(attrs) -> tuple[int, int]:
    size = attrs["output_size"]
    size = (size, size) if isinstance(size, int) else tuple(size)
    if len(size) != 2 or not all(isinstance(s, int) and s >= 1 for s in size):
        raise OpTypeError(f"adaptive_avg_pool2d: output_size {attrs['output_size']} must be 1 or 2 positive integers")
    return size


def _bounds(i, n_in: int, n_out: int):
    """PyTorch's adaptive window of output i: [floor(i*n_in/n_out), ceil((i+1)*n_in/n_out))."""
    return (i * n_in) // n_out, ((i + 1) * n_in + n_out - 1) // n_out


def _infer_adaptive(types, attrs):
    (x,) = types
    check_float("adaptive_avg_pool2d", x)
    _nchw("adaptive_avg_pool2d", x)
    return [TensorType(tuple(x.shape[:2]) + _adaptive_sizes(attrs), x.dtype)]


def _reference_adaptive(inputs, attrs):
    (x,) = inputs
    oh, ow = _adaptive_sizes(attrs)
    out = np.empty(x.shape[:2] + (oh, ow), x.dtype)
    for i in range(oh):
        h0, h1 = _bounds(i, x.shape[2], oh)
        for j in range(ow):
            w0, w1 = _bounds(j, x.shape[3], ow)
            out[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3), dtype=np.float64)
    return [out]


def _compute_adaptive(inputs, attrs, out_types):
    (x,) = inputs
    h, w = (as_int(d) for d in x.shape[2:])
    oh, ow = _adaptive_sizes(attrs)
    # the widest window along each axis bounds the reduction; narrower ones mask the rest
    kh = max(_bounds(i, h, oh)[1] - _bounds(i, h, oh)[0] for i in range(oh))
    kw = max(_bounds(j, w, ow)[1] - _bounds(j, w, ow)[0] for j in range(ow))
    rh, rw = te.reduce_axis((0, kh), name="kh"), te.reduce_axis((0, kw), name="kw")
    acc_dtype = dt.compute_dtype(x.dtype)

    def window_sum(n, c, i, j):
        (h0, h1), (w0, w1) = _bounds(i, h, oh), _bounds(j, w, ow)
        return te.sum(cast(acc_dtype, x[n, c, min_(h0 + rh, h - 1), min_(w0 + rw, w - 1)]), axis=[rh, rw],
                      where=te.all(h0 + rh < h1, w0 + rw < w1))

    total = te.compute(x.shape[:2] + (oh, ow), window_sum, name="window_sum")

    def mean(n, c, i, j):
        (h0, h1), (w0, w1) = _bounds(i, h, oh), _bounds(j, w, ow)
        return cast(x.dtype, total[n, c, i, j] / cast(acc_dtype, (h1 - h0) * (w1 - w0)))

    return [te.compute(total.shape, mean, name="adaptive_avg_pool2d")]


register(OpDef(
    name="adaptive_avg_pool2d",
    infer=_infer_adaptive,
    reference=_reference_adaptive,
    compute=_compute_adaptive,
    pattern="reduction",
    attrs={"output_size": REQUIRED},
    doc="Average pooling to a given output size (PyTorch's adaptive windows).",
))

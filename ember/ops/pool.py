"""Pooling over the spatial dimensions of N, C, spatial... tensors: max_pool1d/2d/3d and
avg_pool1d/2d/3d (window, strides, ONNX-style padding, dilations, ceil_mode, count_include_pad),
max_pool_indices (where each window's maximum is, as ONNX MaxPool's Indices), global_avg_pool (all
spatial dimensions, kept as 1) and adaptive_avg_pool2d (PyTorch's windows: floor(i*H/OH) to
ceil((i+1)*H/OH)). One n-dimensional definition serves every spatial rank.

max/avg pooling read a padded copy of the input (a PACK stage holding -inf or 0 around it, as far
as the last window reaches), so that their window loops need no bounds checks and vectorize
along the output columns. An average divides by the taps of its window that fall inside the
input (count_include_pad=False) or inside the padded input (True; a ceil_mode window reaching
past the padding counts only up to its end, as PyTorch does).

max_pool_indices: the flat index of the first (row-major window order) maximum of each window,
over the whole N, C, spatial... tensor (ONNX: in [0, N*C*prod(spatial)); storage_order=1 numbers
the spatial positions column-major), or over each channel's plane alone (`per_plane`, PyTorch's
max_pool*_with_indices). It takes the window maximum first, then the smallest index holding it.
"""

from __future__ import annotations

import itertools
import math

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
RANKS = (1, 2, 3)


def pool_attrs(n: int) -> dict:
    return {"kernel": REQUIRED, "strides": None, "padding": (0,) * 2 * n, "dilations": (1,) * n,
            "ceil_mode": False, "count_include_pad": True}


def _spatial(op: str, x: TensorType, n: int) -> tuple[int, ...]:
    if x.rank != n + 2:
        names = "N, C" + "".join(", " + d for d in "DHW"[3 - n:])
        raise OpTypeError(f"{op}: x must be {names} ({n} spatial dimensions), got shape {x.shape}")
    if any(isinstance(d, str) for d in x.shape[2:]):
        raise OpTypeError(f"{op}: the spatial dimensions of {x.shape} must be known sizes")
    return tuple(x.shape[2:])


def _window(op: str, attrs, n: int):
    kernel = tuple(attrs["kernel"])
    if len(kernel) != n or not all(isinstance(k, int) and k >= 1 for k in kernel):
        raise OpTypeError(f"{op}: kernel {kernel} must be {n} positive integers")
    strides, pads_b, pads_e, dilations = window_attrs(op, attrs, n, kernel)
    if any(p < 0 for p in pads_b + pads_e):
        raise OpTypeError(f"{op}: padding {attrs['padding']} must not be negative")
    return kernel, strides, pads_b, pads_e, dilations


def _pool_sizes(op: str, shape, attrs) -> tuple[int, ...]:
    kernel, strides, pads_b, pads_e, dilations = _window(op, attrs, len(shape) - 2)
    return tuple(window_out(op, size, k, s, pb, pe, d, attrs["ceil_mode"])
                 for size, k, s, pb, pe, d in zip(shape[2:], kernel, strides, pads_b, pads_e, dilations))


def _infer_pool(op: str, n: int):
    def infer(types, attrs):
        (x,) = types
        _spatial(op, x, n)
        if op.startswith("avg"):
            check_float(op, x)
        dtype = "int64" if op == "max_pool_indices" else x.dtype
        return [TensorType(tuple(x.shape[:2]) + _pool_sizes(op, x.shape, attrs), dtype)]

    return infer


def _taps(start, k: int, dilation: int, lo, hi, mn, mx):
    """How many of the taps start + t*dilation (t < k) lie in [lo, hi); on ints (mn, mx: min and
    max) or te expressions (te's min_ and max_)."""
    first = mx(0 - (start - lo) // dilation, 0)
    last = mn((hi - 1 - start) // dilation, k - 1)
    return mx(last - first + 1, 0)


def _lowest(dtype) -> float | int:
    return -np.inf if dt.is_float(np.dtype(dtype).name) else dt.int_range(np.dtype(dtype).name)[0]


def _padded_taps(x: np.ndarray, attrs, fill):
    """[(tap, window of that tap over x padded with `fill`)] for every tap of the window, in
    row-major order; each window has the output's shape."""
    n = x.ndim - 2
    kernel, strides, pads_b, pads_e, dilations = _window("pool", attrs, n)
    out = _pool_sizes("pool", x.shape, attrs)
    reach = [(o - 1) * s + d * (k - 1) + 1 for o, s, d, k in zip(out, strides, dilations, kernel)]
    width = [(0, 0), (0, 0)] + [(pb, max(r - size - pb, 0)) for pb, r, size in zip(pads_b, reach, x.shape[2:])]
    xp = np.pad(x, width, constant_values=fill)
    return [(tap, xp[(slice(None), slice(None)) + tuple(
        slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(tap, dilations, out, strides))])
        for tap in itertools.product(*(range(k) for k in kernel))]


def _reference_pool(op: str):
    def reference(inputs, attrs):
        (x,) = inputs
        n = x.ndim - 2
        if op.startswith("max"):
            return [np.max([w for _, w in _padded_taps(x, attrs, _lowest(x.dtype))], axis=0)]
        kernel, strides, pads_b, pads_e, dilations = _window(op, attrs, n)
        taps = [w for _, w in _padded_taps(x.astype(np.float64), attrs, 0)]
        counts = np.ones(())
        for axis, o in enumerate(_pool_sizes(op, x.shape, attrs)):
            size = x.shape[2 + axis]
            lo, hi = (-pads_b[axis], size + pads_e[axis]) if attrs["count_include_pad"] else (0, size)
            start = np.arange(o) * strides[axis] - pads_b[axis]
            counts = np.multiply.outer(counts, [_taps(int(s), kernel[axis], dilations[axis], lo, hi, min, max)
                                                for s in start])
        return [(np.sum(taps, axis=0) / counts).astype(x.dtype)]

    return reference


def _padded_input(x, attrs, out_spatial, fill):
    """x padded with `fill` as far as the last window reaches (x itself when no window leaves it)."""
    kernel, strides, pads_b, _, dilations = _window("pool", attrs, x.ndim - 2)
    size = [as_int(d) for d in x.shape[2:]]
    reach = [max((o - 1) * s + d * (k - 1) + 1, m + pb) for o, s, d, k, m, pb in
             zip(out_spatial, strides, dilations, kernel, size, pads_b)]
    if all(r == m for r, m in zip(reach, size)) and not any(pads_b):
        return x

    def element(*i):
        pos = i[2:]
        inside = te.all(*(c for p, pb, m in zip(pos, pads_b, size) for c in (p >= pb, p < m + pb)))
        return te.if_then_else(inside, x[i[:2] + tuple(p - pb for p, pb in zip(pos, pads_b))], fill)

    return te.compute(tuple(x.shape[:2]) + tuple(reach), element, name="x_padded", tag=PACK)


def _window_max(x, attrs, out_spatial):
    """The te maximum of each window (the ANCHOR stage), and its reduction axes and tap reader."""
    kernel, strides, _, _, dilations = _window("pool", attrs, x.ndim - 2)
    xp = _padded_input(x, attrs, out_spatial, te.max.identity(x.dtype))
    taps = [te.reduce_axis((0, k), name=f"k{d}") for d, k in enumerate(kernel)]

    def tap(i):
        return xp[i[:2] + tuple(p * s + t * d for p, t, s, d in zip(i[2:], taps, strides, dilations))]

    return te.compute(tuple(x.shape[:2]) + tuple(out_spatial), lambda *i: te.max(tap(i), axis=taps),
                      name="pool", tag=ANCHOR)


def _compute_pool(op: str):
    def compute(inputs, attrs, out_types):
        (x,) = inputs
        out_spatial = out_types[0].shape[2:]
        if op.startswith("max"):
            return [_window_max(x, attrs, out_spatial)]
        kernel, strides, _, _, dilations = _window(op, attrs, x.ndim - 2)
        xp = _padded_input(x, attrs, out_spatial, te.const(0, x.dtype))
        taps = [te.reduce_axis((0, k), name=f"k{d}") for d, k in enumerate(kernel)]
        acc_dtype = dt.compute_dtype(x.dtype)

        def total(*i):
            pos = tuple(p * s + t * d for p, t, s, d in zip(i[2:], taps, strides, dilations))
            return te.sum(cast(acc_dtype, xp[i[:2] + pos]), axis=taps)

        acc = te.compute(tuple(x.shape[:2]) + tuple(out_spatial), total, name="pool", tag=ANCHOR)
        return [window_mean(acc, x.dtype, attrs, [as_int(d) for d in x.shape[2:]], slice(2, None), "avg_pool")]

    return compute


def window_mean(acc, dtype, attrs, size, spatial: slice, name: str):
    """Each window's sum `acc` divided by how many of its taps count (inside the input, or inside
    the padded input with count_include_pad), as `dtype`; `spatial` picks acc's spatial indices
    (NCHW's [2:], a blocked NCHW{b}c's [2:4]). Windows that all count alike divide by a constant."""
    kernel, strides, pads_b, pads_e, dilations = _window("avg_pool", attrs, len(size))
    out = [as_int(d) for d in acc.shape[spatial]]

    def count(i, axis, mn, mx):
        lo, hi = (-pads_b[axis], size[axis] + pads_e[axis]) if attrs["count_include_pad"] else (0, size[axis])
        return _taps(i * strides[axis] - pads_b[axis], kernel[axis], dilations[axis], lo, hi, mn, mx)

    counts = [{count(i, axis, min, max) for i in range(o)} for axis, o in enumerate(out)]
    if all(len(c) == 1 for c in counts):
        constant = math.prod(c.pop() for c in counts)
        return te.compute(acc.shape, lambda *i: cast(dtype, acc[i] / te.const(constant, acc.dtype)), name=name)

    def mean(*i):
        taps_in = math.prod((count(p, axis, min_, max_) for axis, p in enumerate(i[spatial][1:], start=1)),
                            start=count(i[spatial][0], 0, min_, max_))
        return cast(dtype, acc[i] / cast(acc.dtype, taps_in))

    return te.compute(acc.shape, mean, name=name)


for _n in RANKS:
    for _kind in ("max", "avg"):
        _op = f"{_kind}_pool{_n}d"
        register(OpDef(
            name=_op, infer=_infer_pool(_op, _n), reference=_reference_pool(_op), compute=_compute_pool(_op),
            pattern="reduction", attrs=pool_attrs(_n),
            doc=f"{_n}-d {_kind} pooling with ONNX-style padding, dilations and ceil_mode.",
        ))


# -- where the maxima are ------------------------------------------------------------------------

INDICES_ATTRS = {**pool_attrs(2), "padding": None, "dilations": None, "storage_order": 0, "per_plane": False}


def _filled(attrs, n: int) -> dict:
    """max_pool_indices' attributes with the defaults of n spatial dimensions."""
    return {**attrs, "padding": attrs["padding"] or (0,) * 2 * n, "dilations": attrs["dilations"] or (1,) * n}


def _infer_indices(types, attrs):
    (x,) = types
    if x.rank < 3:
        raise OpTypeError(f"max_pool_indices: x must be N, C, spatial..., got shape {x.shape}")
    if attrs["storage_order"] not in (0, 1):
        raise OpTypeError(f"max_pool_indices: storage_order {attrs['storage_order']!r} must be 0 or 1")
    return _infer_pool("max_pool_indices", x.rank - 2)(types, _filled(attrs, x.rank - 2))


def _strides_of(shape, storage_order: int) -> list[int]:
    """The flat-index step of each spatial axis: row-major, or column-major (storage_order 1)."""
    order = range(len(shape)) if storage_order else reversed(range(len(shape)))
    steps, step = [0] * len(shape), 1
    for axis in order:
        steps[axis], step = step, step * shape[axis]
    return steps


def _reference_indices(inputs, attrs):
    (x,) = inputs
    n = x.ndim - 2
    attrs = _filled(attrs, n)
    _, strides, pads_b, _, dilations = _window("max_pool_indices", attrs, n)
    taps = _padded_taps(x, attrs, _lowest(x.dtype))
    best = np.max([w for _, w in taps], axis=0)
    out = best.shape[2:]
    steps = _strides_of(x.shape[2:], attrs["storage_order"])
    found = np.full(best.shape, -1, np.int64)
    for tap, window in reversed(taps):  # the first tap holding the maximum wins
        flat, inside = np.zeros(out, np.int64), np.ones(out, bool)
        for k, (o, s, t, d, pb, size, step) in enumerate(zip(out, strides, tap, dilations, pads_b, x.shape[2:],
                                                               steps)):
            q = (np.arange(o) * s + t * d - pb).reshape((1,) * k + (-1,) + (1,) * (n - 1 - k))
            flat, inside = flat + q * step, inside & (q >= 0) & (q < size)
        found = np.where(inside & (window == best), flat, found)
    if not attrs["per_plane"]:
        plane = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(x.shape[:2] + (1,) * n)
        found = found + plane * math.prod(x.shape[2:])
    return [found]


def _compute_indices(inputs, attrs, out_types):
    (x,) = inputs
    n = x.ndim - 2
    attrs = _filled(attrs, n)
    kernel, strides, pads_b, _, dilations = _window("max_pool_indices", attrs, n)
    size = [as_int(d) for d in x.shape[2:]]
    best = _window_max(x, attrs, out_types[0].shape[2:])
    taps = [te.reduce_axis((0, k), name=f"i{d}") for d, k in enumerate(kernel)]
    last = te.const(np.iinfo(np.int64).max, "int64")
    row_major = _strides_of(size, 0)

    def first(*i):  # the smallest row-major position holding the maximum: the first in window order
        pos = [p * s + t * d - pb for p, t, s, d, pb in zip(i[2:], taps, strides, dilations, pads_b)]
        inside = te.all(*(c for q, m in zip(pos, size) for c in (q >= 0, q < m)))
        value = x[i[:2] + tuple(min_(max_(q, 0), m - 1) for q, m in zip(pos, size))]
        flat = sum((q * step for q, step in zip(pos[1:], row_major[1:])), pos[0] * row_major[0])
        return te.min(te.if_then_else(te.all(inside, value == best[i]), cast("int64", flat), last), axis=taps)

    found = te.compute(best.shape, first, name="max_pool_first")
    steps = _strides_of(size, attrs["storage_order"])

    def index(*i):
        flat = found[i]
        if attrs["storage_order"]:  # renumbered column-major
            flat = sum(((flat // r) % m * c for r, m, c in zip(row_major[1:], size[1:], steps[1:])),
                       flat // row_major[0] * steps[0])
        if not attrs["per_plane"]:
            flat = flat + (i[0] * as_int(x.shape[1]) + i[1]) * math.prod(size)
        return flat

    return [te.compute(best.shape, index, name="max_pool_indices")]


register(OpDef(
    name="max_pool_indices", infer=_infer_indices, reference=_reference_indices, compute=_compute_indices,
    pattern="reduction", attrs=INDICES_ATTRS,
    doc="The flat index of each max-pooling window's first maximum (ONNX MaxPool's Indices).",
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
    _spatial("adaptive_avg_pool2d", x, 2)
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

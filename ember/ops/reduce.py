"""Reductions over axes: sum, mean, max, min, prod (axes=None: all), argmax, argmin (one axis,
int64 output, the first extreme), var and std (correction: 0 biased, 1 unbiased), l2_norm.

The pieces the reductions share (axis validation, `reduce_over`, `acc`) are in reduction.py.

float16 inputs accumulate sums and products in float32 (`acc`) and round once at the end.
var, std and l2_norm compute their statistics scaled by a power of two per output element
(`scaling`), so that values whose squares overflow (above 1e19 in float32) or underflow still
give the float64 answer where it is representable (std and l2_norm take the root before
unscaling: a norm of 1e20 is finite though its square is not). sum, mean and prod accumulate
as they are: a sum overflows only where its partial sums pass the largest float, which for mean means values above
FLT_MAX / n (4e35 in float32 for n = 768); scaling every element by 1 / n would move the failure
to the small end (values below n * FLT_MIN losing digits to subnormals), and a scale per row costs
a pass over it, a third of the time of the most common reduction.
Kernels run their output elements in parallel, each computing the reduction stages it needs
(the sum of mean and var, the max of argmax) inside its iteration, with reductions over
contiguous elements in vector lanes (ember.schedules.cpu.rows, every output element a row), or,
where keepdims keeps a last axis that fills vectors (a blocked layout's pool over H and W),
vectors of output elements at once (ember.schedules.cpu.reduce).
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from .common import check_float, normalize_axis
from .reduction import acc, acc_dtype, check_keepdims, count, normalize_axes, reduce_over, reduced_shape
from .registry import REQUIRED, OpDef, OpTypeError, register
from .scaling import row_scale, scaled_center, scaled_squares

# -- operators --------------------------------------------------------------------------------


def _infer_reduce(name: str, float_only: bool):
    def infer(types: list[TensorType], attrs) -> list[TensorType]:
        (x,) = types
        if float_only:
            check_float(name, x)
        elif dt.is_bool(x.dtype):
            raise OpTypeError(f"{name} needs a numeric input, got bool")
        keepdims = check_keepdims(name, attrs)
        axes = normalize_axes(name, attrs["axes"], x.rank)
        correction = attrs.get("correction", 0)
        if isinstance(correction, bool) or not isinstance(correction, int | float):
            raise OpTypeError(f"{name}: correction must be a number, got {correction!r}")
        return [TensorType(reduced_shape(x.shape, axes, keepdims), x.dtype)]

    return infer


def _identity(np_fn, dtype: np.dtype):
    """The identity of max (the lowest value) or min (the highest) in dtype."""
    if dtype == np.bool_:
        return np_fn is np.min
    if dt.is_float(dtype.name):
        return -np.inf if np_fn is np.max else np.inf
    lo, hi = dt.int_range(dtype.name)
    return lo if np_fn is np.max else hi


def _reference(np_fn):
    def reference(inputs, attrs):
        (x,) = inputs
        axes = normalize_axes("reduce", attrs["axes"], x.ndim)
        wide = x.astype("float64") if dt.is_float(x.dtype.name) else x
        extra = {"ddof": attrs["correction"]} if "correction" in attrs else {}
        if np_fn in (np.max, np.min):  # the reduction of nothing is the identity, as the kernels give
            extra["initial"] = _identity(np_fn, wide.dtype)
        with np.errstate(divide="ignore", invalid="ignore"):  # var of too few elements: inf/NaN
            out = np_fn(wide, axis=axes, keepdims=attrs["keepdims"], **extra)
        return [np.asarray(out).astype(x.dtype)]

    return reference


def _compute_simple(reducer):
    """sum, prod, max, min: one reduction stage, and a rounding stage for float16."""

    def compute(inputs, attrs, out_types):
        (x,) = inputs
        axes = normalize_axes("reduce", attrs["axes"], x.ndim)
        if acc_dtype(x.dtype) == x.dtype or reducer in (te.max, te.min):
            return [reduce_over(x, axes, attrs["keepdims"], reducer, "out")]
        total = reduce_over(x, axes, attrs["keepdims"], reducer, "acc", lambda i, idx: acc(x[idx]))
        return [te.compute(total.shape, lambda *i: total[i].astype(x.dtype), name="out")]

    return compute


def _compute_mean(inputs, attrs, out_types):
    (x,) = inputs
    axes = normalize_axes("mean", attrs["axes"], x.ndim)
    total = reduce_over(x, axes, attrs["keepdims"], te.sum, "total", lambda i, idx: acc(x[idx]))
    n = count(x, axes)
    return [te.compute(total.shape, lambda *i: (total[i] / te.cast(total.dtype, n)).astype(x.dtype), name="out")]


def _compute_moment(root: bool):
    """var (root False) and std (root True): two passes (the mean, then the squared deviations
    from it), in the scaled frame of `scaling`: stable for large means, no overflow of the squares
    of values above 1e19. std takes the root in the scaled frame and unscales after it, so that a
    standard deviation of 1e20 (a variance of 1e40, past float32) is finite."""

    def compute(inputs, attrs, out_types):
        (x,) = inputs
        axes = normalize_axes("var", attrs["axes"], x.ndim)
        keepdims = attrs["keepdims"]
        n = te.cast(acc_dtype(x.dtype), count(x, axes))
        scale = row_scale(x, axes, keepdims)
        sq = scaled_squares(x, axes, scale, scaled_center(x, axes, scale, n, keepdims), keepdims)
        correction = float(attrs["correction"])

        def out(*i):
            if root:
                return (te.sqrt(sq[i] / (n - correction)) / scale[i]).astype(x.dtype)
            # unscaled one factor of the scale at a time: 1 / scale^2 may overflow where the result does not
            return (sq[i] / (n - correction) / scale[i] / scale[i]).astype(x.dtype)

        return [te.compute(sq.shape, out, name="out")]

    return compute


def _compute_l2_norm(inputs, attrs, out_types):
    """sqrt(sum(x^2)) in the scaled frame of `scaling` (LAPACK's nrm2), unscaled after the root:
    finite for rows of 1e20 (squares past float32), exact to rounding for rows of 1e-20
    (subnormal squares)."""
    (x,) = inputs
    axes = normalize_axes("l2_norm", attrs["axes"], x.ndim)
    keepdims = attrs["keepdims"]
    scale = row_scale(x, axes, keepdims)
    sq = scaled_squares(x, axes, scale, None, keepdims)
    return [te.compute(sq.shape, lambda *i: (te.sqrt(sq[i]) / scale[i]).astype(x.dtype), name="out")]


def _scaled_reference(fn):
    """The float64 reference of a reduction homogeneous of degree 1 (std, the norm), computed on
    each row divided by its largest magnitude, so that float64 inputs near 1e300 do not overflow."""

    def reference(inputs, attrs):
        (x,) = inputs
        axes = normalize_axes("reduce", attrs["axes"], x.ndim)
        wide = x.astype("float64")
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            top = np.max(np.abs(wide), axis=axes, keepdims=True, initial=0.0)
            top = np.where(np.isfinite(top) & (top > 0), top, 1.0)
            out = fn(wide / top, axes, attrs) * top
        out = out if attrs["keepdims"] else np.squeeze(out, axis=axes)
        return [np.asarray(out).astype(x.dtype)]

    return reference


def _l2(x, axes, attrs):
    return np.sqrt(np.sum(x * x, axis=axes, keepdims=True))


def _std(x, axes, attrs):
    return np.std(x, axis=axes, keepdims=True, ddof=attrs["correction"])


REDUCE_ATTRS = {"axes": None, "keepdims": False}
SIMPLE = [("sum", np.sum, te.sum), ("prod", np.prod, te.prod), ("max", np.max, te.max), ("min", np.min, te.min)]

for _name, _np_fn, _reducer in SIMPLE:
    register(OpDef(
        name=_name,
        infer=_infer_reduce(_name, float_only=False),
        reference=_reference(_np_fn),
        compute=_compute_simple(_reducer),
        pattern="reduction",
        attrs=REDUCE_ATTRS,
        doc=f"{_name} over axes (None: all), keeping them as size 1 when keepdims.",
    ))

register(OpDef(
    name="mean",
    infer=_infer_reduce("mean", float_only=True),
    reference=_reference(np.mean),
    compute=_compute_mean,
    pattern="reduction",
    attrs=REDUCE_ATTRS,
    doc="The mean over axes (None: all).",
))

register(OpDef(
    name="var",
    infer=_infer_reduce("var", float_only=True),
    reference=_reference(np.var),
    compute=_compute_moment(root=False),
    pattern="reduction",
    attrs={**REDUCE_ATTRS, "correction": 0},
    doc="The variance over axes: the sum of squared deviations divided by (count - correction).",
))

register(OpDef(
    name="std",
    infer=_infer_reduce("std", float_only=True),
    reference=_scaled_reference(_std),
    compute=_compute_moment(root=True),
    pattern="reduction",
    attrs={**REDUCE_ATTRS, "correction": 0},
    doc="The standard deviation over axes: the square root of var.",
))

register(OpDef(
    name="l2_norm",
    infer=_infer_reduce("l2_norm", float_only=True),
    reference=_scaled_reference(_l2),
    compute=_compute_l2_norm,
    pattern="reduction",
    attrs=REDUCE_ATTRS,
    doc="The Euclidean norm over axes: sqrt(sum(x^2)), without overflow or underflow of the squares.",
))


# -- argmax, argmin -----------------------------------------------------------------------------


def _infer_arg(name: str):
    def infer(types: list[TensorType], attrs) -> list[TensorType]:
        (x,) = types
        if dt.is_bool(x.dtype):
            raise OpTypeError(f"{name} needs a numeric input, got bool")
        if x.rank == 0:
            raise OpTypeError(f"{name} needs an input of rank 1 or more, got a scalar")
        if not isinstance(attrs["axis"], int) or isinstance(attrs["axis"], bool):
            raise OpTypeError(f"{name}: axis must be an int, got {attrs['axis']!r}")
        axis = normalize_axis(name, attrs["axis"], x.rank)
        if x.shape[axis] == 0:
            raise OpTypeError(f"{name} over axis {axis} of {list(x.shape)}, which is empty: no element to pick")
        return [TensorType(reduced_shape(x.shape, (axis,), check_keepdims(name, attrs)), "int64")]

    return infer


def _arg_reference(np_fn):
    def reference(inputs, attrs):
        (x,) = inputs
        axis = normalize_axis("arg", attrs["axis"], x.ndim)
        return [np.asarray(np_fn(x, axis=axis, keepdims=attrs["keepdims"])).astype("int64")]

    return reference


def _arg_compute(reducer):
    """The extreme value, then the smallest index holding it (the first occurrence). NaN is the
    extreme of a row that has one, as in NumPy: te.max and te.min propagate it."""

    def compute(inputs, attrs, out_types):
        (x,) = inputs
        axis = normalize_axis("arg", attrs["axis"], x.ndim)
        keepdims = attrs["keepdims"]
        best = reduce_over(x, (axis,), keepdims, reducer, "best")
        n = x.shape[axis]

        def first(i, idx):
            hit = x[idx] == best[i]
            if dt.is_float(x.dtype):
                hit = te.any(hit, x[idx] != x[idx])
            return te.if_then_else(hit, idx[axis], te.cast("int64", n))

        return [reduce_over(x, (axis,), keepdims, te.min, "out", first)]

    return compute


for _name, _np_fn, _reducer in [("argmax", np.argmax, te.max), ("argmin", np.argmin, te.min)]:
    register(OpDef(
        name=_name,
        infer=_infer_arg(_name),
        reference=_arg_reference(_np_fn),
        compute=_arg_compute(_reducer),
        pattern="reduction",
        attrs={"axis": REQUIRED, "keepdims": False},
        doc=f"The index of the first {_name[3:]}imum along axis (int64).",
    ))

"""Normalizations: softmax, log_softmax (over one axis), layer_norm, rms_norm (over the trailing
normalized_ndim axes), group_norm, instance_norm (per sample and channel group), batch_norm
(inference, from running statistics).

Each is a few te stages over rows (a row: the elements normalized together):
- softmax: the row's max; exp(x - max) (computed once, kept for the row); its sum; then
  exp(x - max) / sum. Subtracting the max keeps exp from overflowing; log_softmax is
  x - max - log(sum), never the log of a quotient.
- layer, group, instance norm: the row's scale (a power of two from the sum of its magnitudes);
  the mean, as the first element plus the mean deviation from it; the sum of squared deviations
  from the mean (two passes, stable for large means); the reciprocal standard deviation; then
  each element. Statistics are computed on the row scaled by its power of two (`scaling`), so
  that rows of 1e20 (whose squares overflow float32) or 1e-20 (whose squares are subnormal) give
  the float64 answer. The variance is biased (divided by the count), as in PyTorch and ONNX.
- rms_norm: the same without the mean.
The kernels compute rows in parallel, with a row's statistics inside its iteration
(`rows.schedule_rows`). float16 inputs are computed and accumulated in float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir.expr import as_int
from .common import check_float, normalize_axis, result_dtype
from .hints import by_rows
from .reduction import acc, acc_dtype, count, reduce_over
from .registry import REQUIRED, OpDef, OpTypeError, register
from .scaling import deviation, row_scale, scaled_center, scaled_rstd, scaled_squares


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype("float64")


def _check_eps(op: str, attrs) -> None:
    eps = attrs["eps"]
    if isinstance(eps, bool) or not isinstance(eps, int | float) or eps < 0:
        raise OpTypeError(f"{op}: eps must be a non-negative number, got {eps!r}")


def _check_params(op: str, x: TensorType, params: Sequence[TensorType], shape: tuple, what: str,
                  names: Sequence[str] = ("weight", "bias")) -> None:
    """Parameters (optional weight and bias, by default) of x's dtype and the given shape."""
    for name, p in zip(names, params):
        result_dtype(op, x, p)
        if tuple(p.shape) != tuple(shape):
            raise OpTypeError(f"{op}: {name} has shape {tuple(p.shape)}; it must be {tuple(shape)} ({what})")


def _rows(i, axes: Sequence[int]) -> tuple:
    """An output index without the normalized axes: the index of its row's statistics."""
    return tuple(v for d, v in enumerate(i) if d not in axes)


# -- softmax, log_softmax -----------------------------------------------------------------------


def _infer_softmax(name: str):
    def infer(types: list[TensorType], attrs) -> list[TensorType]:
        (x,) = types
        check_float(name, x)
        if isinstance(attrs["axis"], bool) or not isinstance(attrs["axis"], int):
            raise OpTypeError(f"{name}: axis must be an int, got {attrs['axis']!r}")
        normalize_axis(name, attrs["axis"], x.rank)
        return [x]

    return infer


def _softmax_reference(log: bool):
    def reference(inputs, attrs):
        (x,) = inputs
        axis = normalize_axis("softmax", attrs["axis"], x.ndim)
        shifted = _f64(x) - _f64(x).max(axis=axis, keepdims=True)
        total = np.exp(shifted).sum(axis=axis, keepdims=True)
        out = shifted - np.log(total) if log else np.exp(shifted) / total
        return [out.astype(x.dtype)]

    return reference


def _softmax_compute(log: bool):
    def compute(inputs, attrs, out_types):
        (x,) = inputs
        axis = normalize_axis("softmax", attrs["axis"], x.ndim)
        mx = reduce_over(x, (axis,), False, te.max, "mx")
        if log:  # x - max - log(sum(exp(x - max))): one exp per element, in the sum
            total = reduce_over(x, (axis,), False, te.sum, "total", lambda r, idx: te.exp(acc(x[idx]) - mx[r]))

            def element(*i):
                r = _rows(i, (axis,))
                return (acc(x[i]) - mx[r] - te.log(total[r])).astype(x.dtype)
        else:  # exp(x - max) once per element, into a row of its own that the sum and out read
            ex = te.compute(x.shape, lambda *i: te.exp(acc(x[i]) - mx[_rows(i, (axis,))]), name="ex")
            total = reduce_over(ex, (axis,), False, te.sum, "total")

            def element(*i):
                return (ex[i] / total[_rows(i, (axis,))]).astype(x.dtype)

        rows = [d for d in range(x.ndim) if d != axis]
        return [te.compute(x.shape, element, name="out", attrs=by_rows(rows, [axis]))]

    return compute


for _name, _log in [("softmax", False), ("log_softmax", True)]:
    register(OpDef(
        name=_name,
        infer=_infer_softmax(_name),
        reference=_softmax_reference(_log),
        compute=_softmax_compute(_log),
        pattern="reduction",
        attrs={"axis": -1},
        doc=f"{_name} along axis, computed stably (the row's max subtracted first).",
    ))


# -- layer_norm, rms_norm -----------------------------------------------------------------------


def _infer_last_dims(name: str):
    def infer(types: list[TensorType], attrs) -> list[TensorType]:
        x, *params = types
        check_float(name, x)
        _check_eps(name, attrs)
        nd = attrs["normalized_ndim"]
        if isinstance(nd, bool) or not isinstance(nd, int) or not 1 <= nd <= x.rank:
            raise OpTypeError(f"{name}: normalized_ndim must be an int from 1 to the input's rank {x.rank}, got {nd!r}")
        _check_params(name, x, params, x.shape[x.rank - nd:], f"the last {nd} dims of the input")
        return [x]

    return infer


def _moments(x, axes: Sequence[int], eps: float, centered: bool):
    """The row stages (scale, center, rstd) of `scaling` for x's rows over `axes`, indexed by the
    row (the output index without `axes`); center is None when not centered."""
    n = te.cast(acc_dtype(x.dtype), count(x, axes))
    scale = row_scale(x, axes)
    center = scaled_center(x, axes, scale, n) if centered else None
    return axes, scale, center, scaled_rstd(scaled_squares(x, axes, scale, center), n, scale, eps)


def _normalized(x, params, i, row, moments, param_index):
    """Output element i: its deviation from the mean over the standard deviation, from the
    statistics of its row (`_moments`), times the weight and plus the bias if given (at param_index)."""
    _, scale, center, rstd = moments
    v = deviation(x, scale, center, row, i) * rstd[row]
    if len(params) > 0:
        v = v * acc(params[0][param_index])
    if len(params) > 1:
        v = v + acc(params[1][param_index])
    return v.astype(x.dtype)


def _last_dims_compute(centered: bool):
    def compute(inputs, attrs, out_types):
        x, *params = inputs
        nd = attrs["normalized_ndim"]
        axes = tuple(range(x.ndim - nd, x.ndim))
        moments = _moments(x, axes, attrs["eps"], centered)
        return [te.compute(
            x.shape, lambda *i: _normalized(x, params, i, _rows(i, axes), moments, i[x.ndim - nd:]),
            name="out", attrs=by_rows(range(x.ndim - nd), axes),
        )]

    return compute


def _last_dims_reference(centered: bool):
    def reference(inputs, attrs):
        x, *params = (_f64(t) for t in inputs)
        axes = tuple(range(x.ndim - attrs["normalized_ndim"], x.ndim))
        if centered:
            x = x - x.mean(axis=axes, keepdims=True)
        out = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + attrs["eps"])
        out = _affine(out, params)
        return [out.astype(inputs[0].dtype)]

    return reference


def _affine(out: np.ndarray, params: Sequence[np.ndarray]) -> np.ndarray:
    if len(params) > 0:
        out = out * params[0]
    if len(params) > 1:
        out = out + params[1]
    return out


register(OpDef(
    name="layer_norm",
    infer=_infer_last_dims("layer_norm"),
    reference=_last_dims_reference(centered=True),
    compute=_last_dims_compute(centered=True),
    pattern="reduction",
    attrs={"normalized_ndim": 1, "eps": 1e-5},
    num_inputs=(1, 3),
    doc="layer_norm(x, weight?, bias?): normalizes the last normalized_ndim dims (biased variance).",
))

register(OpDef(
    name="rms_norm",
    infer=_infer_last_dims("rms_norm"),
    reference=_last_dims_reference(centered=False),
    compute=_last_dims_compute(centered=False),
    pattern="reduction",
    attrs={"normalized_ndim": 1, "eps": 1e-6},
    num_inputs=(1, 2),
    doc="rms_norm(x, weight?): x / sqrt(mean(x^2) + eps) over the last normalized_ndim dims, times weight.",
))


# -- instance_norm, group_norm ----------------------------------------------------------------


def _check_channels(name: str, x: TensorType) -> None:
    if x.rank < 2:
        raise OpTypeError(f"{name} needs an input of rank 2 or more (N, C, ...), got rank {x.rank}")


def _infer_instance_norm(types: list[TensorType], attrs) -> list[TensorType]:
    x, *params = types
    check_float("instance_norm", x)
    _check_channels("instance_norm", x)
    _check_eps("instance_norm", attrs)
    _check_params("instance_norm", x, params, (x.shape[1],), "one per channel")
    return [x]


def _instance_norm_compute(inputs, attrs, out_types):
    x, *params = inputs
    axes = tuple(range(2, x.ndim))
    moments = _moments(x, axes, attrs["eps"], centered=True)
    return [te.compute(
        x.shape, lambda *i: _normalized(x, params, i, (i[0], i[1]), moments, (i[1],)),
        name="out", attrs=by_rows((0, 1), axes),
    )]


def _group_norm_reference(inputs, attrs):
    x, *params = (_f64(t) for t in inputs)
    groups = x.reshape(x.shape[0], attrs.get("num_groups", x.shape[1]), -1)
    groups = groups - groups.mean(axis=-1, keepdims=True)
    out = (groups / np.sqrt((groups * groups).mean(axis=-1, keepdims=True) + attrs["eps"])).reshape(x.shape)
    per_channel = (-1,) + (1,) * (x.ndim - 2)
    return [_affine(out, [p.reshape(per_channel) for p in params]).astype(inputs[0].dtype)]


register(OpDef(
    name="instance_norm",
    infer=_infer_instance_norm,
    reference=_group_norm_reference,  # one group per channel
    compute=_instance_norm_compute,
    pattern="reduction",
    attrs={"eps": 1e-5},
    num_inputs=(1, 3),
    doc="instance_norm(x, weight?, bias?): each (sample, channel) normalized over its spatial dims.",
))


def _infer_group_norm(types: list[TensorType], attrs) -> list[TensorType]:
    x, *params = types
    check_float("group_norm", x)
    _check_channels("group_norm", x)
    _check_eps("group_norm", attrs)
    groups, channels = attrs["num_groups"], x.shape[1]
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise OpTypeError(f"group_norm: num_groups must be a positive int, got {groups!r}")
    if not isinstance(channels, int):
        raise OpTypeError(f"group_norm: the channel dim must be static, got {channels!r}")
    if channels % groups:
        raise OpTypeError(f"group_norm: {channels} channels do not split into {groups} groups")
    _check_params("group_norm", x, params, (channels,), "one per channel")
    return [x]


class _Grouped:
    """x (N, C, *spatial) seen as (N, groups, C / groups, *spatial), without a copy: what
    `_moments` reduces over the trailing axes of (contiguous: a group's channels are adjacent)."""

    def __init__(self, x, groups: int):
        self.x, self.per_group, self.dtype = x, as_int(x.shape[1]) // groups, x.dtype
        self.shape = (x.shape[0], groups, self.per_group, *x.shape[2:])
        self.ndim = len(self.shape)

    def __getitem__(self, index):
        n, g, c, *rest = index
        return self.x[(n, g * self.per_group + c, *rest)]


def _group_norm_compute(inputs, attrs, out_types):
    """Statistics per (sample, group) over the group's channels and every spatial position."""
    x, *params = inputs
    grouped = _Grouped(x, attrs["num_groups"])
    moments = _moments(grouped, tuple(range(2, grouped.ndim)), attrs["eps"], centered=True)
    per_group = grouped.per_group

    def element(*i):
        within = (i[0], i[1] // per_group, i[1] % per_group, *i[2:])  # the index into the grouped view
        return _normalized(grouped, params, within, within[:2], moments, (i[1],))

    return [te.compute(
        x.shape, element,
        name="out", attrs={"group": per_group},
    )]


register(OpDef(
    name="group_norm",
    infer=_infer_group_norm,
    reference=_group_norm_reference,
    compute=_group_norm_compute,
    pattern="reduction",
    attrs={"num_groups": REQUIRED, "eps": 1e-5},
    num_inputs=(1, 3),
    doc="group_norm(x, weight?, bias?): channels in num_groups groups, each normalized per sample.",
))


# -- batch_norm ----------------------------------------------------------------------------------


def _infer_batch_norm(types: list[TensorType], attrs) -> list[TensorType]:
    x, *params = types
    check_float("batch_norm", x)
    _check_channels("batch_norm", x)
    _check_eps("batch_norm", attrs)
    _check_params("batch_norm", x, params, (x.shape[1],), "one per channel", ("mean", "var", "weight", "bias"))
    return [x]


def _batch_norm_reference(inputs, attrs):
    x, mean, var, weight, bias = (_f64(t) for t in inputs)
    per_channel = (-1,) + (1,) * (x.ndim - 2)
    scale = (weight / np.sqrt(var + attrs["eps"])).reshape(per_channel)
    return [((x - mean.reshape(per_channel)) * scale + bias.reshape(per_channel)).astype(inputs[0].dtype)]


def _batch_norm_compute(inputs, attrs, out_types):
    """A per-channel scale (weight / sqrt(var + eps)) first, then one multiply-add per element."""
    x, mean, var, weight, bias = inputs
    eps = float(attrs["eps"])
    scale = te.compute((x.shape[1],), lambda c: acc(weight[c]) * te.rsqrt(acc(var[c]) + eps), name="scale")
    return [te.compute(
        x.shape, lambda *i: ((acc(x[i]) - acc(mean[i[1]])) * scale[i[1]] + acc(bias[i[1]])).astype(x.dtype),
        name="out",
    )]


register(OpDef(
    name="batch_norm",
    infer=_infer_batch_norm,
    reference=_batch_norm_reference,
    compute=_batch_norm_compute,
    pattern="broadcast",
    attrs={"eps": 1e-5},
    num_inputs=(5, 5),
    doc="batch_norm(x, mean, var, weight, bias): inference from running statistics; channels on axis 1.",
))

"""Element-wise indexing and scatters: gather_elements, gather_nd, scatter_elements, scatter_nd.

gather_elements(data, indices; axis) is torch.gather / numpy.take_along_axis: the output has the
indices' shape, and out[i] = data[i with its axis index replaced by indices[i]]. gather_nd(data,
indices; batch_dims) is ONNX GatherND: each index vector (the last axis of indices) picks a slice
of data, after `batch_dims` leading dimensions shared by both. Both are pattern `injective`.

te computes each output element from a formula, so a scatter is written from the side of the
output: an output element looks for the updates aimed at it. For scatter_elements only the
updates of the same row along the axis can hit it (a search over indices.shape[axis]); for
scatter_nd every update slice can (a search over the indices' batch dimensions, done once per
addressed slice, not per element of the slice). With `reduction="none"` the last update aimed
at an element wins, as the sequential definition of ONNX and torch gives; "add", "mul", "max"
and "min" combine every update aimed at an element with the element (pattern `opaque`: a
search, then the elementwise result). Work is (output size) x (length searched): fine for the
label, mask and cache-slot scatters models do, quadratic for a full permutation. Negative
indices count from the end; one out of range raises IndexOutOfRangeError when the model runs.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import as_int, cast, checked_index
from .common import checked_indices, normalize_axis, result_dtype, te_shape
from .reduction import acc
from .registry import OpDef, OpTypeError, register

REDUCTIONS = ("none", "add", "mul", "max", "min")


def _check_indices(op: str, t: TensorType) -> None:
    if not dt.is_int(t.dtype):
        raise OpTypeError(f"{op}: indices must be integers, got {t.dtype}")


def _wrap(idx, n):
    """An index read from a tensor, as int64, negative ones counted from the end; one out of range
    raises IndexOutOfRangeError at run time (the loop IR's INDEX intrinsic)."""
    return checked_index(idx, n)


def _along(i, axis: int, p):
    return (*i[:axis], p, *i[axis + 1:])


# -- gather_elements ---------------------------------------------------------------------------


def _infer_gather_elements(types, attrs):
    data, indices = types
    _check_indices("gather_elements", indices)
    if data.rank == 0 or indices.rank != data.rank:
        raise OpTypeError(f"gather_elements: data and indices must have the same rank (1 or more), "
                          f"got {data.shape} and {indices.shape}")
    normalize_axis("gather_elements", attrs["axis"], data.rank)
    return [TensorType(indices.shape, data.dtype)]


def _reference_gather_elements(inputs, attrs):
    data, indices = inputs
    axis = normalize_axis("gather_elements", attrs["axis"], data.ndim)
    idx = checked_indices("gather_elements", indices, data.shape[axis])
    rows = data[tuple(slice(None) if k == axis else slice(0, n) for k, n in enumerate(indices.shape))]
    return [np.take_along_axis(rows, idx, axis)]


def _compute_gather_elements(inputs, attrs, out_types):
    data, indices = inputs
    axis = normalize_axis("gather_elements", attrs["axis"], data.ndim)
    return [te.compute(indices.shape, lambda *i: data[_along(i, axis, _wrap(indices[i], data.shape[axis]))],
                       name="gather_elements")]


register(OpDef(
    name="gather_elements",
    infer=_infer_gather_elements,
    reference=_reference_gather_elements,
    compute=_compute_gather_elements,
    pattern="injective",
    attrs={"axis": 0},
    num_inputs=(2, 2),
    doc="torch.gather / numpy.take_along_axis: out[i] = data[i with axis index indices[i]].",
))


# -- gather_nd ---------------------------------------------------------------------------------


def _infer_gather_nd(types, attrs):
    data, indices = types
    _check_indices("gather_nd", indices)
    b = attrs["batch_dims"]
    k = indices.shape[-1] if indices.rank else None
    if not isinstance(k, int) or indices.rank < b + 1 or not 1 <= k <= data.rank - b or \
            data.shape[:b] != indices.shape[:b]:
        raise OpTypeError(f"gather_nd: indices {indices.shape} must share the first {b} dims of data {data.shape} "
                          f"and end in a static size from 1 to {data.rank - b}")
    return [TensorType(indices.shape[:-1] + data.shape[b + k:], data.dtype)]


def _reference_gather_nd(inputs, attrs):
    data, indices = inputs
    b, k = attrs["batch_dims"], indices.shape[-1]
    out = np.empty(indices.shape[:-1] + data.shape[b + k:], data.dtype)
    indices = checked_indices("gather_nd", indices, data.shape[b:b + k])
    for i in np.ndindex(*indices.shape[:-1]):
        out[i] = data[i[:b] + tuple(int(v) for v in indices[i])]
    return [out]


def _compute_gather_nd(inputs, attrs, out_types):
    data, indices = inputs
    b, k = attrs["batch_dims"], as_int(indices.shape[-1])
    lead = indices.ndim - 1

    def element(*o):
        picked = tuple(_wrap(indices[(*o[:lead], t)], data.shape[b + t]) for t in range(k))
        return data[o[:b] + picked + o[lead:]]

    return [te.compute(te_shape(out_types[0], inputs), element, name="gather_nd")]


register(OpDef(
    name="gather_nd",
    infer=_infer_gather_nd,
    reference=_reference_gather_nd,
    compute=_compute_gather_nd,
    pattern="injective",
    attrs={"batch_dims": 0},
    num_inputs=(2, 2),
    doc="ONNX GatherND: the slices of data that the index vectors (indices' last axis) pick.",
))


# -- scatter_elements --------------------------------------------------------------------------


def _check_reduction(op: str, attrs, dtype: str) -> None:
    if attrs["reduction"] not in REDUCTIONS:
        raise OpTypeError(f"{op}: reduction must be one of {REDUCTIONS}, got {attrs['reduction']!r}")
    if attrs["reduction"] != "none" and dt.is_bool(dtype):
        raise OpTypeError(f"{op}: reduction {attrs['reduction']!r} needs numbers, got bool")


def _infer_scatter_elements(types, attrs):
    data, indices, updates = types
    _check_indices("scatter_elements", indices)
    result_dtype("scatter_elements", data, updates)
    _check_reduction("scatter_elements", attrs, data.dtype)
    if indices.shape != updates.shape or indices.rank != data.rank or data.rank == 0:
        raise OpTypeError(f"scatter_elements: indices and updates must have one shape, of data's rank; got data "
                          f"{data.shape}, indices {indices.shape}, updates {updates.shape}")
    normalize_axis("scatter_elements", attrs["axis"], data.rank)
    return [data]


_NP_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reference_scatter_elements(inputs, attrs):
    data, indices, updates = inputs
    axis = normalize_axis("scatter_elements", attrs["axis"], data.ndim)
    out = data.copy()
    indices = checked_indices("scatter_elements", indices, data.shape[axis])
    for i in np.ndindex(*indices.shape):  # in order: the last update of an element wins
        target = _along(i, axis, int(indices[i]))
        reduce = _NP_REDUCE.get(attrs["reduction"])
        out[target] = updates[i] if reduce is None else reduce(out[target], updates[i])
    return [out]


def _combine(reduction: str, old, contribution):
    """An element combined with the reduction of the updates aimed at it (the reducer's identity
    when none is)."""
    match reduction:
        case "add":
            return (acc(old) + contribution).astype(old.dtype)
        case "mul":
            return (acc(old) * contribution).astype(old.dtype)
        case "max":
            return te.max(old, contribution)
    return te.min(old, contribution)


_REDUCER = {"add": te.sum, "mul": te.prod, "max": te.max, "min": te.min}


def _reduce_updates(reduction: str, value, axis, where, name: str, shape):
    """The reduction of the updates `value` over `axis` where `where` holds."""
    reducer = _REDUCER[reduction]
    widen = acc if reduction in ("add", "mul") else (lambda e: e)
    return te.compute(shape, lambda *i: reducer(widen(value(i)), axis=axis, where=where(i)), name=name)


def _compute_scatter_elements(inputs, attrs, out_types):
    data, indices, updates = inputs
    axis = normalize_axis("scatter_elements", attrs["axis"], data.ndim)
    reduction = attrs["reduction"]
    n = data.shape[axis]
    j = te.reduce_axis((0, indices.shape[axis]), name="j")

    def source(i):
        """The position in indices/updates of the j-th update of i's row (clamped inside them)."""
        return tuple(j if d == axis else te.min(i[d], indices.shape[d] - 1) for d in range(data.ndim))

    def aimed(i):
        inside = [i[d] < indices.shape[d] for d in range(data.ndim) if d != axis]
        return te.all(*inside, _wrap(indices[source(i)], n) == i[axis])

    if reduction == "none":
        last = te.compute(data.shape, lambda *i: te.max(cast("int64", j), axis=j, where=aimed(i)), name="last")
        return [te.compute(data.shape, lambda *i: te.if_then_else(
            last[i] >= 0, updates[_along(source(i), axis, te.max(last[i], 0))], data[i]), name="scatter")]
    part = _reduce_updates(reduction, lambda i: updates[source(i)], j, aimed, "part", data.shape)
    return [te.compute(data.shape, lambda *i: _combine(reduction, data[i], part[i]), name="scatter")]


register(OpDef(
    name="scatter_elements",
    infer=_infer_scatter_elements,
    reference=_reference_scatter_elements,
    compute=_compute_scatter_elements,
    pattern="opaque",
    attrs={"axis": 0, "reduction": "none"},
    num_inputs=(3, 3),
    doc="data with updates[i] written (or combined by reduction) at i with axis index indices[i].",
))


# -- scatter_nd --------------------------------------------------------------------------------


def _infer_scatter_nd(types, attrs):
    data, indices, updates = types
    _check_indices("scatter_nd", indices)
    result_dtype("scatter_nd", data, updates)
    _check_reduction("scatter_nd", attrs, data.dtype)
    k = indices.shape[-1] if indices.rank else None
    if not isinstance(k, int) or not 1 <= k <= data.rank:
        raise OpTypeError(f"scatter_nd: the last dimension of indices {indices.shape} must be a static size from "
                          f"1 to data's rank {data.rank}")
    want = indices.shape[:-1] + data.shape[k:]
    if updates.shape != want:
        raise OpTypeError(f"scatter_nd: updates must have shape {want} (indices' batch, then data's dims after the "
                          f"{k} indexed), got {updates.shape}")
    return [data]


def _reference_scatter_nd(inputs, attrs):
    data, indices, updates = inputs
    k = indices.shape[-1]
    out = data.copy()
    reduce = _NP_REDUCE.get(attrs["reduction"])
    indices = checked_indices("scatter_nd", indices, data.shape[:k])
    for u in np.ndindex(*indices.shape[:-1]):
        target = tuple(int(v) for v in indices[u])
        out[target] = updates[u] if reduce is None else reduce(out[target], updates[u])
    return [out]


def _compute_scatter_nd(inputs, attrs, out_types):
    data, indices, updates = inputs
    reduction = attrs["reduction"]
    k = as_int(indices.shape[-1])
    batch = tuple(indices.shape[:-1]) or (1,)
    us = [te.reduce_axis((0, b), name=f"u{d}") for d, b in enumerate(batch)]
    u = tuple(v.var for v in us)[:indices.ndim - 1]  # none when indices is one index (batch ())

    def aimed(slot):
        return te.all(*[_wrap(indices[(*u, t)], data.shape[t]) == slot[t] for t in range(k)])

    if reduction == "none":
        flat = 0
        for v, b in zip(us, batch):
            flat = flat * b + v.var
        last = te.compute(data.shape[:k], lambda *s: te.max(cast("int64", flat), axis=us, where=aimed(s)),
                          name="last")

        def unflatten(p):
            p = te.max(p, 0)
            out = []
            for b in reversed(batch[:indices.ndim - 1]):
                out.append(te.floormod(p, b))
                p = te.floordiv(p, b)
            return tuple(reversed(out))

        return [te.compute(data.shape, lambda *i: te.if_then_else(
            last[i[:k]] >= 0, updates[unflatten(last[i[:k]]) + i[k:]], data[i]), name="scatter")]
    part = _reduce_updates(reduction, lambda i: updates[u + i[k:]], us, lambda i: aimed(i[:k]), "part", data.shape)
    return [te.compute(data.shape, lambda *i: _combine(reduction, data[i], part[i]), name="scatter")]


register(OpDef(
    name="scatter_nd",
    infer=_infer_scatter_nd,
    reference=_reference_scatter_nd,
    compute=_compute_scatter_nd,
    pattern="opaque",
    attrs={"reduction": "none"},
    num_inputs=(3, 3),
    doc="data with each slice updates[u] written (or combined) at data[indices[u]] (ONNX ScatterND).",
))

"""Operators whose output shape depends on their input's data: nonzero, unique and bincount.

The number of their output elements is known only once the data is, so no kernel of a memory
plan laid out in advance can produce them. Their type has a dimension named by the `dim`
attribute (a symbol the frontend makes fresh for the node): the compiler computes them on the
host, with the NumPy reference, between compiled segments of the model, and the segments after
them take that symbol as a dimension of their inputs, bound at each call (ember.compiler,
ember.runtime.segmented; docs/design.md says why). HOST_OPS names them.

- nonzero(x; dim): the indices of the non-zero elements, int64[rank, dim], in row-major order
  (numpy.nonzero stacked; ONNX NonZero);
- unique(x; dim, axis=None, sorted=True): ONNX Unique's four outputs: the distinct values
  (flattened, or the distinct slices along `axis`), the index of each one's first occurrence,
  the index of each element's (or slice's) value among them, and each one's count; sorted
  ascending, or in order of first occurrence;
- bincount(x, weights?; dim, minlength=0): torch.bincount: the count of each value 0..max(x) of
  the non-negative integers x (at least minlength of them), int64, or the sum of the weights
  of each, in the weights' dtype; a negative value raises IndexOutOfRangeError.
"""

from __future__ import annotations

import numpy as np

from ..errors import IndexOutOfRangeError, LowerError
from ..graph.core import TensorType
from ..tir import dtype as dt
from .common import normalize_axis
from .registry import REQUIRED, OpDef, OpTypeError, register

HOST_OPS = frozenset({"nonzero", "unique", "bincount", "non_max_suppression"})  # (the last: ember.ops.nms)


def _dim(op: str, attrs) -> str:
    if not isinstance(attrs["dim"], str) or not attrs["dim"]:
        raise OpTypeError(f"{op}: dim must be the name of a symbol, got {attrs['dim']!r}")
    return attrs["dim"]


def _host_only(op: str):
    def compute(inputs, attrs, out_types):
        raise LowerError(f"{op} has no kernel: its output size depends on the data, so the compiler computes it on "
                         "the host between compiled segments (ember.ops.dynamic)")

    return compute


def _nonzero_type(types: list[TensorType], attrs) -> list[TensorType]:
    (x,) = types
    if x.rank == 0:
        raise OpTypeError("nonzero needs an input of rank 1 or more, got a scalar")
    return [TensorType((x.rank, _dim("nonzero", attrs)), "int64")]


register(OpDef(
    name="nonzero",
    infer=_nonzero_type,
    reference=lambda inputs, attrs: [np.array(np.nonzero(inputs[0]), dtype=np.int64).reshape(inputs[0].ndim, -1)],
    compute=_host_only("nonzero"),
    pattern="opaque",
    attrs={"dim": REQUIRED},
    doc="The indices of the non-zero elements, int64[rank, dim]; dim depends on the data.",
))


def _unique_types(types: list[TensorType], attrs) -> list[TensorType]:
    (x,) = types
    n = _dim("unique", attrs)
    if attrs["axis"] is None:
        numel = x.shape[0] if x.rank == 1 else x.numel if x.is_static else None
        if numel is None:
            raise OpTypeError(f"unique over all elements needs a static shape or rank 1, got {x}")
        values, length = TensorType((n,), x.dtype), numel
    else:
        axis = normalize_axis("unique", attrs["axis"], x.rank)
        values = TensorType(x.shape[:axis] + (n,) + x.shape[axis + 1:], x.dtype)
        length = x.shape[axis]
    return [values, TensorType((n,), "int64"), TensorType((length,), "int64"), TensorType((n,), "int64")]


def _unique(inputs, attrs):
    (x,) = inputs
    axis = None if attrs["axis"] is None else normalize_axis("unique", attrs["axis"], x.ndim)
    values, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                               axis=axis)
    inverse = inverse.reshape(-1)
    if not attrs["sorted"]:  # in order of first occurrence
        order = np.argsort(first, kind="stable")
        values = values[order] if axis is None else np.take(values, order, axis=axis)
        first, counts = first[order], counts[order]
        inverse = np.argsort(order)[inverse]
    return [values, *(a.astype(np.int64) for a in (first, inverse, counts))]


register(OpDef(
    name="unique",
    infer=_unique_types,
    reference=_unique,
    compute=_host_only("unique"),
    pattern="opaque",
    attrs={"dim": REQUIRED, "axis": None, "sorted": True},
    doc="ONNX Unique: distinct values (or slices along axis), first indices, inverse indices, counts.",
))


def _bincount_type(types: list[TensorType], attrs) -> list[TensorType]:
    x = types[0]
    if x.rank != 1 or not dt.is_int(x.dtype):
        raise OpTypeError(f"bincount counts a 1-d tensor of integers, got {x}")
    if len(types) == 2 and (types[1].shape != x.shape or not dt.is_float(types[1].dtype)):
        raise OpTypeError(f"bincount: the weights must be floats of the input's shape {x.shape}, got {types[1]}")
    return [TensorType((_dim("bincount", attrs),), types[1].dtype if len(types) == 2 else "int64")]


def _bincount(inputs, attrs):
    x = inputs[0]
    if x.size and x.min() < 0:
        raise IndexOutOfRangeError(f"bincount of a negative value {x.min()}: it counts non-negative integers")
    weights = inputs[1] if len(inputs) == 2 else None
    out = np.bincount(x.astype(np.int64), weights, minlength=attrs["minlength"])
    return [out.astype(np.int64 if weights is None else weights.dtype)]


register(OpDef(
    name="bincount",
    infer=_bincount_type,
    reference=_bincount,
    compute=_host_only("bincount"),
    pattern="opaque",
    attrs={"dim": REQUIRED, "minlength": 0},
    num_inputs=(1, 2),
    doc="torch.bincount: counts (or summed weights) of each value 0..max(x), at least minlength; dim from the data.",
))

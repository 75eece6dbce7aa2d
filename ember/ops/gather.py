"""Indexing: gather (numpy.take along an axis; negative indices wrap) and embedding (a gather of
rows of a weight table). An index out of range raises IndexOutOfRangeError at run time (the
loop IR's INDEX intrinsic), as numpy, torch and ONNX Runtime do.

out[pre..., j..., post...] = data[pre..., indices[j...], post...]; pattern `injective`.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import checked_index
from .common import checked_indices, normalize_axis
from .registry import OpDef, OpTypeError, register


def _check_indices(op: str, t: TensorType) -> None:
    if not dt.is_int(t.dtype):
        raise OpTypeError(f"{op}: indices must be integers, got {t.dtype}")


def _gather_type(op: str, data: TensorType, indices: TensorType, axis: int) -> TensorType:
    _check_indices(op, indices)
    if data.rank == 0:
        raise OpTypeError(f"{op}: data must have at least one dimension")
    axis = normalize_axis(op, axis, data.rank)
    return TensorType(data.shape[:axis] + indices.shape + data.shape[axis + 1:], data.dtype)


def _reference(op: str, data, indices, axis: int):
    return np.take(data, checked_indices(op, indices, data.shape[axis]), axis=axis)


def gather_compute(data, indices, axis: int, name: str):
    """The te gather: indices read once per output element, negative ones wrapped, every one
    checked against the axis (an index out of range raises at run time)."""
    axis = normalize_axis(name, axis, data.ndim)
    r = indices.ndim
    shape = list(data.shape[:axis]) + list(indices.shape) + list(data.shape[axis + 1:])

    def element(*i):
        idx = checked_index(indices[i[axis:axis + r]], data.shape[axis])
        return data[i[:axis] + (idx,) + i[axis + r:]]

    return te.compute(shape, element, name=name)


register(OpDef(
    name="gather",
    infer=lambda types, attrs: [_gather_type("gather", types[0], types[1], attrs["axis"])],
    reference=lambda inputs, attrs: [_reference("gather", inputs[0], inputs[1], attrs["axis"])],
    compute=lambda inputs, attrs, out_types: [gather_compute(inputs[0], inputs[1], attrs["axis"], "gather")],
    pattern="injective",
    attrs={"axis": 0},
    num_inputs=(2, 2),
    doc="numpy.take(data, indices, axis): negative indices count from the end.",
))

register(OpDef(
    name="embedding",
    infer=lambda types, attrs: [_gather_type("embedding", types[0], types[1], 0)],
    reference=lambda inputs, attrs: [_reference("embedding", inputs[0], inputs[1], 0)],
    compute=lambda inputs, attrs, out_types: [gather_compute(inputs[0], inputs[1], 0, "embedding")],
    pattern="injective",
    num_inputs=(2, 2),
    doc="Rows of weight picked by indices: gather on axis 0.",
))

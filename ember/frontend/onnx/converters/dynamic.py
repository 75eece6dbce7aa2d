"""ONNX operators whose output shape depends on the data: NonZero, Unique, NonMaxSuppression,
Compress.

NonZero, Unique and NonMaxSuppression become an ember operator (ember.ops.dynamic, ops.nms) with a fresh
symbol for the size its data decides; the compiler computes them on the host between compiled
segments. On a constant input they fold like any other operator, to an array of the size the
data gives. Compress is the gather of the condition's nonzero indices: only the indices are
computed on the host, the gather is a kernel of the segment after it (and a constant condition
folds to a gather of constant indices, no host step at all).
"""

from __future__ import annotations

import numpy as np

from ....ops import get
from ..node import NodeContext
from ..registry import converts


def _apply(cx: NodeContext, op: str, attrs: dict, inputs: list | None = None) -> list:
    attrs = {**attrs, "dim": cx.importer.graph.fresh_name(f"{cx.out_names[0]}_n")}
    inputs = [cx.input(0)] if inputs is None else inputs
    if all(isinstance(x, np.ndarray) for x in inputs):  # (folding proper stops at a size a symbol gives)
        return get(op).reference(inputs, get(op).bind_attrs(attrs))
    return cx.ops(op, inputs, attrs)


@converts("NonZero")
def _nonzero(cx: NodeContext):
    return _apply(cx, "nonzero", {})


@converts("Unique")
def _unique(cx: NodeContext):
    return _apply(cx, "unique", {"axis": cx.attr("axis"), "sorted": bool(cx.attr("sorted", 1))})


@converts("Compress")
def _compress(cx: NodeContext):
    x, condition = cx.input(0), cx.input(1)
    axis = cx.attr("axis")
    if axis is None:
        x = cx.op("flatten", [x], {"start_dim": 0})
        axis = 0
    axis %= cx.type(x).rank
    length, size = cx.type(condition).shape[0], cx.type(x).shape[axis]
    if isinstance(length, int) and isinstance(size, int) and length > size:
        raise cx.error(f"the condition has {length} elements, more than the {size} along axis {axis} it selects from")
    if cx.type(condition).dtype != "bool":
        condition = cx.op("cast", [condition], {"dtype": "bool"})
    (indices,) = _apply(cx, "nonzero", {}, [condition])  # int64[1, n]
    return [cx.op("gather", [x, cx.op("squeeze", [indices], {"axes": (0,)})], {"axis": axis})]


@converts("NonMaxSuppression")
def _non_max_suppression(cx: NodeContext):
    """A limit left out is 0 (nothing kept), an IoU threshold left out 0 (any overlap suppresses);
    a score threshold left out keeps every box: the operator reads that from its absence."""
    limit, iou = cx.optional(2), cx.optional(3)
    inputs = [cx.input(0), cx.input(1), np.array([0], "int64") if limit is None else limit,
              np.array([0], cx.type(cx.input(0)).dtype) if iou is None else iou]
    if cx.optional(4) is not None:
        inputs.append(cx.input(4))
    return _apply(cx, "non_max_suppression", {"center_point_box": bool(cx.attr("center_point_box", 0))}, inputs)

"""ONNX element-wise indexing, scatters and selection as ember operators: GatherElements, GatherND,
ScatterElements (and its old name Scatter), ScatterND, TensorScatter (a cache update), TopK (k a
constant), and Hardmax (an argmax compared with the positions along the axis)."""

from __future__ import annotations

import numpy as np

from ....checks import check_fits
from ....graph.core import TensorType
from ..node import NodeContext
from ..registry import converts


@converts("GatherElements")
def _gather_elements(cx: NodeContext):
    return [cx.op("gather_elements", [cx.input(0), cx.input(1)], {"axis": cx.attr("axis", 0)})]


@converts("TensorScatter")
def _tensor_scatter(cx: NodeContext):
    inputs = [cx.input(0), cx.input(1)] + ([cx.input(2)] if cx.optional(2) is not None else [])
    return [cx.op("tensor_scatter", inputs, {"axis": cx.attr("axis", -2), "mode": cx.attr("mode", "linear")})]


@converts("GatherND")
def _gather_nd(cx: NodeContext):
    return [cx.op("gather_nd", [cx.input(0), cx.input(1)], {"batch_dims": cx.attr("batch_dims", 0)})]


@converts("ScatterElements", "Scatter")
def _scatter_elements(cx: NodeContext):
    attrs = {"axis": cx.attr("axis", 0), "reduction": cx.attr("reduction", "none")}
    return [cx.op("scatter_elements", [cx.input(0), cx.input(1), cx.input(2)], attrs)]


@converts("ScatterND")
def _scatter_nd(cx: NodeContext):
    attrs = {"reduction": cx.attr("reduction", "none")}
    return [cx.op("scatter_nd", [cx.input(0), cx.input(1), cx.input(2)], attrs)]


@converts("TopK")
def _topk(cx: NodeContext):
    """k from the input (the attribute before opset 10); `sorted=0` leaves the order to ember,
    which sorts anyway."""
    k = cx.const_ints(1, "k") if len(cx.inputs) > 1 else [cx.attr("k")]
    if len(k) != 1:
        raise cx.error(f"k must hold one value, got {k}")
    attrs = {"k": k[0], "axis": cx.attr("axis", -1), "largest": bool(cx.attr("largest", 1))}
    return cx.ops("topk", [cx.input(0)], attrs)


@converts("Hardmax")
def _hardmax(cx: NodeContext):
    """1 at the first maximum along the axis, 0 elsewhere."""
    x = cx.input(0)
    shape = cx.type(x).shape
    axis = cx.attr("axis", -1) % len(shape)
    if not isinstance(shape[axis], int):
        raise cx.error(f"Hardmax needs a static size of axis {axis}, got {shape}")
    best = cx.op("argmax", [x], {"axis": axis, "keepdims": True})
    positions = np.arange(shape[axis], dtype="int64").reshape((-1,) + (1,) * (len(shape) - axis - 1))
    return [cx.op("cast", [cx.op("equal", [best, positions])], {"dtype": cx.type(x).dtype})]


@converts("OneHot")
def _one_hot(cx: NodeContext):
    """on_value where the position along the new axis equals the index (negative ones counted
    from the end, others out of range match nothing), off_value elsewhere."""
    indices = cx.input(0)
    (depth,) = cx.const(1, "depth").reshape(-1)
    if not np.isfinite(depth) or depth < 1:
        raise cx.error(f"the depth is {depth}: it must be a positive number")
    depth = int(depth)
    values = cx.input(2)
    rank = len(cx.type(indices).shape)
    check_fits(TensorType((depth,), "int64"), f"{cx.where}: the positions of depth {depth}")
    axis = cx.attr("axis", -1) % (rank + 1)
    indices = cx.op("cast", [indices], {"dtype": "int64"}) if cx.type(indices).dtype != "int64" else indices
    indices = cx.op("where", [cx.op("less", [indices, np.asarray(0, "int64")]),
                              cx.op("add", [indices, np.asarray(depth, "int64")]), indices])
    positions = np.arange(depth, dtype="int64").reshape((depth,) + (1,) * (rank - axis))
    hit = cx.op("equal", [cx.op("unsqueeze", [indices], {"axes": (axis,)}), positions])
    off, on = (cx.op("slice", [values], {"starts": (k,), "ends": (k + 1,)}) for k in (0, 1))
    off, on = (cx.op("reshape", [v], {"shape": ()}) for v in (off, on))
    return [cx.op("where", [hit, on, off])]

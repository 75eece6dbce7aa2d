"""ONNX operators whose output shape depends on the data: NonZero, Unique.

Each becomes the ember operator of the same name (ember.ops.dynamic) with a fresh symbol for the
size its data decides; the compiler computes them on the host between compiled segments. On a
constant input they fold like any other operator, to an array of the size the data gives.
"""

from __future__ import annotations

import numpy as np

from ....ops import get
from ..node import NodeContext
from ..registry import converts


def _apply(cx: NodeContext, op: str, attrs: dict) -> list:
    attrs = {**attrs, "dim": cx.importer.graph.fresh_name(f"{cx.out_names[0]}_n")}
    x = cx.input(0)
    if isinstance(x, np.ndarray):  # (folding proper stops at a size a symbol gives)
        return get(op).reference([x], get(op).bind_attrs(attrs))
    return cx.ops(op, [x], attrs)


@converts("NonZero")
def _nonzero(cx: NodeContext):
    return _apply(cx, "nonzero", {})


@converts("Unique")
def _unique(cx: NodeContext):
    return _apply(cx, "unique", {"axis": cx.attr("axis"), "sorted": bool(cx.attr("sorted", 1))})

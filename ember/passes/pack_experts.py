"""Constant expert weights of a mixture-of-experts layer packed once, at compile time, into the
panels matmul's packed weights have (ember.passes.pack_weights runs this rule on its graph):

    grouped_matmul(x, W, offsets) -> grouped_matmul(x, panels(W), offsets; w_panels=P)

panels(W) = each expert's (K, N) weights as (N / P, K, P) (ember.ops.moe.expert_panels). The
register tile, one panel wide, then reads its expert's P weights of row k right after those of row
k - 1, instead of K rows N floats apart (Mixtral's 768 x 2048 up-projection: a new page every few
k). Packed where pack_weights packs a matmul's weights (its width_of): an expert of at least
MIN_WEIGHTS elements, N a multiple of the panel width, at least 2 routed rows or a symbolic number.
"""

from __future__ import annotations

from collections.abc import Callable

from ..graph.core import Node, Value
from ..ops.moe import expert_panels
from ..target import aligned_copy
from ..tir import dtype as dt
from .rewrite import Rewriter


def pack_experts(rw: Rewriter, node: Node, inputs: list[Value], width_of: Callable[[int | str, int, int], int | None],
                 align: int) -> list[Value] | None:
    """The grouped_matmul `node` reading its constant weights in panels, or None to keep it;
    width_of(rows, k, n): pack_weights' panel width for (k, n) weights read by that many rows."""
    x, w = inputs[:2]
    weights = rw.constant_data(w)
    if node.attrs["w_panels"] or weights is None or not dt.is_float(w.type.dtype):
        return None
    _, k, n = weights.shape
    width = width_of(x.type.shape[0], k, n)
    if width is None:
        return None
    panels = rw.derived(("expert_panels", w, width), lambda: aligned_copy(expert_panels(weights, width), align),
                        f"{w.name}.panels")
    return rw.emit("grouped_matmul", [x, panels, inputs[2]], {"w_panels": width}, hint=node.name,
                   out_names=[node.outputs[0].name])

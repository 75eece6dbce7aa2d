"""Kernel taps that read only padding are dropped: a convolution (conv1d/2d/3d of constant
weights, static spatial sizes) whose first or last taps along a spatial axis fall in the padding
for every output position computes them against zeros; its kernel is sliced to the taps that
reach the input, and the padding shrinks by what they spanned, so that the output keeps its size
and every value (the sums lose only products with zero).

A dilated convolution over a map smaller than its dilation is the case (DeepLabV3's atrous
pyramid at rate 36 over 28 x 28: its 3 x 3 kernel is its centre tap, a 1 x 1 convolution, and
reads the input as it is where it padded 28 x 28 to 100 x 100 and summed nine taps).

Along an axis of size H, kernel K, stride s, dilation d, padding (pb, pe) and O outputs, tap t
reads input rows o*s - pb + t*d; it reaches the input iff (O - 1)*s - pb + t*d >= 0 and
t*d - pb < H. The taps that do are a range [t0, t1]; the kernel keeps [t0', t1'] where t0' =
min(t0, pb // d) and t1' = max(t1, K - 1 - pe // d), so that the padding left, pb - t0'*d and
pe - (K - 1 - t1')*d, is never negative.
"""

from __future__ import annotations

from ..graph.core import Graph, Node
from ..ops.conv import window_attrs
from .rewrite import Rewriter

CONVS = ("conv1d", "conv2d", "conv3d")


def trim_taps(graph: Graph) -> Graph:
    cuts = {node: cut for node in graph.nodes if node.op in CONVS and (cut := _live_taps(graph, node)) is not None}
    if not cuts:
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node not in cuts:
            rw.copy(node, rw.inputs(node))
            continue
        keep, pads = cuts[node]
        w = graph.constants[node.inputs[1].name]
        trimmed = rw.constant(w[(slice(None), slice(None), *(slice(a, b + 1) for a, b in keep))].copy(),
                              f"{node.inputs[1].name}_trimmed")
        rw.copy(node, [rw.value(node.inputs[0]), trimmed, *(rw.value(v) for v in node.inputs[2:])],
                {**node.attrs, "padding": pads})
    return rw.finish()


def _live_taps(graph: Graph, node: Node) -> tuple[list[tuple[int, int]], tuple[int, ...]] | None:
    """Per spatial axis the taps kept (first, last) and the new padding, or None when every tap
    reaches the input (or the sizes are not known)."""
    x, w = node.inputs[0], node.inputs[1]
    n = x.type.rank - 2
    spatial, outs = x.type.shape[2:], node.outputs[0].type.shape[2:]
    if not graph.is_constant(w) or not all(isinstance(v, int) for v in (*spatial, *outs)) \
            or node.attrs.get("w_block"):  # (weights packed, not OIHW: ember.passes.pack_weights)
        return None
    strides, pads_b, pads_e, dilations = window_attrs(node.op, node.attrs, n)
    kernel = graph.constants[w.name].shape[2:]
    keep, new_b, new_e = [], [], []
    for size, k, s, pb, pe, d, o in zip(spatial, kernel, strides, pads_b, pads_e, dilations, outs):
        live = [t for t in range(k) if (o - 1) * s - pb + t * d >= 0 and t * d - pb < size]
        if not live:
            return None  # an output of padding alone: left as it is
        first, last = min(live[0], max(pb, 0) // d), max(live[-1], k - 1 - max(pe, 0) // d)
        keep.append((first, last))
        new_b.append(pb - first * d)
        new_e.append(pe - (k - 1 - last) * d)
    if all((a, b) == (0, k - 1) for (a, b), k in zip(keep, kernel)):
        return None
    return keep, (*new_b, *new_e)

"""A 2-d convolution whose taps read padding for a large part of its map is split into regions,
each computing only the taps that read the input there: DeepLabV3's atrous pyramid at rates 12
and 24 over a 28 x 28 map (padding 12 and 24) summed nine taps everywhere, though at rate 24 a
corner tap reaches the input for 4 of its 28 rows, and the map's centre, 20 x 20, needs its
centre tap alone.

Along an axis (outputs O, kernel K, stride s, dilation d, padding pb) output o's tap t reads
input row o*s - pb + t*d, real for the taps of an interval [t0(o), t1(o)]; consecutive outputs
with the same interval make a band. A region is a band of rows by a band of columns: a
convolution of the input's rows and columns that region reads (a slice; none where that is all
of it), the kernel's taps [t0, t1] on each axis (a slice of the constant weights), without
padding (every tap left reads the input); the regions are concatenated along W within a band of
rows, the bands along H. The sums lose only products with zero. ember.passes.layout carries the
slices and concats along H and W in the blocked layout.

A dilated convolution is split where the regions' taps times outputs are at most SPLIT_WORK of
the whole's (rate 12 over 28 x 28: 0.51, rate 24: 0.18; DeepLabV3's backbone at dilation 4 over
28 x 28, 0.82, stays whole), of constant weights and static sizes, and where no region reads
padding alone (ember.passes.trim_taps cuts those taps first). An undilated axis stays whole, its
padding kept (and an undilated convolution with it): a padding of 1 wastes much only on maps of
a few pixels (3 x 3: 0.6), whose regions would cost more in kernels than the taps they save.
"""

from __future__ import annotations

from ..graph.core import Graph, Node, Value
from ..ops.conv import window_attrs
from .rewrite import Rewriter

SPLIT_WORK = 2 / 3


def split_taps(graph: Graph) -> Graph:
    splits = {node: bands for node in graph.nodes if node.op == "conv2d" and (bands := _bands(graph, node))}
    if not splits:
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node in splits:
            rw.replace(node, [_regions(rw, graph, node, splits[node])]) or rw.copy(node, rw.inputs(node))
        else:
            rw.copy(node, rw.inputs(node))
    return rw.finish()


def _bands(graph: Graph, node: Node) -> list[list[tuple[int, int, int, int]]] | None:
    """Per spatial axis its bands (first output, end output, first tap, last tap), or None when
    the convolution stays whole."""
    x, w = node.inputs[0], node.inputs[1]
    spatial, outs = x.type.shape[2:], node.outputs[0].type.shape[2:]
    if not graph.is_constant(w) or not all(isinstance(v, int) for v in (*x.type.shape, *outs)):
        return None
    strides, pads_b, _, dilations = window_attrs(node.op, node.attrs, 2)
    if max(dilations) == 1:
        return None
    kernel = graph.constants[w.name].shape[2:]
    axes = []
    for size, k, s, pb, d, o in zip(spatial, kernel, strides, pads_b, dilations, outs):
        if d == 1:  # an undilated axis stays whole, with its padding
            axes.append([(0, o, 0, k - 1)])
            continue
        bands: list[tuple[int, int, int, int]] = []
        for i in range(o):
            live = [t for t in range(k) if 0 <= i * s - pb + t * d < size]
            if not live:
                return None  # an output of padding alone (trim_taps leaves such a map as it is)
            if bands and bands[-1][2:] == (live[0], live[-1]):
                bands[-1] = (bands[-1][0], i + 1, live[0], live[-1])
            else:
                bands.append((i, i + 1, live[0], live[-1]))
        axes.append(bands)
    work = [sum((b - a) * (t1 - t0 + 1) for a, b, t0, t1 in bands) for bands in axes]
    if work[0] * work[1] > SPLIT_WORK * outs[0] * outs[1] * kernel[0] * kernel[1]:
        return None
    return axes


def _regions(rw: Rewriter, graph: Graph, node: Node, axes) -> Value:
    """The convolution computed region by region and concatenated back."""
    x, w = rw.value(node.inputs[0]), graph.constants[node.inputs[1].name]
    bias = [rw.value(v) for v in node.inputs[2:]]
    strides, pads_b, pads_e, dilations = window_attrs(node.op, node.attrs, 2)
    whole = [d == 1 for d in dilations]
    attrs = {**node.attrs, "padding": tuple(p if keep else 0 for p, keep in zip((*pads_b, *pads_e), whole * 2))}
    name, rows = node.outputs[0].name, []
    for i, row in enumerate(axes[0]):
        pieces = []
        for j, col in enumerate(axes[1]):
            reads = [(0, n) if keep else (a * s - pb + t0 * d, (b - 1) * s - pb + t1 * d + 1)
                     for (a, b, t0, t1), s, pb, d, n, keep in zip((row, col), strides, pads_b, dilations, x.shape[2:],
                                                                  whole)]
            sliced = [(axis, lo, hi) for axis, (lo, hi), n in zip((2, 3), reads, x.shape[2:]) if (lo, hi) != (0, n)]
            xr = x if not sliced else rw.emit("slice", [x], {
                "starts": [lo for _, lo, _ in sliced], "ends": [hi for *_, hi in sliced],
                "axes": [axis for axis, *_ in sliced]}, hint=f"{node.name}_reads")[0]
            wr = rw.constant(w[:, :, row[2]:row[3] + 1, col[2]:col[3] + 1].copy(), f"{node.inputs[1].name}_region")
            pieces.append(rw.emit("conv2d", [xr, wr, *bias], attrs, hint=node.name, out_names=[f"{name}_{i}_{j}"])[0])
        row_name = name if len(axes[0]) == 1 else f"{name}_{i}"
        rows.append(pieces[0] if len(pieces) == 1 else
                    rw.emit("concat", pieces, {"axis": 3}, hint="regions", out_names=[row_name])[0])
    return rw.emit("concat", rows, {"axis": 2}, hint="regions", out_names=[name])[0] if len(rows) > 1 else rows[0]


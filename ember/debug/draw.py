"""Drawing a graph with its kernels marked, as an SVG document or a self-contained HTML page.

    svg = draw_graph(graph)                      # opt_level 3: the graph after the passes, fused
    page = draw_graph(graph, opt_level=0, fmt="html")

The graph is drawn as the compiler cuts it: after the pass pipeline of `opt_level`, grouped into
kernels by ember.passes.fuse at opt_level >= FUSE_LEVEL (unless "fuse" is disabled through
EMBER_DISABLE_PASSES), else one kernel per node. Each kernel is a frame around its nodes,
labelled with its place in the run order and its name (its operators, as the compiler names it)
and colored by its pattern kind; each node shows its operator and output shape (its IR line on
hover); an edge goes from the node that writes a value to each node that reads it, solid when
the value goes through memory, dashed when it stays inside a kernel. Constants are not drawn.

The layout needs no graphviz: a layered layout (Sugiyama's, reduced to its simplest), applied
twice. The kernels, the graph inputs and the graph outputs are placed in rows, top to bottom, by
the longest path from the inputs; in a row, each goes under the mean center of its predecessors,
pushed right where it would overlap its neighbour, the row then shifted back so that it is on
average where it wants to be. An edge that skips rows runs down a lane, a thin dummy item in
each row between, which keeps it clear of the items there. A kernel's nodes are laid out the
same way inside its frame (with a lane from the frame's top to each node below the first row
that reads from outside), so frames never overlap. Edges are cubic curves between rows and
straight lines down their lanes.

SVG structure (what tools and tests read): `<g class="kernel" id="kernel-K" data-name=NAME
data-ops="OP OP ..." data-pattern=KIND>` per kernel (its frame); `<g class="node" data-node=NAME
data-op=OP data-kernel=K>` per node; `<g class="input" data-value=NAME>` and `<g class="output"
data-value=NAME>` per graph input and output; `<path class="edge" data-from=NAME data-to=NAME>`
per edge (a node's or a graph input's name; "output:NAME" for a graph output).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ArgumentTypeError, ConfigError
from ..graph.core import Graph, Node, Value
from ..lowering import kernel_name, partition
from ..passes.fuse import KIND, FusedGraph, Group, kind
from ..passes.pipeline import PIPELINES

FORMATS = ("svg", "html")
CHAR_W = 7.2  # px per character of the 12px monospace font
TITLE_CHAR_W = 8.4  # of the 14px title
NODE_H = 36
GAP_X, GAP_Y = 24, 36  # between items of a row, between rows
LANE_W = 8  # the width of an edge's lane through a row
INNER_GAP_Y = 22  # between rows of nodes in a kernel
PAD, LABEL_H, MARGIN, TITLE_H = 10, 18, 20, 30
# frame fill and stroke per pattern kind (the group's highest kind)
COLORS = {"elementwise": ("#e6f4ea", "#34a853"), "broadcast": ("#e6f4ea", "#34a853"),
          "injective": ("#f3e8fd", "#9334e6"), "reduction": ("#fef1e0", "#e37400"),
          "out_elementwise_fusable": ("#e8f0fe", "#1a73e8"), "opaque": ("#f1f3f4", "#5f6368")}
PATTERN = {k: name for name, k in KIND.items()}


def draw_graph(graph: Graph, opt_level: int = max(PIPELINES), fmt: str = "svg") -> str:
    """The graph's picture after the passes of `opt_level`, its kernels marked (see the module
    doc): an SVG document (fmt="svg") or an HTML page with the SVG and a table of the kernels."""
    if not isinstance(graph, Graph):
        raise ArgumentTypeError(f"draw_graph takes a Graph, got {type(graph).__name__}")
    if fmt not in FORMATS:
        raise ConfigError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    fused = partition(graph, opt_level)
    svg = _svg(fused, f"{graph.name}: opt_level {opt_level}, {len(fused.graph.nodes)} nodes in "
                      f"{len(fused.groups)} kernels")
    return svg if fmt == "svg" else _html(fused, svg, opt_level)


# -- layout -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Box:
    x: float
    y: float
    w: float
    h: float

    def moved(self, dx: float, dy: float) -> _Box:
        return _Box(self.x + dx, self.y + dy, self.w, self.h)


@dataclass(frozen=True)
class _Layout:
    """Boxes of the items, and for each edge (pred, item) that spans rows, the lane boxes it runs
    down through, one per row between; the leftmost box at x = 0, the first row at y = 0."""

    boxes: list[_Box]
    lanes: dict[tuple[int, int], list[_Box]]

    def moved(self, dx: float, dy: float) -> _Layout:
        return _Layout([b.moved(dx, dy) for b in self.boxes],
                       {e: [b.moved(dx, dy) for b in bs] for e, bs in self.lanes.items()})


def _layered(sizes: Sequence[tuple[float, float]], preds: Sequence[Sequence[int]], gap_y: float,
             entries: int = 0) -> _Layout:
    """Items of the given (width, height), in topological order with these predecessors, in rows
    by longest path (see the module doc). An edge that spans rows runs down a lane: a dummy item
    of width LANE_W in each row between, so that it goes around the items there, not through them.
    The first `entries` items are lanes too: where edges from outside come in."""
    n = len(sizes)
    layer: list[int] = []
    for ps in preds:
        layer.append(1 + max((layer[p] for p in ps), default=-1))
    sizes, layer = list(sizes), list(layer)
    preds = [list(ps) for ps in preds]
    lanes: dict[tuple[int, int], list[int]] = {}
    for i in range(n):
        for k, p in enumerate(preds[i]):
            if layer[i] - layer[p] > 1:
                lane: list[int] = []
                for r in range(layer[p] + 1, layer[i]):
                    preds.append([lane[-1] if lane else p])
                    lane.append(len(sizes))
                    sizes.append((LANE_W, 0.0))
                    layer.append(r)
                lanes[p, i] = lane
                preds[i][k] = lane[-1]
    is_lane = [i < entries or i >= n for i in range(len(sizes))]
    rows: dict[int, list[int]] = {}
    for i, r in enumerate(layer):
        rows.setdefault(r, []).append(i)
    x, y, h = [0.0] * len(sizes), [0.0] * len(sizes), [0.0] * len(sizes)
    top = 0.0
    for r in sorted(rows):
        want = {i: _mean([x[p] + sizes[p][0] / 2 for p in preds[i] if not is_lane[p]] or
                         [x[p] + sizes[p][0] / 2 for p in preds[i]]) for i in rows[r]}  # under items, not lanes
        order = sorted(rows[r], key=lambda i: (want[i], is_lane[i], i))  # lanes right of the items at their place
        right = -float("inf")
        for i in order:
            x[i] = max(want[i] - sizes[i][0] / 2, right + GAP_X)
            right = x[i] + sizes[i][0]
        # the items stay where they want to be, the lanes give way
        shift = _mean([x[i] + sizes[i][0] / 2 - want[i] for i in order if not is_lane[i]] or
                      [x[i] + sizes[i][0] / 2 - want[i] for i in order])
        height = max(sizes[i][1] for i in order)
        for i in order:
            x[i] -= shift
            y[i] = top
            h[i] = height if is_lane[i] else sizes[i][1]  # a lane runs down the whole row
        top += height + gap_y
    left = min(x, default=0.0)
    boxes = [_Box(x[i] - left, y[i], sizes[i][0], h[i]) for i in range(len(sizes))]
    return _Layout(boxes[:n], {e: [boxes[d] for d in lane] for e, lane in lanes.items()})


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _node_size(lines: Sequence[str]) -> tuple[float, float]:
    return max(70.0, CHAR_W * max(map(len, lines)) + 16), float(NODE_H)


def _shape(v: Value) -> str:
    dims = "×".join(map(str, v.shape)) or "scalar"
    return dims if v.dtype == "float32" else f"{v.dtype} {dims}"


def _node_lines(n: Node) -> tuple[str, str]:
    return n.op, ", ".join(_shape(v) for v in n.outputs)


@dataclass(frozen=True)
class _Picture:
    """Where everything goes: a box per kernel frame, per node (by id), per graph input and output;
    the lanes of the edges between items of the picture (inputs, kernels, outputs: indices in
    that order), between the nodes of a kernel (by the nodes' ids), and from a kernel's top to a
    node below its first row that reads from outside (by the node's id)."""

    frames: list[_Box]
    nodes: dict[int, _Box]
    inputs: list[_Box]
    outputs: list[_Box]
    item_lanes: dict[tuple[int, int], list[_Box]]
    node_lanes: dict[tuple[int, int], list[_Box]]
    entries: dict[int, list[_Box]]
    width: float
    height: float


def _layout(fused: FusedGraph) -> _Picture:
    graph, groups = fused.graph, fused.groups
    n_in, n_groups = len(graph.inputs), len(groups)
    # the kernels first, each on its own (relative to its frame): first its entries, then its nodes
    inner: list[tuple[Group, int, _Layout, list[int]]] = []
    frame_sizes = []
    for k, g in enumerate(groups):
        where = {id(n): j for j, n in enumerate(g.nodes)}
        preds = [sorted({where[id(v.node)] for v in n.inputs if v.node is not None and id(v.node) in where})
                 for n in g.nodes]
        entering = [j for j, n in enumerate(g.nodes) if preds[j] and any(
            not graph.is_constant(v) and (v.node is None or id(v.node) not in where) for v in n.inputs)]
        e = len(entering)
        preds = [[] for _ in entering] + [[p + e for p in ps] for ps in preds]
        for entry, j in enumerate(entering):
            preds[e + j].append(entry)
        sizes = [(LANE_W, 0.0)] * e + [_node_size(_node_lines(n)) for n in g.nodes]
        layout = _layered(sizes, preds, INNER_GAP_Y, entries=e)
        boxes = layout.boxes + [b for bs in layout.lanes.values() for b in bs]
        right = max(b.x + b.w for b in boxes)
        width = max(right, CHAR_W * len(_label(k, g))) + 2 * PAD
        inner.append((g, e, layout.moved((width - right) / 2, PAD + LABEL_H), entering))
        frame_sizes.append((width, max(b.y + b.h for b in boxes) + 2 * PAD + LABEL_H))
    # then the items of the picture: inputs, kernels (in run order), outputs
    item_of = {id(v): j for j, v in enumerate(graph.inputs)}
    for k, g in enumerate(groups):
        item_of.update((id(v), n_in + k) for n in g.nodes for v in n.outputs)
    sizes = [_node_size(("input", _io_text(v))) for v in graph.inputs] + frame_sizes
    preds = [[] for _ in graph.inputs] + [sorted({item_of[id(v)] for v in g.inputs if id(v) in item_of})
                                          for g in groups]
    for v in graph.outputs:
        sizes.append(_node_size(("output", _io_text(v))))
        preds.append([item_of[id(v)]] if id(v) in item_of else [])
    items = _layered(sizes, preds, GAP_Y).moved(MARGIN, MARGIN + TITLE_H)
    boxes = items.boxes
    frames = boxes[n_in:n_in + n_groups]
    nodes, node_lanes, entries = {}, {}, {}
    for f, (g, e, layout, entering) in zip(frames, inner):
        at = layout.moved(f.x, f.y)
        nodes.update((id(n), b) for n, b in zip(g.nodes, at.boxes[e:]))
        node_lanes.update(((id(g.nodes[p - e]), id(g.nodes[i - e])), bs) for (p, i), bs in at.lanes.items() if p >= e)
        entries.update((id(g.nodes[j]), [at.boxes[k], *at.lanes.get((k, e + j), [])]) for k, j in enumerate(entering))
    every = boxes + [b for bs in items.lanes.values() for b in bs]
    width = max((b.x + b.w for b in every), default=0.0) + MARGIN
    height = max((b.y + b.h for b in every), default=0.0) + MARGIN
    return _Picture(frames, nodes, boxes[:n_in], boxes[n_in + n_groups:], items.lanes, node_lanes, entries,
                    width, height)


def _label(k: int, g: Group) -> str:
    return f"#{k} {kernel_name(g.ops)}"


def _io_text(v: Value) -> str:
    return f"%{v.name}: {_shape(v)}"


def _pattern(g: Group) -> str:
    return PATTERN[max(kind(n) for n in g.nodes)]


# -- SVG ----------------------------------------------------------------------------------------
STYLE = """
text { font: 12px monospace; fill: #202124; }
text.label { font-size: 11px; font-weight: bold; paint-order: stroke; stroke-width: 4px; }
.node rect, .input rect, .output rect { fill: #fff; stroke: #5f6368; }
.input rect, .output rect { fill: #fafafa; stroke-dasharray: 3 2; }
text.op { font-weight: bold; }
.edge { fill: none; stroke: #3c4043; stroke-width: 1.2; marker-end: url(#arrow); }
.edge.inside { stroke: #80868b; stroke-dasharray: 4 3; }
.kernel:target rect { stroke: #d93025; stroke-width: 3; }
"""


def _a(s) -> str:
    return html.escape(str(s), quote=True)


def _svg(fused: FusedGraph, title: str) -> str:
    """Layers: the kernel frames, the edges over them, the nodes and frame labels over the edges."""
    pic = _layout(fused)
    graph = fused.graph
    width = max(pic.width, 2 * MARGIN + TITLE_CHAR_W * len(title))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{pic.height:.0f}" '
           f'viewBox="0 0 {width:.0f} {pic.height:.0f}">',
           f"<style>{STYLE}</style>",
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#3c4043"/></marker></defs>',
           f'<text x="{MARGIN}" y="{MARGIN + 12}" style="font-size:14px;font-weight:bold">{_a(title)}</text>']
    for k, (g, f) in enumerate(zip(fused.groups, pic.frames)):
        fill, stroke = COLORS[_pattern(g)]
        out.append(f'<g class="kernel" id="kernel-{k}" data-name="{_a(kernel_name(g.ops))}" '
                   f'data-ops="{_a(" ".join(g.ops))}" data-pattern="{_pattern(g)}">'
                   f'<rect x="{f.x:.1f}" y="{f.y:.1f}" width="{f.w:.1f}" height="{f.h:.1f}" rx="6" '
                   f'fill="{fill}" stroke="{stroke}"/></g>')
    out += _edges(fused, pic)
    for k, (g, f) in enumerate(zip(fused.groups, pic.frames)):
        fill, stroke = COLORS[_pattern(g)]
        out.append(f'<text class="label" x="{f.x + PAD:.1f}" y="{f.y + PAD + 10:.1f}" '
                   f'style="fill:{stroke};stroke:{fill}">{_a(_label(k, g))}</text>')
    for k, g in enumerate(fused.groups):
        for n in g.nodes:
            out.append(f'<g class="node" data-node="{_a(n.name)}" data-op="{_a(n.op)}" data-kernel="{k}">'
                       f'<title>{_a(repr(n))}</title>{_box(pic.nodes[id(n)], *_node_lines(n))}</g>')
    for cls, values, boxes in (("input", graph.inputs, pic.inputs), ("output", graph.outputs, pic.outputs)):
        for v, b in zip(values, boxes):
            out.append(f'<g class="{cls}" data-value="{_a(v.name)}"><title>{_a(repr(v))}</title>'
                       f'{_box(b, cls, _io_text(v))}</g>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _box(b: _Box, first: str, second: str) -> str:
    return (f'<rect x="{b.x:.1f}" y="{b.y:.1f}" width="{b.w:.1f}" height="{b.h:.1f}" rx="4"/>'
            f'<text class="op" x="{b.x + 8:.1f}" y="{b.y + 15:.1f}">{_a(first)}</text>'
            f'<text x="{b.x + 8:.1f}" y="{b.y + 29:.1f}">{_a(second)}</text>')


def _edges(fused: FusedGraph, pic: _Picture) -> list[str]:
    """One curve per (writer, reader) pair, down its lane if it has one; the curves into a box
    spread over its top side."""
    graph = fused.graph
    n_in, n_groups = len(graph.inputs), len(fused.groups)
    group_of = {id(n): k for k, g in enumerate(fused.groups) for n in g.nodes}
    # value -> (its writer's name, box, item index, node id)
    source = {id(v): (v.name, pic.inputs[j], j, None) for j, v in enumerate(graph.inputs)}
    source.update((id(v), (n.name, pic.nodes[id(n)], n_in + group_of[id(n)], id(n)))
                  for n in graph.nodes for v in n.outputs)
    readers = [(n.name, pic.nodes[id(n)], n_in + group_of[id(n)], id(n), n.inputs) for n in graph.nodes]
    readers += [(f"output:{v.name}", b, n_in + n_groups + o, None, (v,))
                for o, (v, b) in enumerate(zip(graph.outputs, pic.outputs))]
    out = []
    for name, box, item, node, values in readers:
        writers = list(dict.fromkeys(source[id(v)] for v in values if id(v) in source))
        for j, (src, sb, src_item, src_node) in enumerate(writers):
            inside = src_item == item
            if inside:
                lane = pic.node_lanes.get((src_node, node), [])
            else:
                lane = pic.item_lanes.get((src_item, item), []) + pic.entries.get(node, [])
            points = [(sb.x + sb.w / 2, sb.y + sb.h)]
            points += [p for b in lane for p in ((b.x + b.w / 2, b.y), (b.x + b.w / 2, b.y + b.h))]
            points.append((box.x + box.w * (j + 1) / (len(writers) + 1), box.y))
            out.append(f'<path class="edge{" inside" if inside else ""}" data-from="{_a(src)}" data-to="{_a(name)}" '
                       f'd="{_path(points)}"/>')
    return out


def _path(points: list[tuple[float, float]]) -> str:
    """Curves leaving and entering vertically between rows, straight lines down the lanes: the
    points go (start, lane top, lane bottom, ..., end)."""
    (x0, y0), d = points[0], [f"M{points[0][0]:.1f},{points[0][1]:.1f}"]
    for k, (x1, y1) in enumerate(points[1:]):
        if k % 2:
            d.append(f"L{x1:.1f},{y1:.1f}")
        else:
            bend = max(12.0, (y1 - y0) / 2)
            d.append(f"C{x0:.1f},{y0 + bend:.1f} {x1:.1f},{y1 - bend:.1f} {x1:.1f},{y1:.1f}")
        x0, y0 = x1, y1
    return " ".join(d)


# -- HTML ---------------------------------------------------------------------------------------
PAGE_STYLE = """
body { font: 14px sans-serif; margin: 20px; color: #202124; }
table { border-collapse: collapse; margin: 12px 0 24px; }
td, th { border: 1px solid #dadce0; padding: 3px 8px; text-align: left; vertical-align: top; }
td.ops, td.io { font-family: monospace; }
.swatch { display: inline-block; width: 12px; height: 12px; border: 1px solid; margin: 0 4px 0 12px; }
"""


def _html(fused: FusedGraph, svg: str, opt_level: int) -> str:
    graph = fused.graph
    rows = "\n".join(
        f'<tr><td>{k}</td><td><a href="#kernel-{k}">{_a(kernel_name(g.ops))}</a></td><td>{_pattern(g)}</td>'
        f'<td class="ops">{_a(" → ".join(g.ops))}</td>'
        f'<td class="io">{_a(", ".join(_io_text(v) for v in g.outputs))}</td></tr>'
        for k, g in enumerate(fused.groups))
    shown = dict.fromkeys(_pattern(g) for g in fused.groups)
    legend = "".join(f'<span class="swatch" style="background:{COLORS[p][0]};border-color:{COLORS[p][1]}"></span>{p}'
                     for p in shown)
    title = _a(f"{graph.name}: opt_level {opt_level}")
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title><style>{PAGE_STYLE}</style></head>
<body>
<h1>{title}</h1>
<p>{len(graph.nodes)} nodes in {len(fused.groups)} kernels, in run order. Frames are kernels, colored by
pattern kind:{legend}. Solid edges go through memory; dashed edges stay inside a kernel.</p>
<table>
<tr><th>#</th><th>kernel</th><th>pattern</th><th>operators</th><th>writes</th></tr>
{rows}
</table>
{svg}</body></html>
"""

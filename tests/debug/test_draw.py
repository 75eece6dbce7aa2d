"""ember.debug.draw_graph: the SVG parses, has one frame per kernel with the kernel's operators
and every node in its kernel's frame, no two frames or nodes overlap, an edge per (writer,
reader) pair; the HTML page holds the SVG and a row per kernel; bad arguments are named."""

import xml.etree.ElementTree as ET

import pytest

from ember.debug import draw_graph
from ember.graph import Graph, TensorType
from ember.lowering import kernel_name, partition
from ember.ops.nodes import add_op
from ember.passes.fuse import FUSE_LEVEL
from ember.passes.pipeline import PIPELINES
from ember.testing import random_array

SVG = "{http://www.w3.org/2000/svg}"


def textbook() -> Graph:
    """conv2d -> add(bias) -> relu -> batch_norm, and a residual add of a second branch."""
    g = Graph("textbook")
    x = g.add_input("x", TensorType((1, 4, 8, 8)))
    (y,) = add_op(g, "conv2d", [x, g.add_constant(random_array((4, 4, 3, 3)), "w")], {"padding": (1, 1, 1, 1)})
    (y,) = add_op(g, "add", [y, g.add_constant(random_array((1, 4, 1, 1)), "b")])
    (y,) = add_op(g, "relu", [y])
    stats = [g.add_constant(random_array((4,)) + 1.5, name) for name in ("mean", "var", "gamma", "beta")]
    (y,) = add_op(g, "batch_norm", [y, *stats])
    (z,) = add_op(g, "conv2d", [y, g.add_constant(random_array((4, 4, 1, 1)), "w2")])
    (z,) = add_op(g, "add", [z, x])  # the residual: an edge that skips rows
    (s,) = add_op(g, "sum", [z], {"axes": (2, 3)})
    g.set_outputs([add_op(g, "tanh", [z])[0], s])
    return g


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def by_class(root: ET.Element, cls: str) -> list[ET.Element]:
    return [e for e in root.iter() if cls in e.get("class", "").split()]


def rect(e: ET.Element) -> tuple[float, float, float, float]:
    r = e.find(f"{SVG}rect")
    return tuple(float(r.get(k)) for k in ("x", "y", "width", "height"))


def overlap(a, b) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def check_picture(graph: Graph, opt_level: int) -> ET.Element:
    """The SVG of graph at opt_level against the kernels the compiler makes of it."""
    fused = partition(graph, opt_level)
    root = parse(draw_graph(graph, opt_level))
    frames = by_class(root, "kernel")
    assert len(frames) == len(fused.groups)
    nodes = by_class(root, "node")
    assert sorted(n.get("data-node") for n in nodes) == sorted(n.name for n in fused.graph.nodes)
    for k, (frame, group) in enumerate(zip(frames, fused.groups)):
        assert frame.get("id") == f"kernel-{k}"
        assert frame.get("data-ops").split() == list(group.ops)
        assert frame.get("data-name") == kernel_name(group.ops)
        inside = [n for n in nodes if n.get("data-kernel") == str(k)]
        assert [n.get("data-node") for n in inside] == [n.name for n in group.nodes]
        assert [n.get("data-op") for n in inside] == list(group.ops)
        fx, fy, fw, fh = rect(frame)
        for n in inside:
            x, y, w, h = rect(n)
            assert fx <= x and x + w <= fx + fw and fy <= y and y + h <= fy + fh, n.get("data-node")
    for boxes in (frames, nodes + by_class(root, "input") + by_class(root, "output")):
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                assert not overlap(rect(a), rect(b)), (a.attrib, b.attrib)
    # one edge per (writer, reader) pair; constants are not drawn
    g = fused.graph
    writer = {id(v): v.name for v in g.inputs} | {id(v): n.name for n in g.nodes for v in n.outputs}
    want = {(writer[id(v)], n.name) for n in g.nodes for v in n.inputs if id(v) in writer}
    want |= {(writer[id(v)], f"output:{v.name}") for v in g.outputs if id(v) in writer}
    edges = [(e.get("data-from"), e.get("data-to")) for e in by_class(root, "edge")]
    assert sorted(edges) == sorted(want)
    assert len(by_class(root, "input")) == len(g.inputs) and len(by_class(root, "output")) == len(g.outputs)
    return root


def test_the_textbook_example_is_one_frame_when_fused():
    root = check_picture(textbook(), FUSE_LEVEL)
    ops = [f.get("data-ops").split() for f in by_class(root, "kernel")]
    assert ops == [["conv2d", "add", "relu", "batch_norm"], ["conv2d", "add"], ["sum"], ["tanh"]]
    inside = [e for e in by_class(root, "edge") if "inside" in e.get("class").split()]
    assert len(inside) == 4  # conv2d -> add -> relu -> batch_norm, conv2d -> add stay in their kernels


@pytest.mark.parametrize("opt_level", sorted(PIPELINES))
def test_every_level_matches_the_compilers_kernels(opt_level):
    root = check_picture(textbook(), opt_level)
    if opt_level < FUSE_LEVEL:
        assert all(len(f.get("data-ops").split()) == 1 for f in by_class(root, "kernel"))


def test_a_deep_residual_network_reads_top_to_bottom():
    g = Graph("resnet_like")
    x = g.add_input("x", TensorType((1, 4, 6, 6)))
    for _ in range(8):
        (y,) = add_op(g, "conv2d", [x, g.add_constant(random_array((4, 4, 3, 3)), "w")], {"padding": (1, 1, 1, 1)})
        (y,) = add_op(g, "relu", [y])
        (y,) = add_op(g, "conv2d", [y, g.add_constant(random_array((4, 4, 3, 3)), "w")], {"padding": (1, 1, 1, 1)})
        (x,) = add_op(g, "relu", add_op(g, "add", [y, x]))
    g.set_outputs([x])
    root = check_picture(g, FUSE_LEVEL)
    assert float(root.get("height")) > 4 * float(root.get("width"))
    tops = [rect(f)[1] for f in by_class(root, "kernel")]
    assert tops == sorted(tops) and len(set(tops)) == len(tops)  # a chain of kernels, in run order, down the page


def test_names_are_escaped():
    g = Graph('a<b>&"c"')
    x = g.add_input('x<&"', TensorType((2, 3)))
    (y,) = add_op(g, "relu", [x], name="r&<")
    g.set_outputs([y])
    for fmt in ("svg", "html"):
        text = draw_graph(g, 0, fmt)
        parse(text[text.index("<svg"):text.index("</svg>") + 6])
    assert by_class(parse(draw_graph(g, 0)), "node")[0].get("data-node") == "r&<"


def test_html_page_has_the_svg_and_a_row_per_kernel():
    graph = textbook()
    fused = partition(graph, FUSE_LEVEL)
    page = draw_graph(graph, FUSE_LEVEL, fmt="html")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert page.count("<tr>") == len(fused.groups) + 1
    for k, group in enumerate(fused.groups):
        assert f'<a href="#kernel-{k}">{kernel_name(group.ops)}</a>' in page
        assert " → ".join(group.ops) in page
    svg = page[page.index("<svg"):page.index("</svg>") + 6]
    assert len(by_class(parse(svg), "kernel")) == len(fused.groups)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="fmt must be one of.*'png'"):
        draw_graph(textbook(), fmt="png")
    with pytest.raises(TypeError, match="takes a Graph, got str"):
        draw_graph("model.onnx")
    with pytest.raises(ValueError, match="opt_level must be one of"):
        draw_graph(textbook(), opt_level=7)

"""The graph IR's text form: the printer's output, exact round trips through the parser (symbolic
dimensions, multi-output nodes, attributes of every kind, constants inline and given apart,
names that need quoting), and the parser's errors with their line and column."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ember.graph import Graph, GraphError, TensorType, graph_to_text, parse_graph
from ember.graph.printer import MAX_INLINE, attr_to_text
from ember.testing import random_array


def conv_graph() -> Graph:
    g = Graph()
    x = g.add_input("x", TensorType(("batch", 3, 224, 224)))
    w = g.add_constant(random_array((64, 3, 7, 7)), "w")
    conv = g.add_node("conv2d", [x, w], {"padding": (3, 3, 3, 3), "strides": [2, 2]},
                      [TensorType(("batch", 64, 112, 112))], name="conv")
    relu = g.add_node("relu", conv.outputs, {}, [TensorType(("batch", 64, 112, 112))], name="relu")
    g.set_outputs(relu.outputs)
    return g


def every_kind_graph() -> Graph:
    """Multi-output nodes, quoted names, node names apart from their outputs' names, a node without
    outputs, scalar and inline constants of several dtypes, attributes of every kind."""
    g = Graph("every kind")
    x = g.add_input("x", TensorType(("batch", "seq len", 8), "float32"))
    m = g.add_input("/mask:0", TensorType((1, 8), "bool"))
    half = g.add_constant(np.array(0.5, "float32"), "half")
    g.add_constant(np.array([1, -2, 3], "int64"), "idx")
    g.add_constant(np.array([[True, False]]), "flags")
    g.add_constant(random_array((4, 8), "float16"), "big.weight")
    lo, hi = g.add_node("split", [x], {"axis": -1, "sizes": (2, 6)},
                        [TensorType(("batch", "seq len", 2)), TensorType(("batch", "seq len", 6))],
                        out_names=["lo", "hi"]).outputs
    (y,) = g.add_node("mul", [lo, half], {}, [TensorType(("batch", "seq len", 2))], name="scale lo").outputs
    attrs = {"i": -7, "big": 2**63 - 1, "f": 1e-05, "g": -0.0, "inf": float("inf"), "ninf": -math.inf,
             "nan": math.nan, "s": 'quote " backslash \\ newline \n tab \t é', "none": None, "yes": True,
             "no": False, "empty": (), "one": (1,), "nested": ((1, 2.5), ("a", None, (True,)), ())}
    (z,) = g.add_node("custom", [y, hi, m], attrs, [TensorType(("batch", 8), "float32")]).outputs
    g.add_node("print", [z], {"label": "z"}, [], name="side effect")
    g.set_outputs([z, hi, x])
    return g


def test_printed_form():
    g = conv_graph()
    assert str(g) == graph_to_text(g) == (
        "graph main(%x: float32[batch, 3, 224, 224]) {\n"
        "  const %w: float32[64, 3, 7, 7]\n"
        "  %conv: float32[batch, 64, 112, 112] = conv2d(%x, %w) {padding=(3, 3, 3, 3), strides=(2, 2)}\n"
        "  %relu: float32[batch, 64, 112, 112] = relu(%conv)\n"
        "  return %relu\n"
        "}")


def test_printed_form_of_names_constants_and_multiple_outputs():
    lines = graph_to_text(every_kind_graph()).splitlines()
    assert lines[0] == 'graph "every kind"(%x: float32[batch, "seq len", 8], %"/mask:0": bool[1, 8]) {'
    assert lines[1:5] == ["  const %half: float32[] = 0.5",
                          "  const %idx: int64[3] = [1, -2, 3]",
                          "  const %flags: bool[1, 2] = [True, False]",
                          "  const %big.weight: float16[4, 8]"]
    assert lines[5] == '  %lo: float32[batch, "seq len", 2], %hi: float32[batch, "seq len", 6] = split(%x) ' \
                       '{axis=-1, sizes=(2, 6)}'
    assert lines[6] == '  %"scale lo": float32[batch, "seq len", 2] = mul(%lo, %half)'
    assert lines[7] == ('  %custom: float32[batch, 8] = custom(%"scale lo", %hi, %"/mask:0") '
                        '{big=9223372036854775807, empty=(), f=1e-05, g=-0.0, i=-7, inf=inf, nan=nan, '
                        'nested=((1, 2.5), ("a", None, (True,)), ()), ninf=-inf, no=False, none=None, one=(1,), '
                        's="quote \\" backslash \\\\ newline \\n tab \\t \\u00e9", yes=True}')
    assert lines[8] == '  print(%custom) {label="z"} @"side effect"'
    assert lines[9:] == ["  return %custom, %hi, %x", "}"]


@pytest.mark.parametrize("make", [conv_graph, every_kind_graph])
def test_round_trip(make):
    g = make()
    text = graph_to_text(g)
    back = parse_graph(text, {name: data for name, data in g.constants.items() if data.size > MAX_INLINE})
    assert graph_to_text(back) == text
    assert back.name == g.name
    assert [v.name for v in back.inputs] == [v.name for v in g.inputs]
    assert [(n.op, n.name, [v.name for v in n.inputs], [v.type for v in n.outputs]) for n in back.nodes] == \
           [(n.op, n.name, [v.name for v in n.inputs], [v.type for v in n.outputs]) for n in g.nodes]
    for name, data in g.constants.items():
        assert back.constants[name].dtype == data.dtype
        np.testing.assert_array_equal(back.constants[name], data)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int64", "uint8", "bool"])
def test_inline_constants_read_back_bit_exact(dtype):
    g = Graph()
    data = random_array((2, 3), dtype)
    if dtype.startswith("float"):
        data.flat[:3] = [np.inf, -np.inf, np.finfo(dtype).tiny]
    c = g.add_constant(data, "c")
    g.set_outputs([c])
    back = parse_graph(graph_to_text(g, max_inline=6))
    assert back.constants["c"].dtype == data.dtype
    assert back.constants["c"].tobytes() == data.tobytes()
    assert "const %c" in graph_to_text(g, max_inline=5) and "=" not in graph_to_text(g, max_inline=5)


scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text()
attr_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4).map(tuple), max_leaves=12)


def same(a, b) -> bool:
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b))


@given(st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]*", fullmatch=True) | st.text(min_size=1), attr_values,
                       max_size=4))
def test_attributes_round_trip(attrs):
    g = Graph()
    x = g.add_input("x", TensorType((2,)))
    g.set_outputs(g.add_node("op", [x], attrs, [TensorType((2,))]).outputs)
    (node,) = parse_graph(graph_to_text(g)).nodes
    assert sorted(node.attrs) == sorted(attrs)
    for k, v in attrs.items():
        assert same(node.attrs[k], v), (k, attr_to_text(v), node.attrs[k])


def test_comments_and_free_layout():
    g = parse_graph("""
        # a hand-written graph
        graph main(%a: float32[n],
                   %b: float32[n]) {
          %s: float32[n] = add(%a, %b)   # the sum
          return %s, %a
        }""")
    assert str(g) == "graph main(%a: float32[n], %b: float32[n]) {\n  %s: float32[n] = add(%a, %b)\n  return %s, %a\n}"


GOOD = """graph main(%x: float32[2]) {
  const %c: float32[2] = [1.0, 2.0]
  %y: float32[2] = add(%x, %c)
  return %y
}"""


def case(name, text, message, line=None, at=None, constants=None):
    """A parse error: the message, and where it points (the first `at` in line `line`)."""
    return pytest.param(text, constants, message, line, at, id=name)


C = "const %c: float32[2] = [1.0, 2.0]"


@pytest.mark.parametrize("text, constants, message, line, at", [
    case("undefined", GOOD.replace("add(%x, %c)", "add(%x, %q)"), "%q is not defined", 3, "%q"),
    case("self use", GOOD.replace("add(%x", "add(%y"), "%y is not defined", 3, "%y,"),
    case("defined twice", GOOD.replace("%y: float32", "%x: float32"), "%x is defined twice", 3, "%x"),
    case("output twice", GOOD.replace("%y: float32[2] =", "%y: float32[2], %y: float32[2] ="), "%y is defined twice",
         3, "%y: float32[2] ="),
    case("no data", GOOD.replace(" = [1.0, 2.0]", ""), "constant %c has no data", 2, "%c"),
    case("data shape", GOOD.replace(" = [1.0, 2.0]", ""), "declared float32[2] but its data is float32[3]", 2, "%c",
         {"c": np.zeros(3, "float32")}),
    case("data dtype", GOOD.replace(" = [1.0, 2.0]", ""), "its data is float64[2]", 2, "%c",
         {"c": np.zeros(2, "float64")}),
    case("data count", GOOD.replace("[1.0, 2.0]", "[1.0]"), "1 value(s) given for a constant of type float32[2]",
         2, "[1.0]"),
    case("data string", GOOD.replace("[1.0, 2.0]", '[1.0, "a"]'), "expected a value", 2, '"a"'),
    case("data float as int", GOOD.replace(C, "const %c: int8[2] = [1, 1.5]"), "value 1.5 is not a int8", 2, "1.5"),
    case("data overflow", GOOD.replace(C, "const %c: int8[2] = [1, 300]"), "value 300 is out of range for int8", 2,
         "300"),
    case("data int as bool", GOOD.replace(C, "const %c: bool[2] = [1, 0]"), "value 1 is not a bool", 2, "1,"),
    case("data symbolic", GOOD.replace(C, "const %c: bool[n] = [True]"), "needs a static shape", 2, "bool"),
    case("negative dim", GOOD.replace("float32[2]) {", "float32[-2]) {"), "expected a dimension", 1, "-2"),
    case("bad character", GOOD.replace("(%x, %c)", "(%x; %c)"), "unexpected character ';'", 3, ";"),
    case("missing comma", GOOD.replace("(%x, %c)", "(%x %c)"), "expected ')', found '%c'", 3, "%c"),
    case("bad attribute", GOOD.replace("(%x, %c)", "(%x, %c) {k=v}"), "expected a value", 3, "v}"),
    case("bad escape", GOOD.replace("(%x, %c)", '(%x, %c) {k="\\q"}'), "bad string", 3, '"'),
    case("nameless node", GOOD.replace("%y: float32[2] = ", ""), "a node without outputs needs a name", 4, "return"),
    case("unclosed", GOOD[:-1], "expected '}', found the end of the text", 5, None),
    case("trailing text", GOOD + " extra", "expected the end of the text after the graph, found 'extra'", 5,
         "extra"),
    case("no return", GOOD.replace("return %y", "%z: float32[2] = add(%y, %y)"),
         "expected an operator name, found '}'", 5, "}"),
    case("undeclared constant", GOOD, "constants given that the text does not declare: ['other']",
         constants={"other": np.zeros(1)}),
])
def test_parse_errors(text, constants, message, line, at):
    with pytest.raises(GraphError) as info:
        parse_graph(text, constants)
    assert message in str(info.value)
    if line is not None:
        source = text.splitlines()[line - 1] if line <= len(text.splitlines()) else ""
        column = source.index(at) + 1 if at is not None else len(source) + 1
        assert str(info.value).startswith(f"line {line}, column {column}:"), str(info.value)
        assert str(info.value).splitlines()[1:] == ["  " + source, "  " + " " * (column - 1) + "^"]

"""The graph verifier: a good graph passes (types re-inferred with ember.ops.infer_types), and each
kind of problem is found and named, all of them in one error."""

from __future__ import annotations

import numpy as np
import pytest

from ember.graph import Attrs, Graph, GraphError, TensorType, parse_graph, problems, verify
from ember.ops import infer_types
from ember.ops.nodes import add_op
from ember.testing import random_array


def good_graph() -> Graph:
    g = Graph()
    x = g.add_input("x", TensorType(("batch", 4)))
    b = g.add_constant(random_array((4,)), "b")
    (y,) = add_op(g, "add", [x, b])
    (z,) = add_op(g, "mul", [y, x], name="scale")
    (w,) = add_op(g, "maximum", [z, b])
    g.set_outputs([w, y])
    return g


def only_problem(g: Graph, infer=None) -> str:
    found = problems(g, infer)
    assert len(found) == 1, found
    return found[0]


def test_good_graph_passes():
    g = good_graph()
    verify(g)
    verify(g, infer_types)
    verify(parse_graph(str(g)), infer_types)


def test_use_before_definition():
    g = good_graph()
    g.nodes[0], g.nodes[1] = g.nodes[1], g.nodes[0]
    assert only_problem(g) == "node scale (mul): input 0 %add is used before its definition by node add"


def test_value_of_another_graph():
    g, other = good_graph(), good_graph()
    g.nodes[1].inputs = (g.nodes[1].inputs[0], other.inputs[0])
    assert only_problem(g) == "node scale (mul): input 1 %x is not a value of this graph"


def test_undefined_output():
    g = good_graph()
    del g.nodes[2]
    assert only_problem(g) == "graph output 0 %maximum is an output of node maximum, which is not in the graph"


def test_constant_without_data():
    g = good_graph()
    del g.constants["b"]
    assert problems(g) == ["node add (add): input 1 %b is neither a graph input nor a constant with data",
                           "node maximum (maximum): input 1 %b is neither a graph input nor a constant with data"]


def test_constant_data_of_another_type():
    g = good_graph()
    g.constants["b"] = np.zeros((4,), "float64")
    assert only_problem(g) == "constant %b has type float32[4] but its data is float64[4]"


def test_constant_data_without_value():
    g = good_graph()
    g.constants["ghost"] = np.zeros(3)
    assert only_problem(g) == "constant %ghost has data but no value in the graph"


def test_duplicate_value_and_node_names():
    g = good_graph()
    g.nodes[1].outputs[0].name = "add"
    g.nodes[2].name = "add"
    found = problems(g)
    assert "value name %add is defined 2 times: output 0 of node add, output 0 of node scale" in found
    assert "node name add is used by 2 nodes" in found


def test_untyped_and_misattributed_outputs():
    g = good_graph()
    g.nodes[0].outputs[0].type = None
    g.nodes[2].outputs[0].index = 1
    found = problems(g)
    assert found == ["output 0 of node add %add has no TensorType (its type is None)",
                     "node maximum: output 0 %maximum says it is output 1 of node maximum"]


def test_inferred_types_must_match():
    g = good_graph()
    g.nodes[1].outputs[0].type = TensorType(("batch", 4), "float16")
    verify(g)  # structurally fine
    assert problems(g, infer_types) == [
        "node scale (mul): output 0 %scale has type float16[batch, 4] but inference gives float32[batch, 4]",
        # its user is checked against the types the graph says, not the inferred ones
        "node maximum (maximum): type inference failed: OpTypeError: maximum: inputs have different dtypes "
        "['float16', 'float32']; insert a cast"]


def test_inference_failures_are_reported_per_node():
    g = Graph()
    x = g.add_input("x", TensorType((3,)))
    y = g.add_input("y", TensorType((4,)))
    g.add_node("add", [x, y], {}, [TensorType((4,))], name="bad_broadcast")
    g.add_node("no_such_op", [x], {}, [TensorType((3,))], name="mystery")
    g.add_node("mul", [x], {}, [TensorType((3,))], name="one_input")
    found = problems(g, infer_types)
    assert len(found) == 3
    assert found[0].startswith("node bad_broadcast (add): type inference failed: OpTypeError: add: shapes (3,) "
                               "and (4,) do not broadcast")
    assert found[1].startswith("node mystery (no_such_op): type inference failed: UnsupportedOpError")
    assert found[2] == "node one_input (mul): type inference failed: OpTypeError: mul takes 2 inputs, got 1"


def test_attributes_must_be_bound():
    def infer(op, in_types, attrs):  # an operator with a default attribute
        return Attrs({"alpha": 1.0, **attrs}), in_types

    g = Graph()
    x = g.add_input("x", TensorType((3,)))
    g.add_node("scale", [x], {}, [TensorType((3,))], name="s")
    assert only_problem(g, infer) == "node s (scale): attributes {} are not the bound ones {alpha=1.0}"


def test_output_count_must_match():
    g = good_graph()
    found = problems(g, lambda op, types, attrs: [types[0], types[0]])
    assert found == [f"node {n.name} ({n.op}): has 1 output(s) but inference gives 2" for n in g.nodes]


def test_all_problems_in_one_error():
    g = good_graph()
    g.nodes[0], g.nodes[1] = g.nodes[1], g.nodes[0]
    g.constants["b"] = np.zeros((5,), "float32")
    g.nodes[2].outputs[0].type = TensorType((4,))
    with pytest.raises(GraphError) as info:
        verify(g, infer_types)
    assert len(info.value.problems) == 3
    assert str(info.value) == "graph main: 3 problem(s):\n" + "\n".join(
        ["  constant %b has type float32[4] but its data is float32[5]",
         "  node scale (mul): input 0 %add is used before its definition by node add",
         "  node maximum (maximum): output 0 %maximum has type float32[4] but inference gives float32[batch, 4]"])

"""Regions (control flow) in the graph IR: the text form round trip of nested regions, the
serializer keying region constants by their path, and the verifier checking inside regions."""

from __future__ import annotations

import numpy as np
import pytest

from ember.graph import Graph, GraphError, TensorType, graph_to_text, parse_graph
from ember.graph.serialize import graph_from_bytes, graph_to_bytes
from ember.graph.verify import problems, verify
from ember.ops import infer_types
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.testing import random_array

T = TensorType((2, 3))


def branch(name: str, op: str, weight: np.ndarray) -> Graph:
    """x -> op(x) + w, w a constant named like the outer graph's own."""
    g = Graph(name)
    x = g.add_input("x", T)
    w = g.add_constant(weight, "w")
    (y,) = add_op(g, op, [x])
    (z,) = add_op(g, "add", [y, w])
    g.set_outputs([z])
    return g


def nested_graph() -> Graph:
    """A loop whose body holds an if; an if beside it; constants named alike at every level."""
    g = Graph("nested")
    x = g.add_input("x", T)
    c = g.add_input("c", TensorType((), "bool"))
    g.add_constant(random_array((2, 3)), "w")
    (y,) = add_op(g, "if", [c, x], regions=[branch("then", "relu", random_array((2, 3))),
                                            branch("else", "tanh", random_array((2, 3)))])
    body = Graph("body")
    i = body.add_input("i", TensorType((), "int64"))
    go = body.add_input("go", TensorType((), "bool"))
    s = body.add_input("s", T)
    zero = body.add_constant(np.array(0, "int64"), "zero")
    (even,) = add_op(body, "equal", [i, zero])
    (inner,) = add_op(body, "if", [even, s], regions=[branch("then", "neg", random_array((2, 3))),
                                                       branch("else", "sigmoid", random_array((2, 3)))])
    body.set_outputs([go, inner, inner])
    trips = g.add_constant(np.array(3, "int64"), "trips")
    true = g.add_constant(np.array(True), "true")
    outs = add_op(g, "loop", [trips, true, y], {"carried": 1, "length": 3}, regions=[body])
    g.set_outputs([y, *outs])
    return g


def test_nested_regions_print_and_parse_back_exactly():
    g = nested_graph()
    verify(g, infer_types)
    text = graph_to_text(g, max_inline=0)
    assert text.count("graph then(") == 2 and "graph body(" in text
    back = parse_graph(text, dict(g.all_constants()))
    assert graph_to_text(back, max_inline=0) == text
    verify(back, infer_types)
    x = random_array((2, 3))
    for cond in (True, False):
        for a, b in zip(evaluate(g, x, np.array(cond)), evaluate(back, x, np.array(cond))):
            np.testing.assert_array_equal(a, b)


def test_region_constants_are_keyed_by_their_path():
    g = nested_graph()
    keys = [k for k, _ in g.all_constants()]
    assert "w" in keys and "if/0/w" in keys and "if/1/w" in keys and "loop/0/if/1/w" in keys
    assert len(keys) == len(set(keys))
    back = graph_from_bytes(graph_to_bytes(g))
    for (k, a), (k2, b) in zip(g.all_constants(), back.all_constants()):
        assert k == k2
        np.testing.assert_array_equal(a, b)


def test_parser_reads_regions_without_their_constants_as_an_error():
    g = nested_graph()
    constants = dict(g.all_constants())
    del constants["if/1/w"]
    with pytest.raises(GraphError, match="constant %w has no data"):
        parse_graph(graph_to_text(g, max_inline=0), constants)


def test_verifier_looks_inside_regions():
    g = nested_graph()
    body = next(n for n in g.nodes if n.op == "loop").regions[0]
    inner = next(n for n in body.nodes if n.op == "if")
    other = inner.regions[1]
    outer_x = g.inputs[0]
    other.nodes[0].inputs = (outer_x,)  # a region reading an outer value directly: not isolated
    found = problems(g, infer_types)
    assert any("region 0 (body)" in p and "region 1 (else)" in p and "not a value of this graph" in p for p in found)


def test_verifier_checks_a_control_flow_node_against_its_regions():
    g = Graph()
    x = g.add_input("x", T)
    c = g.add_input("c", TensorType((), "bool"))
    then = branch("then", "relu", random_array((2, 3)))
    other = Graph("else")
    other.set_outputs([other.add_input("x", T)])
    other.inputs[0].type = TensorType((3, 2))  # takes another type than the node gives it
    g.add_node("if", [c, x], {}, [T], regions=[then, other])
    with pytest.raises(GraphError, match="else branch"):
        verify(g, infer_types)

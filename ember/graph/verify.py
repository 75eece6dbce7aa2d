"""The graph verifier: `verify(graph, infer)` raises a GraphError listing every problem it finds,
each naming the node or value at fault; `problems(graph, infer)` returns them as a list.

Checks, in one walk over the nodes in order:
- every value (graph input, constant, node output) is a value of this graph (made by its add_*
  methods), has a TensorType, and has a name no other value has; node names are unique;
- a node output knows its node and position; a graph input or constant belongs to no node;
- every constant's data exists and has the value's type; every value that is neither a graph
  input nor a node output is a constant;
- every node input is defined before the node (the nodes are in topological order), and every
  graph output is defined;
- with `infer`, a callable (op, in_types, attrs) -> out_types, or -> (bound attrs, out_types) as
  ember.ops.infer_types returns: every node's output types are what inference gives, and its
  attributes are already bound (every default filled in); a node with regions (control flow) is
  given them too: `infer(op, in_types, attrs, regions)`;
- every region of a node, as a graph of its own (regions are isolated from above: ember/graph/core.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from .core import Attrs, Graph, GraphError, Node, TensorType, Value

Infer = Callable[[str, list[TensorType], Attrs], object]


def verify(graph: Graph, infer: Infer | None = None) -> None:
    found = problems(graph, infer)
    if found:
        err = GraphError(f"graph {graph.name}: {len(found)} problem(s):\n" + "\n".join(f"  {p}" for p in found))
        err.problems = found
        raise err


def problems(graph: Graph, infer: Infer | None = None) -> list[str]:
    out: list[str] = []
    where: dict[str, list[str]] = {}  # value name -> what defines it
    defined: dict[int, int] = {}  # id(value) -> index of the node that defines it (-1: before all nodes)

    def define(v: Value, what: str, at: int) -> None:
        where.setdefault(v.name, []).append(what)
        if not isinstance(v.type, TensorType):
            out.append(f"{what} %{v.name} has no TensorType (its type is {v.type!r})")
        if _lookup(graph, v.name) is not v:
            out.append(f"{what} %{v.name} is not a value of this graph (not made by its add_* methods)")
        defined.setdefault(id(v), at)

    for v in graph.inputs:
        define(v, "graph input", -1)
        if v.node is not None:
            out.append(f"graph input %{v.name} claims to be an output of node {v.node.name}")
    for name, data in graph.constants.items():
        v = _lookup(graph, name)
        if v is None:
            out.append(f"constant %{name} has data but no value in the graph")
            continue
        define(v, "constant", -1)
        data = np.asarray(data)
        if isinstance(v.type, TensorType) and v.type != TensorType(data.shape, data.dtype.name):
            out.append(f"constant %{name} has type {v.type} but its data is "
                       f"{TensorType(data.shape, data.dtype.name)}")
        if v.node is not None:
            out.append(f"constant %{name} claims to be an output of node {v.node.name}")
    for k, node in enumerate(graph.nodes):
        for j, v in enumerate(node.outputs):
            define(v, f"output {j} of node {node.name}", k)
            if v.node is not node or v.index != j:
                owner = v.node.name if v.node is not None else None
                out.append(f"node {node.name}: output {j} %{v.name} says it is output {v.index} of node {owner}")

    for name, defs in where.items():
        if len(defs) > 1:
            out.append(f"value name %{name} is defined {len(defs)} times: {', '.join(defs)}")
    node_names: dict[str, int] = {}
    for node in graph.nodes:
        node_names[node.name] = node_names.get(node.name, 0) + 1
    out += [f"node name {name} is used by {n} nodes" for name, n in node_names.items() if n > 1]

    for k, node in enumerate(graph.nodes):
        label = f"node {node.name} ({node.op})"
        for j, v in enumerate(node.inputs):
            problem = _undefined(graph, v, defined, k)
            if problem:
                out.append(f"{label}: input {j} %{v.name} {problem}")
        if infer is not None:
            out += _check_inference(label, node, infer)
        for r, region in enumerate(node.regions):
            out += [f"{label}, region {r} ({region.name}): {p}" for p in problems(region, infer)]
    for j, v in enumerate(graph.outputs):
        problem = _undefined(graph, v, defined, len(graph.nodes))
        if problem:
            out.append(f"graph output {j} %{v.name} {problem}")
    return out


def _lookup(graph: Graph, name: str) -> Value | None:
    try:
        return graph.value(name)
    except KeyError:
        return None


def _undefined(graph: Graph, v: Value, defined: dict[int, int], at: int) -> str:
    """Why `v` is not defined before node number `at` ("" if it is)."""
    if id(v) in defined:
        if defined[id(v)] < at:
            return ""
        return f"is used before its definition by node {graph.nodes[defined[id(v)]].name}"
    if _lookup(graph, v.name) is not v:
        return "is not a value of this graph"
    if v.node is None:
        return "is neither a graph input nor a constant with data"
    return f"is an output of node {v.node.name}, which is not in the graph"


def _check_inference(label: str, node: Node, infer: Infer) -> list[str]:
    try:
        types = [v.type for v in node.inputs]
        result = infer(node.op, types, node.attrs, node.regions) if node.regions else infer(node.op, types, node.attrs)
    except Exception as e:  # noqa: BLE001 - every problem is reported, whatever raised it
        return [f"{label}: type inference failed: {type(e).__name__}: {e}"]
    out = []
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], Mapping):
        bound, result = result
        if Attrs(bound) != node.attrs:
            out.append(f"{label}: attributes {node.attrs!r} are not the bound ones {bound!r}")
    types = list(result)
    if len(types) != len(node.outputs):
        return out + [f"{label}: has {len(node.outputs)} output(s) but inference gives {len(types)}"]
    for j, (v, t) in enumerate(zip(node.outputs, types)):
        if v.type != t:
            out.append(f"{label}: output {j} %{v.name} has type {v.type} but inference gives {t}")
    return out

"""The graph rebuilder the Graph -> Graph passes share: passes never mutate a graph, they copy it
node by node into a new one, replacing what they rewrite.

    rw = Rewriter(graph)
    for node in graph.nodes:
        ins = rw.inputs(node)                  # the node's inputs, as values of the new graph
        rw.replace(node, [...]) or rw.copy(node, ins)
    return rw.finish()

Graph inputs keep their names and order. A constant is copied (its data shared, not duplicated)
when first used, so constants nothing uses any more disappear with every pass. Copied nodes keep
their names and output names; new values get fresh names. `finish` sets the outputs.

A node's regions (control flow) are copied with it, as they are (the pipeline runs every pass
inside them first: `map_regions`); `inline` copies a region's nodes into the graph instead.

`replace` refuses (returns False) to replace a node that defines a graph output by values of other
names: the outputs keep their names (the compiled model's signature names them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from ..graph.core import Graph, Node, TensorType, Value
from ..ops.control import inline
from ..ops.registry import infer_types


class Rewriter:
    def __init__(self, graph: Graph, input_types: Mapping[str, TensorType] | None = None):
        """`input_types`: graph inputs (by name) that the new graph takes in another type (a
        decode step's cache in bfloat16: ember.passes.kv_cache); the others keep theirs."""
        self.old = graph
        self.new = Graph(graph.name)
        self._map: dict[Value, Value] = {}
        self._node_names: set[str] = set()
        self._outputs = {v for v in graph.outputs}
        self._derived: dict[tuple, Value] = {}
        for v in graph.inputs:
            self._map[v] = self.new.add_input(v.name, (input_types or {}).get(v.name, v.type))

    # -- values -------------------------------------------------------------------------------
    def value(self, v: Value) -> Value:
        """The new graph's value for an old one (a constant is copied on first use)."""
        got = self._map.get(v)
        if got is None:
            if not self.old.is_constant(v):
                raise KeyError(f"%{v.name} has no value in the rewritten graph yet")
            got = self._map[v] = self.new.add_constant(self.old.constants[v.name], v.name)
        return got

    def inputs(self, node: Node) -> list[Value]:
        return [self.value(v) for v in node.inputs]

    def alias(self, old: Value, new: Value) -> None:
        """Make `old` stand for `new` (a value of the new graph) from now on."""
        self._map[old] = new

    def constant(self, data, hint: str = "const") -> Value:
        return self.new.add_constant(np.asarray(data), hint)

    def derived(self, key: tuple, make, hint: str = "const") -> Value:
        """A constant made from others (a transpose, panels, weights side by side) by `make()`,
        once per `key` in this rewrite: a layer that a model calls many times (ALBERT's one layer,
        run 12 times) keeps one copy of it, not one per product that reads it."""
        if key not in self._derived:
            self._derived[key] = self.constant(make(), hint)
        return self._derived[key]

    def constant_data(self, v: Value) -> np.ndarray | None:
        """The data of a new-graph value, or None when it is not a constant."""
        return self.new.constants.get(v.name)

    # -- nodes --------------------------------------------------------------------------------
    def copy(self, node: Node, inputs: Sequence[Value], attrs: Mapping | None = None,
             regions: Sequence[Graph] | None = None) -> list[Value]:
        """The node again, on new inputs (of the same types), with its output types and names, and
        its regions (or those given)."""
        new = self.new.add_node(node.op, inputs, node.attrs if attrs is None else attrs, [v.type for v in node.outputs],
                                name=self._node_name(node.name), out_names=[v.name for v in node.outputs],
                                regions=node.regions if regions is None else regions)
        for old, v in zip(node.outputs, new.outputs):
            self._map[old] = v
        return list(new.outputs)

    def emit(self, op: str, inputs: Sequence[Value], attrs: Mapping | None = None, hint: str = "",
             out_names: Iterable[str] = ()) -> list[Value]:
        """A new node; its output types are inferred (ember.ops.infer_types)."""
        bound, out_types = infer_types(op, [v.type for v in inputs], attrs)
        return list(self.new.add_node(op, inputs, bound, out_types, name=self._node_name(hint or op),
                                      out_names=out_names).outputs)

    def inline(self, region: Graph, args: Sequence[Value]) -> list[Value]:
        """The region's nodes copied into the new graph on `args` (new-graph values, one per region
        input); its outputs' new values."""
        return inline(self.new, region, args, self._node_name)

    def defines_output(self, node: Node) -> bool:
        return any(v in self._outputs for v in node.outputs)

    def replace(self, node: Node, values: Sequence[Value]) -> bool:
        """Let the node's outputs stand for `values` (new-graph values) instead of copying it;
        False (and nothing done) when that would rename a graph output."""
        if self.defines_output(node) and [v.name for v in values] != [v.name for v in node.outputs]:
            return False
        for old, v in zip(node.outputs, values, strict=True):
            self._map[old] = v
        return True

    def finish(self) -> Graph:
        self.new.set_outputs(self.value(v) for v in self.old.outputs)
        return self.new

    def _node_name(self, hint: str) -> str:
        name, k = hint, 0
        while name in self._node_names:
            k += 1
            name = f"{hint}_{k}"
        self._node_names.add(name)
        return name


def rebuild(graph: Graph, rewrite) -> Graph:
    """Rebuild a graph, calling `rewrite(rw, node, inputs)` on each node: it returns the new
    values of the node's outputs, or None to have the node copied as it is."""
    rw = Rewriter(graph)
    for node in graph.nodes:
        ins = rw.inputs(node)
        values = rewrite(rw, node, ins)
        if values is None or not rw.replace(node, values):
            rw.copy(node, ins)
    return rw.finish()


def map_regions(graph: Graph, fn) -> Graph:
    """The graph with `fn(region)` in place of every region of its nodes; the graph itself when
    `fn` changes none."""
    new = {id(n): tuple(fn(r) for r in n.regions) for n in graph.nodes if n.regions}
    if all(a is b for n in graph.nodes if n.regions for a, b in zip(n.regions, new[id(n)])):
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes:
        rw.copy(node, rw.inputs(node), regions=new.get(id(node)))
    return rw.finish()

"""A graph cut around the nodes computed on the host (ember.ops.dynamic.HOST_OPS: operators whose
output size depends on the data): `host_segments(graph)` -> the steps a model runs, in order.

Each step is either a *segment*, a graph of the consecutive nodes between two host nodes (its
inputs: the values it reads from before it, graph inputs or earlier steps' outputs; its outputs:
the values later steps or the graph's outputs read), which the compiler compiles as a model of
its own, or one host node. A segment after a host node takes the host node's output, whose size
is a symbol, as an input: that call binds the symbol like any dimension of an input. Constants
stay constants of the segment that uses them; a control-flow node's regions, isolated from
above, go with it (a host node inside a region is not cut out: it fails to lower, named). Not a
pipeline pass: the compiler cuts the graph
before anything else runs, and the passes then run on each segment. `on_host` chooses other nodes
to cut around (ember.quantize's offload: the products an accelerator runs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..graph.core import Graph, Node, Value
from ..ops.dynamic import HOST_OPS


@dataclass(frozen=True)
class Step:
    """A segment (`graph`) or a host node (`node`); `inputs` and `outputs` name values of the
    whole graph, in the order the segment's graph (or the node) takes and gives them."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    graph: Graph | None = None
    node: Node | None = None


def has_host_nodes(graph: Graph) -> bool:
    return any(n.op in HOST_OPS for n in graph.nodes)


def host_segments(graph: Graph, on_host: Callable[[Node], bool] | None = None) -> list[Step]:
    runs: list[list[Node] | Node] = [[]]
    for n in graph.nodes:
        if (n.op in HOST_OPS) if on_host is None else on_host(n):
            runs += [n, []]
        else:
            runs[-1].append(n)
    runs = [r for r in runs if not isinstance(r, list) or r]
    last_use: dict[int, int] = {id(v): len(runs) for v in graph.outputs}
    for k, run in enumerate(runs):
        for n in run if isinstance(run, list) else [run]:
            for v in n.inputs:
                last_use[id(v)] = max(last_use.get(id(v), -1), k)
    steps = []
    for k, run in enumerate(runs):
        if isinstance(run, Node):
            steps.append(Step(tuple(v.name for v in run.inputs), tuple(v.name for v in run.outputs), node=run))
            continue
        defined = {id(v) for n in run for v in n.outputs}
        outputs = [v for n in run for v in n.outputs if last_use.get(id(v), -1) > k]
        if outputs:
            steps.append(_segment(graph, run, defined, outputs, f"{graph.name}_{k}"))
    return steps


def _segment(graph: Graph, nodes: list[Node], defined: set[int], outputs: list[Value], name: str) -> Step:
    g = Graph(name=name)
    new: dict[int, Value] = {}
    inputs = []
    for n in nodes:
        for v in n.inputs:
            if id(v) in new or id(v) in defined:
                continue
            if graph.is_constant(v):
                new[id(v)] = g.add_constant(graph.constants[v.name], name=v.name)
            else:
                new[id(v)] = g.add_input(v.name, v.type)
                inputs.append(v.name)
        node = g.add_node(n.op, [new[id(v)] for v in n.inputs], n.attrs, [v.type for v in n.outputs], name=n.name,
                          out_names=[v.name for v in n.outputs], regions=n.regions)  # (regions: isolated)
        new.update((id(v), w) for v, w in zip(n.outputs, node.outputs))
    g.set_outputs([new[id(v)] for v in outputs])
    return Step(tuple(inputs), tuple(v.name for v in outputs), graph=g)

"""Building graphs operator by operator: `add_op` infers the output types (ember.ops.infer_types,
which also binds the attributes' defaults) and appends the node.

    y, = add_op(g, "add", [x, w])
    lo, hi = add_op(g, "split", [y], {"axis": 1, "sizes": (2, 2)})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..graph.core import Graph, Value
from .registry import infer_types


def add_op(graph: Graph, op: str, inputs: Sequence[Value], attrs: Mapping | None = None, name: str = "",
           out_names: Iterable[str] = (), regions: Sequence[Graph] = ()) -> list[Value]:
    try:
        bound, out_types = infer_types(op, [v.type for v in inputs], attrs, regions)
    except Exception as e:
        e.add_note(f"while adding node {name or op} to graph {graph.name} on {', '.join(map(repr, inputs))}")
        raise
    return list(graph.add_node(op, inputs, bound, out_types, name=name, out_names=out_names, regions=regions).outputs)

"""Control flow from torch.export: the higher-order operators `torch.cond` and `torch.while_loop`,
as ember's `if` and `loop` (ember/ops/control.py).

torch.export gives each branch or body as a graph module of its own (a get_attr), whose
placeholders are the operands, the weights it uses among them. Each becomes a region
(ember.frontend.torch.importer.import_fx): operands that are constants (weights, folded tensors)
become the region's own constants, the others its inputs and inputs of the node (the captures).

    cond(pred, true_graph, false_graph, operands)  ->  if(pred, *operands) [then, else]
    while_loop(cond_graph, body_graph, carried, additional)
        -> loop(INT64_MAX, cond_graph(carried), *carried, *additional) [body]
           with body(i, c, *carried, *additional) = (cond_graph(new), *new),
           new = body_graph(*carried, *additional)
The condition of a while_loop is inlined twice: before the loop, on the initial values, and at
the end of the body, on the new ones (ember's loop reads it from its body).
"""

from __future__ import annotations

import numpy as np
import torch

from ....graph.core import Graph, TensorType, Value
from ....ops.control import inline
from ....ops.nodes import add_op
from ..importer import import_fx
from ..node import Builder, Const, value_name
from ..registry import handles

INT64_MAX = np.iinfo(np.int64).max


def _region(b: Builder, gm: torch.fx.GraphModule, operands: list, name: str) -> tuple[Graph, list[Value]]:
    """The graph module as a region: the operands that are constants become its constants, the
    others its inputs; and those operands, as values of the graph being built."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    constants = {p.name: x for p, x in zip(placeholders, operands, strict=True) if isinstance(x, Const)}
    region = import_fx(gm, constants, name=name, symbols=b.symbols)
    return region, [b.v(x) for x in operands if not isinstance(x, Const)]


@handles("cond", namespace="")
def cond(b: Builder, pred, true_graph, false_graph, operands):
    operands = list(operands)
    then, captured = _region(b, true_graph, operands, "then")
    other, _ = _region(b, false_graph, operands, "else")
    return tuple(add_op(b.graph, "if", [b.v(pred), *captured], out_names=[value_name(b.node.name)],
                        regions=[then, other]))


@handles("while_loop", namespace="")
def while_loop(b: Builder, cond_graph, body_graph, carried, additional):
    carried, additional = [b.v(x) for x in carried], list(additional)
    test, operands = _region(b, cond_graph, [*carried, *additional], "cond")
    step, _ = _region(b, body_graph, [*carried, *additional], "step")
    captured = operands[len(carried):]
    body = Graph(name="body")
    ins = [body.add_input("iteration", TensorType((), "int64")), body.add_input("cond", TensorType((), "bool"))]
    ins += [body.add_input(body.fresh_name(v.name), v.type) for v in [*carried, *captured]]
    new = inline(body, step, ins[2:])
    body.set_outputs([*inline(body, test, [*new, *ins[2 + len(carried):]]), *new])
    start = inline(b.graph, test, [*carried, *captured])
    trips = b.scalar(int(INT64_MAX), "int64")
    return tuple(add_op(b.graph, "loop", [trips, *start, *carried, *captured], {"carried": len(carried)},
                        out_names=[value_name(b.node.name)], regions=[body]))

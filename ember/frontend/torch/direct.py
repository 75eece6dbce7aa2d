"""Whether torch.export's trace converts as it is, without `run_decompositions`.

The decomposition to core ATen traces the whole program again (functionalization and make_fx
over fake tensors): the larger part of importing a module (BERT-base 1.0 s of CPU, ResNet-18
0.4 s on this project's 2-core AMD EPYC). The trace holds core ATen operators, the composites
that `module.KEEP` keeps whole anyway, and a few composites that converters/composite.py
converts into what their decomposition gives; what it adds is in-place operators, which the
decomposition makes functional. `convertible(ep)` holds when every operator has a handler (or
reads constants alone: folded, by torch if no handler has it), no higher-order operator (cond, while_loop) is
called, and every in-place operator writes a tensor that an operator made afresh (not a view)
and that nothing else reads (relu_ after a batch norm): then the out-of-place operator computes
what the in-place one leaves there, and every later reader reads the in-place node's result.
Anything else, or a conversion that fails, goes through the decomposition as before
(module._imported).
"""

from __future__ import annotations

import operator

import torch
from torch._ops import OpOverload
from torch.export.graph_signature import InputKind

from .importer import IGNORED
from .registry import lookup


def convertible(ep: torch.export.ExportedProgram) -> bool:
    """Whether the importer can take the trace's graph undecomposed (see the module's doc)."""
    return graph_convertible(ep.graph, {s.arg.name for s in ep.graph_signature.input_specs
                                        if s.kind != InputKind.USER_INPUT})


def graph_convertible(graph: torch.fx.Graph, constants: set[str]) -> bool:
    """`convertible` of a graph whose placeholders named in `constants` are constants (a
    recorded trace's: ember.frontend.torch.record)."""
    known = set(constants)
    for node in graph.nodes:
        if node.op == "get_attr" or node.op == "placeholder" and node.name in known or \
                node.op == "call_function" and all(x in known for x in node.all_input_nodes):
            known.add(node)  # (computed from constants alone: the importer folds it, by torch if no handler has it)
        if node.op == "call_function" and not _convertible(node, node in known):
            return False
    return True


def _convertible(node: torch.fx.Node, folded: bool) -> bool:
    target = node.target
    if not isinstance(target, OpOverload):
        return getattr(target, "__module__", None) == operator.getitem.__module__  # getitem, arithmetic on sizes
    name = str(target)
    if lookup(target) is None and name not in IGNORED and not name.startswith("aten.sym_") and not folded:
        return False
    return not target._schema.is_mutable or all(map(_fresh_and_private, _written(node)))


def _written(node: torch.fx.Node) -> list:
    """The arguments an in-place operator writes."""
    schema = node.target._schema
    return [node.args[k] if k < len(node.args) else node.kwargs.get(a.name)
            for k, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]


def _fresh_and_private(x) -> bool:
    """x was made by an operator whose result is no view of its inputs, and only this node reads it."""
    if not isinstance(x, torch.fx.Node) or x.op != "call_function" or not isinstance(x.target, OpOverload):
        return False
    return len(x.users) == 1 and all(r.alias_info is None for r in x.target._schema.returns)

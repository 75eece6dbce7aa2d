"""Converting a list of ONNX nodes (a model's graph, a subgraph of If, Loop or Scan): each by
the converter of its operator version (registry.py), or by its ONNX function body (functions.py)
where no converter takes it; what ember cannot convert is collected, the nodes that depend on it
(through their subgraphs too: `implicit_inputs`) skipped, and one UnsupportedOpError at the end
lists them all. The importer converts a model's graph with it, the control-flow converters their
subgraphs; the converters themselves are registered by the importer's import of converters/.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from ...ops import UnsupportedOpError
from . import structured
from .functions import DEFAULT_DOMAINS, function_body
from .node import ExpandInstead, Importer, NodeContext, Tensor, decode_attribute, op_version, tensor_type
from .registry import lookup

MIN_OPSET, MAX_OPSET = 7, onnx.defs.onnx_opset_version()


def convert_nodes(importer: Importer, nodes: Sequence[onnx.NodeProto], opset: int, env: dict[str, Tensor]) -> None:
    """Convert `nodes`, read in default-domain opset `opset`; one UnsupportedOpError at the end
    lists every node ember cannot convert."""
    missing: list[tuple[str, str]] = []
    importer.scope = env
    _convert(importer, nodes, opset, env, missing, set())
    if missing:
        raise UnsupportedOpError(missing)


def _convert(importer: Importer, nodes: Sequence[onnx.NodeProto], opset: int, env: dict[str, Tensor],
             missing: list[tuple[str, str]], skipped: set[str]) -> None:
    """Convert `nodes` into `env`, recording in `missing` what ember lacks and in `skipped` the
    values that depend on it."""
    for node in nodes:
        if any(name in skipped for name in [*node.input, *implicit_inputs(node)]):
            skipped.update(node.output)
            continue
        cx = NodeContext(importer, node, [env[name] if name else None for name in node.input],
                         {a.name: decode_attribute(a) for a in node.attribute}, opset)
        default = node.domain in DEFAULT_DOMAINS
        for k, t in enumerate(cx.inputs):
            if structured.is_structured(t) and not (default and node.op_type in structured.TAKES_STRUCTURED):
                raise cx.error(f"input {k} ({node.input[k]!r}) is {structured.describe(t)}; this operator takes "
                               "tensors")
        try:
            converter = lookup(node.op_type, cx.version, node.domain)
            if default and opset < MIN_OPSET and cx.version != op_version(node.op_type, MIN_OPSET):
                converter = None  # (an operator changed since: older than ember reads)
            try:
                outs = None if converter is None else converter(cx)
            except ExpandInstead:
                outs = None
            if outs is None:
                body = function_body(node, opset, [None if t is None else tensor_type(t) for t in cx.inputs]) \
                    if default else None
                if body is None:
                    raise UnsupportedOpError([(_unsupported_name(node, cx.version), cx.where)])
                _convert(importer, body.nodes, body.opset, env, missing, skipped)
                continue
        except UnsupportedOpError as e:
            missing.extend((op, where or cx.where) for op, where in e.missing)
            skipped.update(node.output)
            continue
        except Exception as e:
            e.add_note(f"while importing ONNX {cx.where}")
            raise
        for k, name in enumerate(node.output):
            if name:
                if k >= len(outs) or outs[k] is None:
                    raise cx.error(f"output {k} ({name!r}) is not supported")
                env[name] = outs[k]
                if isinstance(outs[k], np.ndarray):
                    importer.name_array(outs[k], name)


def _unsupported_name(node: onnx.NodeProto, version: int) -> str:
    """The op as an unsupported operator is listed: `Op`, or `Op-version` when ember converts
    its newest version but not this one; `domain.Op` outside the default domain."""
    if node.domain not in DEFAULT_DOMAINS:
        return f"{node.domain}.{node.op_type}"
    return f"{node.op_type}-{version}" if lookup(node.op_type, op_version(node.op_type, MAX_OPSET)) else node.op_type


def implicit_inputs(node: onnx.NodeProto) -> set[str]:
    """The names a node's subgraphs (and theirs) read from the enclosing scopes."""
    out: set[str] = set()
    for attr in node.attribute:
        for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
            defined = {vi.name for vi in g.input} | {t.name for t in g.initializer}
            for n in g.node:
                out |= {name for name in [*n.input, *implicit_inputs(n)] if name and name not in defined}
                defined |= set(n.output)
            out |= {vi.name for vi in g.output if vi.name not in defined}
    return out

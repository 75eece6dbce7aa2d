"""ONNX function operators ember has no converter for, expanded from their ONNX function bodies.

Many operators of the default domain are defined by ONNX as a function of simpler ones (their
schema has a function body: RMSNormalization, RotaryEmbedding, Attention, LayerNormalization,
Swish, ...; some bodies depend on the node, its attributes and input types: the context-dependent
functions). A node of such an op whose version ember does not convert itself is replaced by the
body's nodes, renamed apart (`function_body`), which the importer converts as any other nodes,
each read in the opset the body imports; an op of the body that is a function op again expands
in turn.

The body is the one ONNX defines for the newest opset not above the model's (a schema may hold
several: LayerNormalization has one for opset 17 and one for 18, where ReduceMean changed).
Attributes the body refers to (`ref_attr_name`) take the node's values, else the schema's
defaults; a subgraph attribute inside a body is copied as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from ...graph.core import TensorType

DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass(frozen=True)
class Body:
    """The nodes that replace a function op's node, and the default-domain opset they are read in."""

    nodes: tuple[onnx.NodeProto, ...]
    opset: int


def function_body(node: onnx.NodeProto, opset: int, input_types: Sequence[TensorType | None]) -> Body | None:
    """The function body of `node` (default domain) at `opset`, its values renamed apart and its
    inputs and outputs the node's; None when the op is not a function op there. `input_types`
    are the types of the node's inputs (None for one left out), which a context-dependent
    function is built for."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return None
    defaults = {name: a.default_value for name, a in schema.attributes.items() if a.default_value.name}
    called = onnx.NodeProto()
    called.CopyFrom(node)
    given = {a.name for a in node.attribute}
    called.attribute.extend(a for name, a in defaults.items() if name not in given)
    fixed = [v for v in schema.function_opset_versions if v <= opset]
    dependent = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    if fixed:
        data = schema.get_function_with_opset_version(max(fixed))
    elif dependent:
        types = [onnx.TypeProto() if t is None else _type_proto(t) for t in input_types]
        data = schema.get_context_dependent_function_with_opset_version(
            max(dependent), called.SerializeToString(), [t.SerializeToString() for t in types])
    else:
        return None
    function = onnx.FunctionProto.FromString(data)
    body_opset = next((o.version for o in function.opset_import if o.domain in DEFAULT_DOMAINS), opset)
    return Body(tuple(_expand(called, function)), body_opset)


def _type_proto(t: TensorType) -> onnx.TypeProto:
    try:
        elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype))
    except TypeError:  # a type NumPy lacks (bfloat16): by its ONNX name
        elem = onnx.TensorProto.DataType.Value(t.dtype.upper())
    return onnx.helper.make_tensor_type_proto(elem, list(t.shape))


def _expand(node: onnx.NodeProto, function: onnx.FunctionProto) -> list[onnx.NodeProto]:
    """The function's nodes with its formal inputs and outputs replaced by the node's actual ones
    and its other values prefixed by a name unique to the node."""
    prefix = f"{node.name or node.output[0]}/{node.op_type}/"
    names = {formal: (node.input[k] if k < len(node.input) else "") for k, formal in enumerate(function.input)}
    names.update({formal: node.output[k] for k, formal in enumerate(function.output)
                  if k < len(node.output) and node.output[k]})
    attrs = {a.name: a for a in node.attribute}

    def rename(name: str) -> str:
        return names.get(name, prefix + name if name else "")

    nodes = []
    for inner in function.node:
        new = onnx.NodeProto()
        new.CopyFrom(inner)
        new.name = prefix + (inner.name or inner.output[0])
        new.input[:] = [rename(n) for n in inner.input]
        new.output[:] = [rename(n) for n in inner.output]
        del new.attribute[:]
        for a in inner.attribute:
            if not a.ref_attr_name:
                new.attribute.append(a)
            elif a.ref_attr_name in attrs:
                ref = onnx.AttributeProto()
                ref.CopyFrom(attrs[a.ref_attr_name])
                ref.name = a.name
                new.attribute.append(ref)
        for a in new.attribute:  # subgraphs (an If in a body) read the body's values by their names
            for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                _rename_free(g, rename, set())
        nodes.append(new)
    return nodes


def _rename_free(graph: onnx.GraphProto, rename, bound: set[str]) -> None:
    """Rename, in place, the names `graph` (and its subgraphs) reads from enclosing scopes: those
    not in `bound` nor defined in it."""
    bound = bound | {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    for n in graph.node:
        n.input[:] = [x if not x or x in bound else rename(x) for x in n.input]
        for a in n.attribute:
            for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                _rename_free(g, rename, bound)
        bound |= set(n.output)
    for vi in graph.output:
        if vi.name not in bound:
            vi.name = rename(vi.name)

"""Runtime-valued inputs: a graph input whose value ember needs as a number at import (the `axes`
of a Reduce*, TopK's `k`, Pad's `pads`, Resize's `scales`, a Reshape target, ...).

Values computed from initializers and Constant nodes fold at import (node.py); a value that
arrives with the call cannot. `import_specialized(model, values)` imports the model *for* given
values of such inputs: they become constants (import_onnx(..., input_values=...)), everything
computed from them folds, and the graph takes the other inputs only. Which inputs those are is
found by importing: each ConstantInputError names the graph inputs the value it needed comes
from (`inputs`), and the import is retried with them made constants too. ember.compile builds a
SpecializedModel (ember.runtime.specialized) on this: one compiled model per distinct value.

Sequence and optional inputs are specialized the same way, on their structure rather than their
values (structured.py): `specialize(model, given)` imports the model for the structure of the
call's arguments and the values of its runtime-valued inputs at once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from ...graph.core import Graph, TensorType
from .importer import import_graph, load_model, value_type
from .node import ConstantInputError
from .structured import Layout, element_type, kind


@dataclass(frozen=True)
class Specialization:
    """The model imported for the call's arguments: its graph, the runtime-valued inputs made
    constants (ONNX names, in the model's order), and the layout of its outputs (sequences and
    optionals regrouped: structured.py)."""

    graph: Graph
    constant: tuple[str, ...]
    outputs: Layout


def specialize(model: str | os.PathLike | onnx.ModelProto, given: Mapping[str, object],
               inputs: Sequence[str] = ()) -> Specialization:
    """The model imported for `given` (ONNX input names to the call's arguments): each sequence
    or optional input for the structure of its argument (a list of arrays, None or an array:
    the length and every shape; then the tensor inputs for their shapes too), the runtime-valued
    inputs, starting from `inputs`, for their values. A value needed from an input that `given`
    does not give re-raises the error."""
    proto = load_model(model)
    kinds = structured_inputs(proto)
    # the elements' shapes are static (one dim_param may be another size in each element), so the
    # tensor inputs that may share their symbols are imported for their shapes too
    shapes = {n: _structure(x) if n in kinds else np.shape(x) for n, x in given.items()} if kinds else {}
    order = [vi.name for vi in proto.graph.input]
    names = set(inputs)
    while True:
        chosen = tuple(n for n in order if n in names)
        try:
            graph, layout = import_graph(proto, input_shapes=shapes, input_values={n: given[n] for n in chosen})
            return Specialization(graph, chosen, layout)
        except ConstantInputError as e:
            new = set(e.inputs) - names
            if not new or not new <= set(given) or new & set(kinds):
                raise
            names |= new


def import_specialized(model: str | os.PathLike | onnx.ModelProto, values: Mapping[str, np.ndarray],
                       inputs: Sequence[str] = ()) -> tuple[Graph, tuple[str, ...]]:
    """The graph of `model` with the runtime-valued inputs among `values` (ONNX input names to
    arrays) made constants, starting from `inputs`; and the names of those inputs, in the model's
    order (`specialize` for a model without sequences or optionals)."""
    s = specialize(model, values, inputs)
    return s.graph, s.constant


def _structure(x):
    """The input_shapes entry of a sequence or optional argument: a list of shapes, None, a shape."""
    if x is None:
        return None
    return [np.shape(e) for e in x] if isinstance(x, list | tuple) else np.shape(x)


def structured_inputs(proto: onnx.ModelProto) -> dict[str, str]:
    """The graph inputs that are sequences or optionals, by ONNX name, with their kind
    (structured.KINDS)."""
    out = {}
    for vi in proto.graph.input:
        k = kind(vi.type, f"graph input {vi.name!r}")
        if k != "tensor":
            out[vi.name] = k
    return out


def graph_inputs(proto: onnx.ModelProto) -> list[tuple[str, TensorType]]:
    """The inputs of the model that no initializer gives a value, by ONNX name, with their types
    (of a sequence or optional, of its elements: the declared shape, or () when it declares none)."""
    initialized = {i.name for i in proto.graph.initializer}
    out = []
    for vi in proto.graph.input:
        if vi.name in initialized:
            continue
        if vi.type.HasField("tensor_type"):
            out.append((vi.name, value_type(vi, "graph input")))
        else:
            dtype, shape = element_type(vi.type, f"graph input {vi.name!r}")
            out.append((vi.name, TensorType(tuple(d if isinstance(d, int) else f"{vi.name}_{k}"
                                                  for k, d in enumerate(shape or ())), dtype)))
    return out

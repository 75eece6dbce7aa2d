"""Runtime-valued inputs: a graph input whose value ember needs as a number at import (the `axes`
of a Reduce*, TopK's `k`, Pad's `pads`, Resize's `scales`, a Reshape target, ...).

Values computed from initializers and Constant nodes fold at import (node.py); a value that
arrives with the call cannot. `import_specialized(model, values)` imports the model *for* given
values of such inputs: they become constants (import_onnx(..., input_values=...)), everything
computed from them folds, and the graph takes the other inputs only. Which inputs those are is
found by importing: each ConstantInputError names the graph inputs the value it needed comes
from (`inputs`), and the import is retried with them made constants too. ember.compile builds a
SpecializedModel (ember.runtime.specialized) on this: one compiled model per distinct value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from ...graph.core import Graph, TensorType
from .importer import import_onnx, load_model, value_type
from .node import ConstantInputError


def import_specialized(model: str | os.PathLike | onnx.ModelProto, values: Mapping[str, np.ndarray],
                       inputs: Sequence[str] = ()) -> tuple[Graph, tuple[str, ...]]:
    """The graph of `model` with the runtime-valued inputs among `values` (ONNX input names to
    arrays) made constants, starting from `inputs`; and the names of those inputs, in the model's
    order. A value needed from an input that `values` does not give re-raises the error."""
    proto = load_model(model)
    order = [vi.name for vi in proto.graph.input]
    names = set(inputs)
    while True:
        chosen = tuple(n for n in order if n in names)
        try:
            return import_onnx(proto, input_values={n: values[n] for n in chosen}), chosen
        except ConstantInputError as e:
            new = set(e.inputs) - names
            if not new or not new <= set(values):
                raise
            names |= new


def graph_inputs(proto: onnx.ModelProto) -> list[tuple[str, TensorType]]:
    """The inputs of the model that no initializer gives a value, by ONNX name, with their types."""
    initialized = {i.name for i in proto.graph.initializer}
    return [(vi.name, value_type(vi, "graph input")) for vi in proto.graph.input if vi.name not in initialized]

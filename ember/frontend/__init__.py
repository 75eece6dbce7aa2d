"""Frontends: models of other frameworks as ember graphs.

- `ember.frontend.torch`: `import_module(model, example_inputs)`, an nn.Module through torch.export;
- `ember.frontend.onnx`: `import_onnx(path or ModelProto)`, ONNX models;
The torch.compile backend, which compiles what it imports, is a driver above the frontends:
`ember.torch_backend`.

The two frontends have the same shape: `importer.py`, the entry, walks the model's graph in
order and converts each node with the converter its registry (`registry.py`) holds for the
node's operator; `node.py` is what a converter sees (the node, its inputs, helpers that add
ember operators); `converters/` holds the converters, one module per family of operators.

Each frontend imports its framework only when it is used. `import_model` picks the frontend of a
model (the compiler, the tuner and the debugger take any of them).
"""

import os
import sys

from ..errors import ArgumentTypeError
from ..graph.core import Graph


def import_model(model, example_inputs=None, caller: str = "ember.compile", dynamic_shapes=None) -> Graph:
    """The graph of a Graph (as is), a torch.nn.Module (traced with `example_inputs`, and
    torch.export's `dynamic_shapes`; its constants views of the module's tensors, for a caller
    that compiles it at once: ember.frontend.torch.module.import_views), or an ONNX model (a path
    or a ModelProto); `caller` names the function in the errors."""
    torch, onnx = sys.modules.get("torch"), sys.modules.get("onnx")
    if dynamic_shapes is not None and not (torch is not None and isinstance(model, torch.nn.Module)):
        raise ArgumentTypeError(f"{caller}: dynamic_shapes is torch.export's specification, for a torch.nn.Module; "
                                "a Graph or an ONNX model has its symbolic dimensions in its types")
    if isinstance(model, Graph):
        return model
    if torch is not None and isinstance(model, torch.nn.Module):
        if example_inputs is None:
            raise ArgumentTypeError(f"{caller} of a torch.nn.Module needs example_inputs (a tuple of tensors)")
        from .torch.module import import_views

        return import_views(model, example_inputs, dynamic_shapes)
    if isinstance(model, str | os.PathLike) or (onnx is not None and isinstance(model, onnx.ModelProto)):
        from .onnx import import_onnx

        return import_onnx(model)
    raise ArgumentTypeError(f"{caller} takes a Graph, a torch.nn.Module, or an ONNX model (path or ModelProto), "
                            f"got {type(model).__name__}")


def __getattr__(name):
    if name == "import_module":
        from .torch import import_module

        return import_module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

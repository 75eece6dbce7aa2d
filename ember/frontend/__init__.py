"""Frontends: models of other frameworks as ember graphs.

- `ember.frontend.torch`: `import_module(model, example_inputs)`, an nn.Module through torch.export;
- `ember.frontend.onnx`: `import_onnx(path or ModelProto)`, ONNX models;
- `ember.frontend.torch_backend`: `ember_backend`, the torch.compile backend registered as "ember"
  (its module path is named by the `torch_dynamo_backends` entry point in pyproject.toml, which
  installed copies of ember keep: it stays where it is).

The two frontends have the same shape: `importer.py`, the entry, walks the model's graph in
order and converts each node with the converter its registry (`registry.py`) holds for the
node's operator; `node.py` is what a converter sees (the node, its inputs, helpers that add
ember operators); `converters/` holds the converters, one module per family of operators.

Each frontend imports its framework only when it is used.
"""


def __getattr__(name):
    if name == "import_module":
        from .torch import import_module

        return import_module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

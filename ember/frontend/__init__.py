"""Frontends: models of other frameworks as ember graphs.

- `ember.frontend.torch`: `import_module(model, example_inputs)`, an nn.Module through torch.export;
- `ember.frontend.torch_backend`: `ember_backend`, the torch.compile backend registered as "ember";
- `ember.frontend.onnx`: ONNX models.

Each frontend imports its framework only when it is used.
"""


def __getattr__(name):
    if name == "import_module":
        from .torch import import_module

        return import_module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

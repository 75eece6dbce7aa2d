"""The PyTorch frontend: `import_module(model, example_inputs) -> Graph`, through a trace of the module.

- module.py: the entry: the module's trace (one eager run recorded, record.py, or torch.export's,
  lowered to core ATen where the importer needs it), then imported;
- importer.py: an FX graph of core ATen operators converted node by node (shared with the
  torch.compile backend, ember.torch_backend);
- node.py: what a handler sees while one node is converted (`Builder`), constants as `Const`;
- registry.py: the table from ATen overloads to handlers (`@handles`);
- converters/: the handlers, one module per family (elementwise, nn, reduce, shape), imported
  here so that every handler is registered before any graph is imported.
"""

from . import converters  # noqa: F401 - registers the handlers before any import of a graph
from .module import export, import_module, import_program, trace_lock

__all__ = ["export", "import_module", "import_program", "trace_lock"]

"""The ONNX frontend: `import_onnx(path or ModelProto) -> Graph`.

- importer.py: the entry: loads and checks the model, then converts its graph node by node;
- node.py: what a converter sees while one node is converted (`NodeContext`), constants as arrays;
- registry.py: the table from ONNX op types and operator versions to converters (`@converts`);
- functions.py: function ops without a converter, expanded from their ONNX function bodies;
- values.py: runtime-valued inputs (axes, k, pads given as graph inputs): the model imported for
  given values of them (what ember.compile's per-value specialization imports);
- structured.py: sequences and optionals, resolved at import (the structure of such graph inputs
  given, as ember.compile's per-structure specialization does);
- converters/: the converters, one module per family (elementwise, nn, shape; legacy: the older
  forms of operators; fused: function ops as one ember operator; dynamic: output sizes decided
  by the data).

Every default-domain opset from 7 (MIN_OPSET) to the newest onnx knows (MAX_OPSET); docs/onnx.md.
"""

from .importer import MAX_OPSET, MIN_OPSET, import_graph, import_onnx, load_model, read_model
from .node import ConstantInputError, OnnxImportError
from .structured import StructureError

__all__ = ["MAX_OPSET", "MIN_OPSET", "ConstantInputError", "OnnxImportError", "StructureError", "import_graph",
           "import_onnx", "load_model", "read_model"]

"""The graph IR (typed SSA dataflow graph): ember.graph.core, printer/parser, verifier, serialization."""

from .core import Attrs, Graph, GraphError, Node, TensorType, Value

__all__ = ["Attrs", "Graph", "GraphError", "Node", "TensorType", "Value"]

"""The graph IR (typed SSA dataflow graph): ember.graph.core, printer/parser, verifier, serialization."""

from .core import Attrs, Graph, GraphError, Node, TensorType, Value
from .parser import parse_graph
from .printer import graph_to_text
from .serialize import graph_from_bytes, graph_to_bytes, load_graph, save_graph
from .verify import problems, verify

__all__ = ["Attrs", "Graph", "GraphError", "Node", "TensorType", "Value", "graph_from_bytes", "graph_to_bytes",
           "graph_to_text", "load_graph", "parse_graph", "problems", "save_graph", "verify"]

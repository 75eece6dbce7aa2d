"""Debugging a wrong result: which graph pass changes a model's output (bisect); seeing what the
compiler made of a graph (draw_graph: the graph with its kernels marked, as SVG or HTML)."""

from .bisect import BisectResult, Trial, bisect
from .draw import draw_graph

__all__ = ["BisectResult", "Trial", "bisect", "draw_graph"]

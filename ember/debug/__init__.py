"""Debugging a wrong result: which graph pass changes a model's output (bisect); which kernel's C
disagrees with its loop IR (bisect_kernels, with a repro folder); seeing what the compiler made
of a graph (draw_graph: the graph with its kernels marked, as SVG or HTML)."""

from .bisect import BisectResult, Trial, bisect
from .bisect_kernels import KernelBisectResult, KernelTrial, bisect_kernels
from .draw import draw_graph

__all__ = ["BisectResult", "KernelBisectResult", "KernelTrial", "Trial", "bisect", "bisect_kernels", "draw_graph"]

"""What the compiler refuses before it lowers anything, so that a model that cannot run fails at
compile time, naming the reason, rather than at its first call:

- a graph without outputs (nothing to compute: a torch module that returns an empty tuple, an
  ONNX graph that declares no output);
- operators ember does not know, in the regions of control flow too (UnsupportedOpError lists
  every one of them at once);
- a tensor larger than this machine's physical memory: every node output of static shape,
  checked before the graph passes run (so that no pass folding constants tries to build it; the
  frontends check a constant the same way, `check_fits`, before they fold it); then, once the
  memory plan is made, what one call needs at once: the weights, the workspace's peak and the
  outputs of static shape.

A tensor with symbolic dimensions has no size until a call binds them: the runtime reports an
allocation that fails (ember.runtime.model). Physical memory is SC_PHYS_PAGES * SC_PAGE_SIZE
(os.sysconf); where the platform does not tell, the size checks are skipped.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping

import numpy as np

from .errors import CompileError
from .graph.core import Graph, TensorType
from .ops.registry import UnsupportedOpError, exists
from .passes.plan_memory import MemoryPlan


def physical_memory() -> int | None:
    """This machine's physical memory in bytes, or None where os.sysconf does not tell."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def nbytes(t: TensorType) -> int | None:
    """The bytes of a tensor of static type `t` (None when a dimension is a symbol)."""
    return math.prod(t.shape) * np.dtype(t.dtype).itemsize if t.is_static else None  # (no int64 overflow)


def format_bytes(n: int) -> str:
    """n bytes for a person: 3.6 TiB, 512.0 MiB, 12 B."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def check_graph(graph: Graph) -> None:
    """The checks a graph must pass before its graph passes run (see the module doc)."""
    if not graph.outputs:
        raise CompileError(f"graph {graph.name} has no outputs: there is nothing to compute (a model must "
                           "return at least one tensor)")
    missing = [(n.op, n.name) for n in _nodes(graph) if not exists(n.op)]
    if missing:
        raise UnsupportedOpError(missing)
    memory = physical_memory()
    for n in _nodes(graph):
        for v in n.outputs:
            check_fits(v.type, f"graph {graph.name}: %{v.name} (node {n.name}: {n.op})", memory)


def _nodes(graph: Graph):
    """Every node, those of the regions of control-flow nodes too."""
    for n in graph.nodes:
        yield n
        for r in n.regions:
            yield from _nodes(r)


def check_fits(t: TensorType, what: str, memory: int | None = None) -> None:
    """Refuse a tensor of static type `t` larger than `memory` bytes (default: the machine's)."""
    memory = physical_memory() if memory is None else memory
    size = nbytes(t)
    if memory is not None and size is not None and size > memory:
        raise CompileError(f"{what} has shape {t.shape} ({t.dtype}): {format_bytes(size)}, more than this "
                           f"machine's memory ({format_bytes(memory)}); a tensor this large cannot be computed")


def check_model_fits(name: str, plan: MemoryPlan, weights: Mapping[str, np.ndarray],
                     outputs: Iterable[TensorType]) -> None:
    """Refuse a model whose weights, workspace peak and static outputs together exceed the
    machine's memory (the workspace of a plan with symbolic dimensions counts as empty)."""
    memory = physical_memory()
    if memory is None:
        return
    peak = 0 if plan.symbols else plan.layout().peak_bytes
    weight_bytes = sum(a.nbytes for a in weights.values())
    output_bytes = sum(nbytes(t) or 0 for t in outputs)
    if peak + weight_bytes + output_bytes > memory:
        raise CompileError(f"model '{name}' needs {format_bytes(peak + weight_bytes + output_bytes)} to run, more "
                           f"than this machine's memory ({format_bytes(memory)}): weights "
                           f"{format_bytes(weight_bytes)}, workspace peak {format_bytes(peak)}, outputs "
                           f"{format_bytes(output_bytes)}")

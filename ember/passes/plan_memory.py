"""Memory planning: where each intermediate tensor of a compiled model lives in its one workspace.

The kernels of a model run in a fixed order, one step each (today one per node, in graph order).
A tensor in the workspace is live from the step that writes it to the last step that reads it,
both included, so a kernel's inputs and outputs never share bytes (kernels take `restrict`
pointers). Two tensors whose lifetimes do not overlap may share bytes.

Offsets: greedy by size (Pisarchyk & Lee 2020, "Efficient Memory Management for Deep Neural Net
Inference", offset calculation). Tensors are placed from the largest to the smallest; each goes
into the smallest gap, between the tensors already placed whose lifetimes overlap its own, that
holds it, or above the highest of them when none does. Sizes are rounded up to ALIGN bytes, so
every offset is ALIGN-aligned. The plan's peak (the workspace size) is compared with the unplanned
sum (one buffer per tensor) in `Layout`.

Graph inputs, graph outputs and constants are not in the workspace: the caller's arrays and the
weights hold them. Dimensions may be symbols: `plan_memory` records each tensor's shape and
lifetime, and `MemoryPlan.layout(symbols)` computes the offsets for one binding of the symbols.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError
from ..graph.core import Dim, Graph

ALIGN = 64  # bytes: one cache line, one AVX-512 register


@dataclass(frozen=True)
class WorkspaceTensor:
    """A tensor that lives in the workspace from step `first` to step `last` (both included)."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str
    first: int
    last: int

    def nbytes(self, symbols: Mapping[str, int]) -> int:
        """Its size in bytes, rounded up to ALIGN, for this binding of the symbols."""
        numel = 1
        for d in self.shape:
            if isinstance(d, str):
                if d not in symbols:
                    raise ShapeError(f"the size of workspace tensor {self.name} needs symbol {d!r}, which is "
                                     f"not bound (bound: {dict(symbols)})")
                d = symbols[d]
            numel *= int(d)
        return -(-numel * np.dtype(self.dtype).itemsize // ALIGN) * ALIGN


@dataclass(frozen=True)
class Layout:
    """The workspace of one binding of the symbols: an offset per tensor (in plan order)."""

    offsets: tuple[int, ...]
    peak_bytes: int  # the workspace size
    unplanned_bytes: int  # what one buffer per tensor would take


@dataclass(frozen=True)
class MemoryPlan:
    tensors: tuple[WorkspaceTensor, ...]

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d for t in self.tensors for d in t.shape if isinstance(d, str)))

    def index(self, name: str) -> int:
        """The position of a tensor in the plan (and in `Layout.offsets`)."""
        for k, t in enumerate(self.tensors):
            if t.name == name:
                return k
        raise KeyError(f"{name} is not in the workspace")

    def layout(self, symbols: Mapping[str, int] | None = None) -> Layout:
        sizes = [t.nbytes(symbols or {}) for t in self.tensors]
        offsets, peak = greedy_by_size(sizes, [(t.first, t.last) for t in self.tensors])
        return Layout(tuple(offsets), peak, sum(sizes))

    def to_json(self) -> list[dict]:
        return [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "first": t.first, "last": t.last}
                for t in self.tensors]

    @classmethod
    def from_json(cls, data: Sequence[Mapping]) -> MemoryPlan:
        return cls(tuple(WorkspaceTensor(d["name"], tuple(d["shape"]), d["dtype"], d["first"], d["last"])
                         for d in data))


def plan_memory(graph: Graph) -> MemoryPlan:
    """The workspace tensors of `graph` (every node output that is not a graph output), with
    their lifetimes over the node order."""
    outputs = {id(v) for v in graph.outputs}
    last_use: dict[int, int] = {}
    for step, node in enumerate(graph.nodes):
        for v in node.inputs:
            last_use[id(v)] = step
    tensors = [
        WorkspaceTensor(v.name, v.shape, v.dtype, step, last_use.get(id(v), step))
        for step, node in enumerate(graph.nodes) for v in node.outputs if id(v) not in outputs
    ]
    return MemoryPlan(tuple(tensors))


def greedy_by_size(sizes: Sequence[int], lifetimes: Sequence[tuple[int, int]]) -> tuple[list[int], int]:
    """Offsets for tensors of these sizes (bytes) and lifetimes ((first, last) steps), such that
    no two tensors live at the same step overlap; and the total size. Sizes should be multiples
    of the alignment wanted for the offsets."""
    n = len(sizes)
    # the tensors each one shares a step with, by a sweep over the first steps
    overlaps: list[list[int]] = [[] for _ in range(n)]
    active: list[int] = []
    for t in sorted(range(n), key=lambda k: lifetimes[k][0]):
        active = [u for u in active if lifetimes[u][1] >= lifetimes[t][0]]
        for u in active:
            overlaps[t].append(u)
            overlaps[u].append(t)
        active.append(t)
    offsets: list[int | None] = [None] * n
    peak = 0
    for t in sorted(range(n), key=lambda k: (-sizes[k], k)):
        best, best_gap, top = None, None, 0
        for offset, u in sorted((offsets[u], u) for u in overlaps[t] if offsets[u] is not None):
            gap = offset - top
            if gap >= sizes[t] and (best_gap is None or gap < best_gap):
                best, best_gap = top, gap
            top = max(top, offset + sizes[u])
        offsets[t] = top if best is None else best
        peak = max(peak, offsets[t] + sizes[t])
    return offsets, peak

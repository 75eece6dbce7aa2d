"""Memory planning: where each intermediate tensor of a compiled model lives in its one workspace.

The kernels of a model run in a fixed order, one step each (one per node of the graph planned: the
compiler's graph of kernels, ember.compiler). A tensor in the workspace is live from the step that
writes it to the last step that reads it, both included, so a kernel's inputs and outputs never
share bytes (kernels take `restrict` pointers), but for two exceptions, where a tensor takes the
bytes of another (`WorkspaceTensor.shares`) and the buffer they share lives as long as the two:
- a node of op VIEW runs nothing: its output is its input's bytes under another shape (a reshape
  of a contiguous buffer). A view of a graph input, constant or output is those bytes, outside
  the workspace; a view is never a graph output itself (the compiler copies those);
- a node may write an output over an input (attribute `in_place`: pairs of output and input
  positions, where the compiler's kernel computes each output element from the input element at
  the same place): it does when the input is a workspace tensor of the output's type whose buffer
  nothing reads after this node, nor through another of the node's inputs (a view of it).
Two buffers whose lifetimes do not overlap may share bytes.

Offsets: greedy by size (Pisarchyk & Lee 2020, "Efficient Memory Management for Deep Neural Net
Inference", offset calculation). Buffers are placed from the largest to the smallest; each goes
into the smallest gap, between the buffers already placed whose lifetimes overlap its own, that
holds it, or above the highest of them when none does. Sizes are rounded up to ALIGN bytes, so
every offset is ALIGN-aligned. The plan's peak (the workspace size) is compared with the unplanned
sum (one buffer per tensor, views and in-place outputs included) in `Layout`.

Graph inputs, graph outputs and constants are not in the workspace: the caller's arrays and the
weights hold them. Dimensions may be symbols: `plan_memory` records each tensor's shape and
lifetime, and `MemoryPlan.layout(symbols)` computes the offsets for one binding of the symbols.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ShapeError
from ..graph.core import Dim, Graph, Value

ALIGN = 64  # bytes: one cache line, one AVX-512 register
VIEW = "view"  # the op of a node that runs nothing: its output is its input's bytes


@dataclass(frozen=True)
class WorkspaceTensor:
    """A tensor that lives in the workspace from step `first` to step `last` (both included)."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str
    first: int
    last: int
    shares: str | None = None  # the tensor whose bytes it takes (a view of it, or written over it)

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
        owner = {t.name: k for k, t in enumerate(self.tensors) if t.shares is None}
        of = [owner[t.shares if t.shares is not None else t.name] for t in self.tensors]
        buffers = list(owner.values())
        size = {b: 0 for b in buffers}
        life = {b: (self.tensors[b].first, self.tensors[b].last) for b in buffers}
        for k, t in enumerate(self.tensors):
            b = of[k]
            size[b] = max(size[b], sizes[k])
            life[b] = (min(life[b][0], t.first), max(life[b][1], t.last))
        offsets, peak = greedy_by_size([size[b] for b in buffers], [life[b] for b in buffers])
        at = dict(zip(buffers, offsets))
        return Layout(tuple(at[b] for b in of), peak, sum(sizes))

    def to_json(self) -> list[dict]:
        return [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "first": t.first, "last": t.last,
                 **({"shares": t.shares} if t.shares is not None else {})} for t in self.tensors]

    @classmethod
    def from_json(cls, data: Sequence[Mapping]) -> MemoryPlan:
        return cls(tuple(WorkspaceTensor(d["name"], tuple(d["shape"]), d["dtype"], d["first"], d["last"],
                                         d.get("shares")) for d in data))


def plan_memory(graph: Graph) -> MemoryPlan:
    """The workspace tensors of `graph` (every node output that is not a graph output, nor a view
    of something outside the workspace), with their lifetimes over the node order and the tensor
    whose bytes each takes, if any (see the module doc)."""
    outputs = {id(v) for v in graph.outputs}
    last_use: dict[int, int] = {}
    for step, node in enumerate(graph.nodes):
        for v in node.inputs:
            last_use[id(v)] = step
    owner: dict[int, Value] = {}  # workspace value -> the one whose buffer it is in
    buffer_last: dict[int, int] = {}  # buffer (its owner) -> the last step that reads it so far
    tensors = []

    def place(v: Value, step: int, into: Value | None) -> None:
        owner[id(v)] = into or v
        last = last_use.get(id(v), step)
        buffer_last[id(into or v)] = max(buffer_last.get(id(into or v), last), last)
        tensors.append(WorkspaceTensor(v.name, v.shape, v.dtype, step, last, into.name if into else None))

    for step, node in enumerate(graph.nodes):
        if node.op == VIEW:
            (x,), (y,) = node.inputs, node.outputs
            if id(y) in outputs:
                raise ValueError(f"view {node.name}: its output %{y.name} is a graph output, which needs a copy")
            if id(x) in owner:  # else a view of an input, a constant or an output: outside the workspace
                place(y, step, owner[id(x)])
            continue
        pairs = dict(node.attrs.get("in_place", ()))  # output position -> input position
        taken = set()
        for k, y in enumerate(node.outputs):
            if id(y) in outputs:
                continue
            x = node.inputs[pairs[k]] if k in pairs else None
            into = owner.get(id(x)) if x is not None and x.type == y.type else None
            others = {id(owner[id(v)]) for v in node.inputs if v is not x and id(v) in owner}  # read elsewhere
            if into is None or buffer_last[id(into)] > step or id(into) in taken | others:
                into = None
            else:
                taken.add(id(into))
            place(y, step, into)
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

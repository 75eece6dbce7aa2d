"""Memory planning: where each intermediate tensor of a compiled model lives in its one workspace.

A pass over the model's kernel graph (`KernelGraph`): the steps the model runs, in order, each a
kernel that reads its inputs and writes its outputs, or a view. `kernel_graph(fused)` makes it
from the fused graph (ember.passes.fuse): a group of reshapes alone (VIEW_OPS) of one value makes
no kernel, its output is that value's bytes under another shape (a view); when such a group is a
graph output, the kernel that makes the value it views writes the output's bytes instead
(`KernelGraph.written_as`), or, where that cannot be (the value is an input, a constant, an output
or is viewed so already), the group stays a kernel that copies. A kernel may write its output over
an input of its type that only elementwise operators read, up to the output (`Step.in_place`: an
elementwise chain, a residual add in a conv's or gemm's epilogue, a cache update: tensor_scatter).
A group that is one concat whose inputs are contiguous slabs of its output (the dimensions
before the axis are ones: NCHW channels at batch 1), each at an offset the alignment divides and
made by a kernel (or by such a concat: DenseNet's nested ones), is a view too (`Step.slabs`): the
kernels that make its inputs write them into its bytes (`WorkspaceTensor.at`), and no copy runs.

A tensor in the workspace is live from the step that writes it to the last step that reads it,
both included, so a kernel's inputs and outputs never share bytes (kernels take `restrict`
pointers), but for two exceptions, where a tensor takes the bytes of another
(`WorkspaceTensor.shares`) and the buffer they share lives as long as the two:
- a view runs nothing: its output is its input's bytes under another shape (a reshape of a
  contiguous buffer). A view of a graph input, constant or output is those bytes, outside the
  workspace; a view is never a graph output itself (see above);
- the inputs of a concat written in place are slabs of its buffer (`at`: where each starts), and
  its bytes are never written over in place (`in_place` below) while it lives;
- a kernel may write an output over an input (`in_place`: pairs of output and input positions,
  where the kernel computes each output element from the input element at the same place): it
  does when the input is a workspace tensor of the output's type whose buffer nothing reads after
  this step, nor through another of the step's inputs (a view of it).
Two buffers whose lifetimes do not overlap may share bytes.

Offsets: greedy by size (Pisarchyk & Lee 2020, "Efficient Memory Management for Deep Neural Net
Inference", offset calculation). Buffers are placed from the largest to the smallest; each goes
into the smallest gap, between the buffers already placed whose lifetimes overlap its own, that
holds it, or above the highest of them when none does. Sizes are rounded up to the target's
alignment (`MemoryPlan.align`, ember.target.Target.align), so every offset is aligned. The plan's
peak (the workspace size) is compared with the unplanned sum (one buffer per tensor, views and
in-place outputs included) in `Layout`.

Control flow (ember.ops.control): a step that runs an `if` or a `loop` holds its regions as
kernel graphs of their own (`Step.regions`, each region fused on its own). Its steps are numbered
inside the span of the control step, after it, so one plan covers every level: the node's inputs
live to the end of the span, its outputs from its start, and a region's tensors (named
`<node>/<region>/<name>`, Graph.all_constants' keys) only within it. A region's inputs and outputs
are not in its workspace: the enclosing level says where they are. A branch writes the `if`'s
outputs; a loop's carried values are double-buffered between the loop's outputs and
`<node>/next<k>` tensors (k = 0: the body's condition), live over the whole span, which the body
reads and writes in turn (ember.codegen.entry); the scan outputs go straight into their slice of
the loop's outputs. A body tensor lives within one iteration, so reusing its bytes across iterations is safe.

Graph inputs, graph outputs and constants are not in the workspace: the caller's arrays and the
weights hold them. Dimensions may be symbols: `plan_memory` records each tensor's shape and
lifetime, and `MemoryPlan.layout(symbols)` computes the offsets for one binding of the symbols;
`MemoryPlan.bounded(upper)` the offsets at the symbols' upper bounds, which serve every binding
under which no tensor is larger (its buffer there holds it; lifetimes do not depend on sizes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .. import dims
from ..graph.core import Dim, Graph, Node, Value, region_key
from ..ops.tensor_scatter import SAME_PLACE
from ..target import Target
from .fuse import BROADCAST, VIEW_OPS, FusedGraph, Group, fuse, kind, slab_offsets


@dataclass(frozen=True, eq=False)
class Step:
    """One step of a model's run: a kernel that reads `inputs` and writes `outputs`, and may
    write output k over input i for each (k, i) of `in_place`; or a view (`view`), which runs
    nothing: its one output is its one input's bytes under another shape."""

    name: str
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    view: bool = False
    in_place: tuple[tuple[int, int], ...] = ()
    group: Group | None = None  # the fused group it computes
    # a view that concatenates (a concat written in place): input k is the output's bytes from
    # byte slabs[k], where the kernel that makes it wrote it
    slabs: tuple[int, ...] = ()
    regions: tuple[KernelGraph, ...] = ()  # a control-flow node's regions (its group's one node)

    @property
    def control(self) -> Node | None:
        """The control-flow node this step runs, if it runs one."""
        return self.group.nodes[0] if self.regions else None

    @property
    def span(self) -> int:
        """The step numbers it takes in a memory plan: itself, then its regions' steps."""
        return 1 + sum(r.span for r in self.regions)


@dataclass(frozen=True, eq=False)
class KernelGraph:
    """A model as the steps it runs, in order; `graph` gives its inputs, constants and outputs.
    `written_as`: (value, output position) for each value that a graph output views: the kernel
    that makes the value writes it into the output's bytes (no step makes the view)."""

    graph: Graph
    steps: tuple[Step, ...]
    written_as: tuple[tuple[Value, int], ...] = ()

    @property
    def kernels(self) -> list[Group]:
        """The groups that run a kernel, in order, those of the regions too (where they run)."""
        out = []
        for s in self.steps:
            if s.regions:
                out += [g for r in s.regions for g in r.kernels]
            elif not s.view:
                out.append(s.group)
        return out

    @property
    def span(self) -> int:
        return sum(s.span for s in self.steps)


def kernel_graph(fused: FusedGraph, cut: Callable[[Graph], FusedGraph] = fuse,
                 align: int = Target.align) -> KernelGraph:
    """The steps of a fused graph: a view for each group of reshapes alone that is not a graph
    output and for each concat its inputs' kernels write in place (slabs `align` bytes apart), a
    kernel for every other group but those an output views (see the module doc); a control-flow
    node's regions cut into groups by `cut` (the fusion of the enclosing graph)."""
    views, output_views = _views(fused)
    concats = _concats_in_place(fused, views, output_views, align)
    steps = tuple(Step(f"view{k}", g.inputs, g.outputs, view=True, group=g, slabs=concats[id(g)])
                  if id(g) in concats else
                  Step(f"view{k}", g.inputs, g.outputs, view=True, group=g) if g in views else
                  Step(f"kernel{k}", g.inputs, g.outputs, in_place=_in_place(g), group=g,
                       regions=tuple(kernel_graph(cut(r), cut, align) for r in g.nodes[0].regions))
                  for k, g in enumerate(fused.groups) if g not in output_views.values())
    position = {}
    for k, v in enumerate(fused.graph.outputs):
        position.setdefault(id(v), k)
    written_as = tuple((g.inputs[0], position[id(g.outputs[0])]) for g in output_views.values())
    return KernelGraph(fused.graph, steps, written_as)


def _views(fused: FusedGraph) -> tuple[set[Group], dict[int, Group]]:
    """The groups that make no kernel, reshapes alone (VIEW_OPS) of one value: its bytes under
    another shape. Those that are graph outputs, by the id of the value they view: that value's
    kernel writes the output's bytes, which needs it made by a kernel and no graph output itself
    (else a kernel copies)."""
    def reshapes(g: Group) -> bool:
        return all(n.op in VIEW_OPS for n in g.nodes) and len(g.inputs) == len(g.outputs) == 1

    made_by_kernel = {id(v) for g in fused.groups if not reshapes(g) for v in g.outputs}
    outputs = {id(v) for v in fused.graph.outputs}
    views, output_views = set(), {}
    for g in filter(reshapes, fused.groups):
        x, y = g.inputs[0], g.outputs[0]
        if id(y) not in outputs:
            views.add(g)
        elif id(x) in made_by_kernel and id(x) not in outputs and id(x) not in output_views:
            output_views[id(x)] = g
    return views, output_views


def _concats_in_place(fused: FusedGraph, views: set[Group], output_views: dict[int, Group],
                      align: int) -> dict[int, tuple[int, ...]]:
    """The groups that are one concat whose inputs the kernels that make them write into the
    concat's bytes (DenseNet's blocks: no copy), by id, with each input's byte offset: each input
    is a contiguous slab of the output (the dimensions before the axis are ones, every size is
    static), at an offset the alignment divides; made by a kernel of this level or by such a
    concat (nested ones, one buffer), of the output's dtype, no graph output nor written as one,
    and taken by no other concat."""
    outputs = {id(v) for v in fused.graph.outputs}
    written = set(output_views)
    made = {id(v) for g in fused.groups if g not in views and g not in output_views.values()
            and not g.nodes[0].regions for v in g.outputs}
    taken: set[int] = set()
    found = {}
    for g in fused.groups:
        if len(g.nodes) != 1 or g.nodes[0].op != "concat" or id(g.outputs[0]) in outputs | written:
            continue
        xs, y = g.nodes[0].inputs, g.outputs[0]
        slabs = slab_offsets(xs, y, g.nodes[0].attrs["axis"], align)
        ids = [id(x) for x in xs]
        if slabs is None or len(set(ids)) != len(ids) or any(
                k not in made or k in taken | outputs | written for k in ids):
            continue
        taken.update(ids)
        found[id(g)] = slabs
    return found


def _in_place(group: Group) -> tuple[tuple[int, int], ...]:
    """(output, input) positions a group may write in place: its one output over an input of its
    type that only elementwise operators read, up to the output (an elementwise chain, a conv or
    gemm epilogue's residual add), or operators that read it only at the output element's place
    (SAME_PLACE: a cache update), so that each output element is computed from the element at the
    same place, read before it is written."""
    if len(group.outputs) != 1:
        return ()
    out = group.outputs[0]
    pairs = []
    for k, x in enumerate(group.inputs):
        reached = {id(x)}
        for n in group.nodes:
            reads = [j for j, v in enumerate(n.inputs) if id(v) in reached]
            if reads:
                if kind(n) > BROADCAST and not set(reads) <= set(SAME_PLACE.get(n.op, ())):
                    break
                reached.update(id(v) for v in n.outputs)
        else:
            if x.type == out.type and id(out) in reached:
                pairs.append((0, k))
    return tuple(pairs)


@dataclass(frozen=True)
class WorkspaceTensor:
    """A tensor that lives in the workspace from step `first` to step `last` (both included)."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str
    first: int
    last: int
    shares: str | None = None  # the tensor whose bytes it takes (a view of it, or written over it)
    at: int = 0  # where in those bytes it starts (a slab of a concat written in place)

    def nbytes(self, symbols: Mapping[str, int], align: int) -> int:
        """Its size in bytes, rounded up to `align`, for this binding of the symbols."""
        numel = 1
        for d in self.shape:
            numel *= dims.evaluate(d, symbols, f"a dimension of workspace tensor {self.name}")
        return -(-numel * np.dtype(self.dtype).itemsize // align) * align


@dataclass(frozen=True)
class Layout:
    """The workspace of one binding of the symbols: an offset per tensor (in plan order)."""

    offsets: tuple[int, ...]
    peak_bytes: int  # the workspace size
    unplanned_bytes: int  # what one buffer per tensor would take


@dataclass(frozen=True)
class BoundedLayout:
    """A layout made at the symbols' upper bounds (MemoryPlan.bounded): each tensor keeps its
    bytes there for any binding that makes it no larger, so one layout serves every call in
    range, not one per binding (a decode step's cache length is new at every step)."""

    layout: Layout
    sized: tuple[tuple[WorkspaceTensor, int], ...]  # the symbolic tensors, and their bytes at the bounds
    align: int

    def holds(self, symbols: Mapping[str, int]) -> bool:
        return all(t.nbytes(symbols, self.align) <= n for t, n in self.sized)


@dataclass(frozen=True)
class MemoryPlan:
    tensors: tuple[WorkspaceTensor, ...]
    align: int = Target.align  # bytes every tensor's offset is a multiple of: the target's

    @property
    def symbols(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s for t in self.tensors for d in t.shape for s in dims.symbols_of(d)))

    def index(self, name: str) -> int:
        """The position of a tensor in the plan (and in `Layout.offsets`)."""
        for k, t in enumerate(self.tensors):
            if t.name == name:
                return k
        raise KeyError(f"{name} is not in the workspace")

    def layout(self, symbols: Mapping[str, int] | None = None) -> Layout:
        sizes = [t.nbytes(symbols or {}, self.align) for t in self.tensors]
        owner = {t.name: k for k, t in enumerate(self.tensors) if t.shares is None}
        of = [owner[t.shares if t.shares is not None else t.name] for t in self.tensors]
        buffers = list(owner.values())
        size = {b: 0 for b in buffers}
        life = {b: (self.tensors[b].first, self.tensors[b].last) for b in buffers}
        for k, t in enumerate(self.tensors):
            b = of[k]
            size[b] = max(size[b], t.at + sizes[k])
            life[b] = (min(life[b][0], t.first), max(life[b][1], t.last))
        offsets, peak = greedy_by_size([size[b] for b in buffers], [life[b] for b in buffers])
        at = dict(zip(buffers, offsets))
        return Layout(tuple(at[b] + t.at for b, t in zip(of, self.tensors)), peak, sum(sizes))

    def bounded(self, upper: Mapping[str, int], limit: int) -> BoundedLayout | None:
        """The layout at the symbols' upper bounds, which holds every binding under which no
        tensor is larger (`BoundedLayout.holds`), where its workspace is at most `limit` bytes."""
        layout = self.layout(upper)
        if layout.peak_bytes > limit:
            return None
        sized = tuple((t, t.nbytes(upper, self.align)) for t in self.tensors
                      if any(not isinstance(d, int) for d in t.shape))
        return BoundedLayout(layout, sized, self.align)

    def to_json(self) -> list[dict]:
        return [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "first": t.first, "last": t.last,
                 **({"shares": t.shares} if t.shares is not None else {}), **({"at": t.at} if t.at else {})}
                for t in self.tensors]

    @classmethod
    def from_json(cls, data: Sequence[Mapping], align: int = Target.align) -> MemoryPlan:
        return cls(tuple(WorkspaceTensor(d["name"], tuple(d["shape"]), d["dtype"], d["first"], d["last"],
                                         d.get("shares"), d.get("at", 0)) for d in data), align)


def plan_memory(kernels: KernelGraph, align: int = Target.align) -> MemoryPlan:
    """The workspace tensors of a kernel graph (every step's output that is not a graph output,
    nor written as one, nor a view of something outside the workspace), with their lifetimes over
    the steps and the tensor whose bytes each takes, if any; those of its regions too (see the
    module doc), for a target's alignment."""
    tensors: list[WorkspaceTensor] = []
    _plan(kernels, 0, "", tensors)
    return MemoryPlan(tuple(tensors), align)


def next_name(prefix: str, node: Node, k: int) -> str:
    """The workspace tensor of a loop's body output k: its condition (k = 0), or the second buffer
    of carried value k - 1 (the first is the loop's output)."""
    return f"{prefix}{node.name}/next{k}"


def _plan(kernels: KernelGraph, start: int, prefix: str, tensors: list[WorkspaceTensor]) -> None:
    """Plan one level: its steps numbered from `start`, its tensors named with `prefix`."""
    outputs = {id(v) for v in kernels.graph.outputs} | {id(v) for v, _ in kernels.written_as}
    at, end = [], []  # each step's first and last step number
    for node in kernels.steps:
        at.append(end[-1] + 1 if end else start)
        end.append(at[-1] + node.span - 1)
    last_use: dict[int, int] = {}
    for k, node in enumerate(kernels.steps):
        for v in node.inputs:
            last_use[id(v)] = end[k]
    owner: dict[int, Value] = {}  # workspace value -> the one whose buffer it is in
    start_at: dict[int, int] = {}  # workspace value -> where in its buffer it starts
    buffer_last: dict[int, int] = {}  # buffer (its owner) -> the last step that reads it so far
    slab = {id(x): (s.outputs[0], b) for s in kernels.steps for x, b in zip(s.inputs, s.slabs)}
    pinned = {id(s.outputs[0]) for s in kernels.steps if s.slabs}  # concat buffers: never written over

    def slot(v: Value) -> tuple[Value, int]:
        """The outermost concat written in place that holds v, and where in it v starts."""
        offset = 0
        while id(v) in slab:
            v, b = slab[id(v)]
            offset += b
        return v, offset

    def place(v: Value, step: int, into: Value | None, last: int = -1, offset: int = 0) -> None:
        owner[id(v)] = into or v
        start_at[id(v)] = offset
        last = max(last_use.get(id(v), step), last)
        buffer_last[id(into or v)] = max(buffer_last.get(id(into or v), last), last)
        tensors.append(WorkspaceTensor(prefix + v.name, v.shape, v.dtype, step, last,
                                       prefix + into.name if into else None, offset))

    for k, node in enumerate(kernels.steps):
        step = at[k]
        if node.slabs or (not node.view and not node.regions and any(id(y) in slab for y in node.outputs)):
            for y in node.outputs:  # a slab of a concat (or the concat itself): in its buffer
                if id(y) in slab:
                    root, offset = slot(y)
                    place(y, step, root, offset=offset)
                elif id(y) not in outputs:
                    place(y, step, None)
            continue
        if node.view:
            (x,), (y,) = node.inputs, node.outputs
            if id(y) in outputs:
                raise ValueError(f"view {node.name}: its output %{y.name} is a graph output, which needs a copy")
            if id(x) in owner:  # else a view of an input, a constant or an output: outside the workspace
                place(y, step, owner[id(x)], offset=start_at[id(x)])
            continue
        if node.regions:
            cf = node.control
            for y in node.outputs:
                if id(y) not in outputs:
                    place(y, step, None, end[k])
            if cf.op == "loop":
                body = cf.regions[0]
                tensors.extend(WorkspaceTensor(next_name(prefix, cf, j), v.shape, v.dtype, step, end[k])
                               for j, v in enumerate(body.outputs[:1 + cf.attrs["carried"]]))
            first = step + 1
            for r, region in enumerate(node.regions):
                _plan(region, first, region_key(prefix, cf.name, r), tensors)
                first += region.span
            continue
        pairs = dict(node.in_place)  # output position -> input position
        taken = set()
        for j, y in enumerate(node.outputs):
            if id(y) in outputs:
                continue
            x = node.inputs[pairs[j]] if j in pairs else None
            into = owner.get(id(x)) if x is not None and x.type == y.type else None
            others = {id(owner[id(v)]) for v in node.inputs if v is not x and id(v) in owner}  # read elsewhere
            if into is None or buffer_last[id(into)] > step or id(into) in taken | others | pinned:
                into = None
            else:
                taken.add(id(into))
            place(y, step, into)


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

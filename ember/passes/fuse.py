"""Operator fusion: the nodes of a graph grouped into kernels by pattern kind (TVM's FuseOps).

    fused = fuse(graph)   # FusedGraph(graph, groups): the graph as it is, and its groups in run order

Not a Graph -> Graph pass: fusion decides how the compiler cuts the graph into kernels, so the
compiler applies it after the pipeline (at opt_level >= FUSE_LEVEL, unless "fuse" is disabled).

The algorithm, after TVM (src/relay/transforms/fuse_ops.cc):
1. The post-dominator tree of the nodes: the immediate post-dominator of a node is the nearest
   node that every path from it to the graph's outputs passes through (the lowest common
   ancestor, in the tree, of its users). A node whose output is a graph output, or unused, has
   none: its value must reach memory anyway.
2. Every node starts in a group of its own. In graph order, a node's group is merged into the
   group of its post-dominator D, with every node on the paths between them, when the paths
   allow it (each group has a pattern, the highest kind of its nodes; at most one anchor or
   one reduction, never both; at most MAX_GROUP_NODES nodes):
   - an out_elementwise_fusable node (conv, matmul: the anchor) when every node on the paths,
     D included, is elementwise, broadcast or a reshape, and keeps the anchor's shape up to
     dimensions of size 1, or splits a gemm's rows in two ((B*M, N) -> (B, M, N)), so that the
     epilogue (bias, activation, batch-norm scale and shift, residual add; the reshapes to and
     from 2-d around a gemm) is computed over the anchor's own loops
     (ember.schedules.apply.group_kernel). A reshape that splits or merges dimensions otherwise
     would read the anchor through divisions that hide its tile from the bound analysis;
   - an elementwise or broadcast node when the nodes between are at most injective, D's group
     is anything but opaque (so the residual branch joins a conv's epilogue, a prologue joins a
     reduction) and D takes a prologue (OpDef.takes_prologue: not a convolution, which would
     recompute it once per output-channel block and kernel tap; TVM fuses none into an anchor);
   - an injective node (in a second round, so that the anchors take their epilogues first) when
     every node on the paths, D's group included, is at most injective.
   - a reduction (a normalization, softmax, a pooling) into the cast that makes a graph output of
     its value (a half model's output back to float32: ember.passes.half_precision), which its
     kernel stores as it computes it rather than in a kernel of its own.
   Reductions and opaque nodes are not merged into a later node otherwise, nor is a concat that memory
   planning may write in place (its inputs contiguous slabs of it: channels at batch 1), nor
   anything into it: its inputs' kernels write their slabs, and it runs nothing. Since every path from a node
   to the outputs passes through its post-dominator, an intermediate value of a group is only
   read inside its group: a group's outputs are the values of its last node that others read,
   and the values nobody reads (an unused output of split), which are written as before.
3. Groups run in a topological order of their data dependencies; a group reads `inputs`
   (graph inputs, constants, other groups' outputs) and writes `outputs`.

A group has at most MAX_GROUP_NODES nodes: inlined elementwise diamonds recompute their shared
values, which a bound keeps from growing without limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import dims
from ..graph.core import Graph, Node, TensorType, Value
from ..ops.registry import get

# the lowest opt_level that fuses. Fused conv epilogues store vectors from the registers (the
# channel-vector tile transposed, ember.ops.conv), so fusing pays: batch 1, one thread, median CPU
# time, MobileNetV2 15.0 ms fused against 17.3 ms unfused, ResNet-18 43.7 against 45.8 (BERT-base
# 287 against 276: gelu's erf, one libm call per lane, costs more inside a matmul tile)
FUSE_LEVEL = 2
MAX_GROUP_NODES = 32
KIND = {"elementwise": 0, "broadcast": 1, "injective": 2, "reduction": 3, "out_elementwise_fusable": 4, "opaque": 5}
ELEMENTWISE, BROADCAST, INJECTIVE, REDUCTION, ANCHOR, OPAQUE = range(6)
VIEW_OPS = ("reshape", "flatten", "squeeze", "unsqueeze", "identity")  # the same bytes under another shape


@dataclass(frozen=True, eq=False)
class Group:
    """Nodes that run as one kernel: in graph order, reading `inputs` and writing `outputs`."""

    nodes: tuple[Node, ...]
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    anchor: Node | None  # the out_elementwise_fusable node whose schedule the kernel takes

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(n.op for n in self.nodes)

    def __repr__(self):
        return f"Group({' -> '.join(self.ops)})"


@dataclass(frozen=True, eq=False)
class FusedGraph:
    graph: Graph
    groups: tuple[Group, ...]  # in run order

    def __str__(self):
        """One line per group: its operators, what it reads and what it writes."""
        return "\n".join(f"kernel {k}: {' -> '.join(g.ops)}  ({', '.join('%' + v.name for v in g.inputs)}) -> "
                         f"{', '.join('%' + v.name for v in g.outputs)}" for k, g in enumerate(self.groups))


def kind(node: Node) -> int:
    return KIND[get(node.op).pattern]


def unfused(graph: Graph) -> FusedGraph:
    """One group per node."""
    return _grouped(graph, [[n] for n in graph.nodes])


def fuse(graph: Graph) -> FusedGraph:
    """The groups of `graph` (see the module doc)."""
    nodes = graph.nodes
    index = {id(n): k for k, n in enumerate(nodes)}
    users: list[list[int]] = [[] for _ in nodes]
    for k, n in enumerate(nodes):
        for v in dict.fromkeys(v for v in n.inputs if v.node is not None and id(v.node) in index):
            users[index[id(v.node)]].append(k)
    outputs = {id(v) for v in graph.outputs}
    ipdom = _post_dominators(nodes, users, outputs)
    kinds = [kind(n) for n in nodes]
    groups = _Groups(nodes, kinds)
    alone = _slab_concats(nodes, users, index)
    for rnd in (0, 1):
        for k in range(len(nodes)):
            d = ipdom[k]
            if d is None or groups.find(k) == groups.find(d):
                continue
            ok = _condition(rnd, groups.find(k), groups, nodes, kinds, outputs)
            if ok is None:
                continue
            path = _path(k, d, users)
            if alone.isdisjoint(path) and all(ok(j, j == d) for j in path - {k}):
                groups.merge(path, d)
    members: dict[int, list[Node]] = {}
    for k, n in enumerate(nodes):
        members.setdefault(groups.find(k), []).append(n)
    return _grouped(graph, list(members.values()))


def _slab_concats(nodes: list[Node], users: list[list[int]], index: dict[int, int]) -> set[int]:
    """The concats that memory planning may write in place (ember.passes.plan_memory): each input
    a contiguous slab of the output, made by a node of this graph that computes (no reshape: a
    view) and read by no other concat.
    They stay groups of their own, neither fused into their readers nor taking their inputs'
    nodes, so that each input's kernel writes its slab and the concat copies nothing (DenseNet's
    blocks: fused into the batch norm that reads it, each concat copied every feature before it)."""
    found = set()
    for k, n in enumerate(nodes):
        if n.op != "concat" or slab_offsets(n.inputs, n.outputs[0], n.attrs["axis"], 1) is None:
            continue
        makers = [index.get(id(v.node)) if v.node is not None else None for v in n.inputs]
        if None not in makers and not any(nodes[m].op in VIEW_OPS for m in makers) and not any(
                nodes[u].op == "concat" and u != k for m in makers for u in users[m]):
            found.add(k)
    return found


def _condition(rnd: int, g: int, groups: _Groups, nodes: list[Node], kinds: list[int], outputs: set[int]):
    """What each node j on the paths from group g to its post-dominator (sink: j is that one)
    must be for g to fuse into it in this round, as `ok(j, sink)`; None: g does not fuse."""
    pattern = groups.pattern[g]
    if rnd == 0 and pattern == ANCHOR:
        out = nodes[groups.anchor[g]].outputs[0].type
        return lambda j, sink: ((kinds[j] <= BROADCAST or nodes[j].op == "reshape")
                                and all(_same_elements(v.type, out) for v in nodes[j].outputs))
    if rnd == 0 and pattern <= BROADCAST:
        return lambda j, sink: (groups.pattern[groups.find(j)] < OPAQUE and get(nodes[j].op).takes_prologue
                                if sink else kinds[j] <= INJECTIVE)
    if rnd == 1 and pattern == INJECTIVE:
        return lambda j, sink: groups.pattern[groups.find(j)] <= INJECTIVE
    if rnd == 0 and pattern == REDUCTION:  # a model's output cast back to float32 (ember.passes.half_precision)
        return lambda j, sink: sink and nodes[j].op == "cast" and any(id(v) in outputs for v in nodes[j].outputs)
    return None


def _same_elements(t: TensorType, anchor: TensorType) -> bool:
    """t has the anchor's shape, up to dimensions of size 1, or a 2-D anchor's (B*M, N) with its
    rows split in two, (B, M, N): the same elements in the same order. (The epilogue of a gemm
    over the rows of a batch of sequences, ember.passes.flatten_products: computed over the
    gemm's tile, it reads row i of the batch at (i // M, i % M), and the split back
    (i // M) * M + i % M is i again. Split in more axes, the nested divisions do not fold.)"""
    if tuple(d for d in t.shape if d != 1) == tuple(d for d in anchor.shape if d != 1):
        return True
    return anchor.rank == 2 and t.rank == 3 and t.shape[-1] == anchor.shape[-1] \
        and dims.mul(*t.shape[:-1]) == anchor.shape[0]


def _post_dominators(nodes: list[Node], users: list[list[int]], outputs: set[int]) -> list[int | None]:
    """The immediate post-dominator of each node (None: a graph output, or unused)."""
    ipdom: list[int | None] = [None] * len(nodes)
    depth = [0] * len(nodes)
    for k in reversed(range(len(nodes))):
        if not users[k] or any(id(v) in outputs for v in nodes[k].outputs):
            continue
        d: int | None = users[k][0]
        for u in users[k][1:]:
            d = _lca(d, u, ipdom, depth)
        ipdom[k] = d
        depth[k] = depth[d] + 1 if d is not None else 0
    return ipdom


def _lca(a: int | None, b: int | None, ipdom: list[int | None], depth: list[int]) -> int | None:
    while a != b and a is not None and b is not None:
        if depth[a] < depth[b]:
            a, b = b, a
        a = ipdom[a]  # the deeper one (or either) moves up
    return a if a == b else None


def _path(src: int, dst: int, users: list[list[int]]) -> set[int]:
    """The nodes on the paths from src to its post-dominator dst, both included (every path from
    src reaches dst, and dst comes after every node between in graph order)."""
    seen, todo = {src}, [src]
    while todo:
        k = todo.pop()
        if k == dst:
            continue
        for u in users[k]:
            if u not in seen:
                seen.add(u)
                todo.append(u)
    return seen


class _Groups:
    """Union-find over node indices; each root holds its group's pattern, anchor and size."""

    def __init__(self, nodes: list[Node], kinds: list[int]):
        self.parent = list(range(len(nodes)))
        self.pattern = list(kinds)
        self.anchor = [k if kinds[k] == ANCHOR else None for k in range(len(nodes))]
        self.reductions = [int(kinds[k] == REDUCTION) for k in range(len(nodes))]
        self.size = [1] * len(nodes)

    def find(self, k: int) -> int:
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def merge(self, path: set[int], into: int) -> None:
        """Merge the groups of `path` into the group of `into`, if the result keeps at most one
        anchor, one reduction and MAX_GROUP_NODES nodes."""
        roots = {self.find(k) for k in path}
        if sum(self.size[r] for r in roots) > MAX_GROUP_NODES or sum(self.reductions[r] for r in roots) > 1:
            return
        anchors = [self.anchor[r] for r in roots if self.anchor[r] is not None]
        if len(anchors) > 1 or (anchors and any(self.reductions[r] for r in roots)):
            return
        root = self.find(into)
        for r in roots - {root}:
            self.parent[r] = root
        self.pattern[root] = max(self.pattern[r] for r in roots)
        self.anchor[root] = anchors[0] if anchors else None
        self.reductions[root] = sum(self.reductions[r] for r in roots)
        self.size[root] = sum(self.size[r] for r in roots)


def _grouped(graph: Graph, members: list[list[Node]]) -> FusedGraph:
    """Groups of these node lists (each in graph order), in a topological order of the groups."""
    where = {id(n): g for g, ns in enumerate(members) for n in ns}
    read_inside = set()
    read_outside = {id(v) for v in graph.outputs}
    for n in graph.nodes:
        for v in n.inputs:
            if v.node is not None and where.get(id(v.node)) != where[id(n)]:
                read_outside.add(id(v))
            read_inside.add(id(v))
    groups = []
    for ns in members:
        inside = {id(n) for n in ns}
        inputs = dict.fromkeys(v for n in ns for v in n.inputs if v.node is None or id(v.node) not in inside)
        # what others read, and what nobody reads (an output of split, say): written as before
        outputs = tuple(v for n in ns for v in n.outputs if id(v) in read_outside or id(v) not in read_inside)
        anchor = next((n for n in ns if kind(n) == ANCHOR), None)
        groups.append(Group(tuple(ns), tuple(inputs), outputs, anchor))
    return FusedGraph(graph, tuple(_run_order(groups, where)))


def _run_order(groups: list[Group], where: dict[int, int]) -> list[Group]:
    """The groups in a topological order (Kahn's, the earliest first node first)."""
    deps = [{where[id(v.node)] for v in g.inputs if v.node is not None and id(v.node) in where} for g in groups]
    waiting = [len(d) for d in deps]
    readers: list[list[int]] = [[] for _ in groups]
    for g, d in enumerate(deps):
        for h in d:
            readers[h].append(g)
    ready = sorted(g for g in range(len(groups)) if not waiting[g])
    order = []
    while ready:
        g = ready.pop(0)
        order.append(groups[g])
        for r in readers[g]:
            waiting[r] -= 1
            if not waiting[r]:
                ready.append(r)
        ready.sort()
    if len(order) != len(groups):
        raise AssertionError("fusion made a cycle of groups")  # a bug of this module, never the user's
    return order


def slab_offsets(xs, y: Value, axis: int, align: int) -> tuple[int, ...] | None:
    """The byte offset of each input of a concat in its output, when each is a contiguous slab
    of it at an aligned offset; else None."""
    axis %= y.type.rank
    shapes = [tuple(v.shape) for v in (*xs, y)]
    if not all(isinstance(d, int) for shape in shapes for d in shape) or any(d != 1 for d in y.shape[:axis]):
        return None
    if any(x.type.dtype != y.type.dtype or x.type.rank != y.type.rank for x in xs):
        return None
    itemsize, offsets, at = np.dtype(y.type.dtype).itemsize, [], 0
    for x in xs:
        offsets.append(at)
        at += int(np.prod(x.shape)) * itemsize
    return tuple(offsets) if all(o % align == 0 for o in offsets) and 0 not in map(np.prod, shapes) else None

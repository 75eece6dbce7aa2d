"""Place each intermediate buffer at the innermost loop that encloses all its uses, shrunk to the
region touched in one iteration of that loop (TVM's CompactBufferAllocation).

This is what makes a producer computed at a consumer's tile cost a tile of memory, and a
cache_write buffer under a register tile a handful of registers. Indices are shifted by the
region's start; a region whose extent has no constant bound keeps the buffer whole, at the top.

The buffers are placed together, in three walks whatever their number: one finds every buffer's
uses, one per loop the regions of the buffers it gets, and one moves the accesses (a row kernel's
21 scratch buffers, each walking the whole body for itself, took a third of its lowering).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .. import region as region_mod
from ..arith import Analyzer
from ..expr import Buffer, BufferLoad, as_int, const
from ..functor import collect, free_vars, mutate_stmt, stmt_children, stmt_exprs, visit_expr, visit_stmt
from ..intrin_regions import call_boxes, is_tensorized, rebased
from ..region import const_extent, regions_under
from ..stmt import Allocate, BlockRealize, BufferStore, CallRoutine, For, PrimFunc, Stmt


@dataclass
class _Uses:
    """Of one buffer: the loops around every leaf block and routine call touching it; the loop
    variables that run over a reduction axis of a block writing it, or around a call writing it
    at an address that does not move with them (it carries values across them); the tensorized
    calls that take it."""

    paths: list[list[For]] = field(default_factory=list)
    carried: set = field(default_factory=set)
    calls: list[CallRoutine] = field(default_factory=list)


def _uses(root: Stmt, buffers: tuple[Buffer, ...]) -> dict[Buffer, _Uses]:
    """The uses of each of `buffers` under root, in one walk."""
    uses = {b: _Uses() for b in buffers}

    def in_block(realize: BlockRealize, loops: list[For]):
        touched, written = set(), set()

        def on_stmt(st):
            if isinstance(st, BufferStore) and st.buffer in uses:
                written.add(st.buffer)
            if isinstance(st, CallRoutine):
                for p in st.reads + st.writes:
                    if p.buffer in uses:
                        touched.add(p.buffer)
                        if is_tensorized(st):
                            uses[p.buffer].calls.append(st)
            for e in stmt_exprs(st):
                visit_expr(e, lambda n: touched.add(n.buffer) if isinstance(n, BufferLoad) and n.buffer in uses
                           else None)

        visit_stmt(realize.block, on_stmt)
        reduced = [free_vars(v) for iv, v in zip(realize.block.iter_vars, realize.iter_values) if iv.kind == "reduce"]
        for b in buffers:  # (in their order: a buffer's paths are in program order, as is each walk's)
            if b in touched or b in written:
                uses[b].paths.append(loops)
            if b in written:
                uses[b].carried.update(*reduced)

    def walk(s: Stmt, loops: list[For]):
        if isinstance(s, BlockRealize) and region_mod.is_leaf(s.block):
            in_block(s, loops)
            return
        if isinstance(s, CallRoutine):
            for b in dict.fromkeys(p.buffer for p in s.reads + s.writes if p.buffer in uses):
                use = uses[b]
                use.paths.append(loops)  # a tensorized call, in no block: it carries values across the loops
                if is_tensorized(s):
                    use.calls.append(s)
                for p in s.writes:  # its address does not move with (an update's reduction; a loop of
                    if p.buffer is b:  # one iteration carries nothing)
                        use.carried.update(f.loop_var for f in loops if f.loop_var not in free_vars(p.offset)
                                           and as_int(f.extent) != 1)
            return
        inner = loops + [s] if isinstance(s, For) else loops
        for c in stmt_children(s):
            walk(c, inner)

    walk(root, [])
    return uses


def _common_prefix(paths: list[list[For]]) -> list[For]:
    out: list[For] = []
    for level in zip(*paths):
        if all(f is level[0] for f in level):
            out.append(level[0])
        else:
            break
    return out


def _loops_to(use: _Uses) -> list[For]:
    """The loops from the top to the one a buffer is placed at (none: it stays whole, at the top):
    those around all its uses, to the first one it carries values across."""
    lca = _common_prefix(use.paths) if use.paths else []
    return lca[:next((k for k, f in enumerate(lca) if f.loop_var in use.carried), len(lca))]


def _allocated(body: Stmt, loop: For, buffers: list[Buffer]) -> Stmt:
    """body with `loop`'s body inside an allocation of each of `buffers`, the first innermost."""
    inner = loop.body
    for b in buffers:
        inner = Allocate(b, inner)
    placed = replace(loop, body=inner)
    return mutate_stmt(body, f_stmt=lambda s: placed if s is loop else None)


def _shifted(body: Stmt, moved: dict[Buffer, tuple[Buffer, list, Analyzer]]) -> Stmt:
    """body with the accesses of each buffer of `moved` on its new buffer, indices less the
    region's start (a tensorized call rebased with the analyzer of the buffer's loop, one buffer
    after another in `moved`'s order)."""

    def on_expr(e):
        if isinstance(e, BufferLoad) and e.buffer in moved:
            new, lo, _ = moved[e.buffer]
            return BufferLoad(new, tuple(i - m for i, m in zip(e.indices, lo)), e.dtype)
        return None

    def on_stmt(s):
        if isinstance(s, BufferStore) and s.buffer in moved:
            new, lo, _ = moved[s.buffer]
            return BufferStore(new, s.value, tuple(i - m for i, m in zip(s.indices, lo)))
        if isinstance(s, CallRoutine) and is_tensorized(s):
            took = {p.buffer for p in s.reads + s.writes}
            for old, (new, lo, ana) in moved.items():
                if old in took:
                    s = rebased(s, old, new, list(lo), ana)
            return s
        return None

    return mutate_stmt(body, f_stmt=on_stmt, f_expr=on_expr)


def compact_buffers(func: PrimFunc) -> PrimFunc:
    top = func.body
    assert isinstance(top, BlockRealize)
    root = top.block
    uses = _uses(root.body, root.alloc_buffers)
    at: dict[int, tuple[list[For], list[Buffer]]] = {}  # id(loop) -> (the loops to it, the buffers placed there)
    for buf in root.alloc_buffers:
        if lca := _loops_to(uses[buf]):
            at.setdefault(id(lca[-1]), (lca, []))[1].append(buf)
    moved: dict[Buffer, tuple[Buffer, list, Analyzer]] = {}  # old -> (new, its region's start, the analyzer)
    for lca, bufs in at.values():
        loop = lca[-1]
        ana = Analyzer()
        for f in lca + collect(loop.body, lambda x: isinstance(x, For)):  # inner ones: a call's address splits
            ana.bind_range(f.loop_var, f.min, f.extent)  # back into indices (ember.tir.intrin_regions)
        known = [b for b in bufs if all(call_boxes(c, b, ana) is not None for c in uses[b].calls)]
        for b, region in zip(known, regions_under(loop.body, known, loads=True, stores=True, ana=ana)):
            extents = [const_extent(iv, ana) for iv in region] if region is not None else [None]
            if None not in extents:
                new = Buffer(b.name, tuple(const(e) for e in extents), b.dtype, b.scope)
                moved[b] = new, [iv.lo for iv in region], ana
    body = root.body
    for lca, bufs in sorted(at.values(), key=lambda e: len(e[0])):  # outer loops first: an inner loop stays
        if news := [moved[b][0] for b in bufs if b in moved]:  # the same object as its outer one is placed
            body = _allocated(body, lca[-1], news)
    body = _shifted(body, {b: moved[b] for b in root.alloc_buffers if b in moved})
    kept = tuple(b for b in root.alloc_buffers if b not in moved)
    return func.with_body(replace(top, block=replace(root, body=body, alloc_buffers=kept)))

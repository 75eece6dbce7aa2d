"""Place each intermediate buffer at the innermost loop that encloses all its uses, shrunk to the
region touched in one iteration of that loop (TVM's CompactBufferAllocation).

This is what makes a producer computed at a consumer's tile cost a tile of memory, and a
cache_write buffer under a register tile a handful of registers. Indices are shifted by the
region's start; a region whose extent has no constant bound keeps the buffer whole, at the top.
"""

from __future__ import annotations

from dataclasses import replace

from .. import region as region_mod
from ..arith import Analyzer
from ..expr import Buffer, BufferLoad, as_int, const
from ..functor import collect, free_vars, mutate_stmt, stmt_children
from ..intrin_regions import call_boxes, is_tensorized, rebased
from ..region import const_extent, region_under
from ..stmt import Allocate, BlockRealize, BufferStore, CallRoutine, For, PrimFunc, Stmt


def _use_paths(root: Stmt, buf: Buffer) -> tuple[list[list[For]], set]:
    """For every leaf block and routine call touching buf, the loops around it; and the loop
    variables that run over a reduction axis of a block writing buf, or around a call writing buf
    at an address that does not move with them (the buffer carries values across them)."""
    paths: list[list[For]] = []
    carried: set = set()

    def walk(s: Stmt, loops: list[For]):
        if isinstance(s, BlockRealize) and region_mod.is_leaf(s.block):
            if region_mod.accesses(s.block, buf) or _calls_with(s.block, buf):
                paths.append(loops)
            if region_mod.accesses(s.block, buf, loads=False):
                for iv, v in zip(s.block.iter_vars, s.iter_values):
                    if iv.kind == "reduce":
                        carried.update(free_vars(v))
            return
        if isinstance(s, CallRoutine) and any(p.buffer is buf for p in s.reads + s.writes):
            paths.append(loops)  # a tensorized call, in no block: it carries values across the loops
            for p in s.writes:  # its address does not move with (an update's reduction; a loop of
                if p.buffer is buf:  # one iteration carries nothing)
                    carried.update(f.loop_var for f in loops if f.loop_var not in free_vars(p.offset)
                                   and as_int(f.extent) != 1)
            return
        inner = loops + [s] if isinstance(s, For) else loops
        for c in stmt_children(s):
            walk(c, inner)

    walk(root, [])
    return paths, carried


def _calls_with(s: Stmt, buf: Buffer) -> bool:
    """Whether a routine called in s takes buf (the routine may touch any of it)."""
    return bool(collect(s, lambda x: isinstance(x, CallRoutine) and any(p.buffer is buf for p in x.reads + x.writes)))


def _common_prefix(paths: list[list[For]]) -> list[For]:
    out: list[For] = []
    for level in zip(*paths):
        if all(f is level[0] for f in level):
            out.append(level[0])
        else:
            break
    return out


def _unknown_calls(s: Stmt, buf: Buffer, ana: Analyzer) -> bool:
    """Whether a tensorized call takes buf where the part it touches cannot be known."""
    return bool(collect(s, lambda x: isinstance(x, CallRoutine) and is_tensorized(x)
                        and call_boxes(x, buf, ana) is None))


def _shift(body: Stmt, old: Buffer, new: Buffer, lo, ana: Analyzer) -> Stmt:
    def on_expr(e):
        if isinstance(e, BufferLoad) and e.buffer is old:
            return BufferLoad(new, tuple(i - m for i, m in zip(e.indices, lo)), e.dtype)
        return None

    def on_stmt(s):
        if isinstance(s, BufferStore) and s.buffer is old:
            return BufferStore(new, s.value, tuple(i - m for i, m in zip(s.indices, lo)))
        if isinstance(s, CallRoutine) and is_tensorized(s) and any(p.buffer is old for p in s.reads + s.writes):
            return rebased(s, old, new, list(lo), ana)
        return None

    return mutate_stmt(body, f_stmt=on_stmt, f_expr=on_expr)


def compact_buffers(func: PrimFunc) -> PrimFunc:
    top = func.body
    assert isinstance(top, BlockRealize)
    root = top.block
    kept = []
    body = root.body
    for buf in root.alloc_buffers:
        paths, carried = _use_paths(body, buf)
        lca = _common_prefix(paths) if paths else []
        cut = next((k for k, f in enumerate(lca) if f.loop_var in carried), len(lca))
        lca = lca[:cut]
        if not lca:
            kept.append(buf)
            continue
        loop = lca[-1]
        ana = Analyzer()
        for f in lca + collect(loop.body, lambda x: isinstance(x, For)):  # inner ones: a call's address splits
            ana.bind_range(f.loop_var, f.min, f.extent)  # back into indices (ember.tir.intrin_regions)
        if _unknown_calls(loop.body, buf, ana):
            kept.append(buf)
            continue
        region = region_under(loop.body, buf, loads=True, stores=True, ana=ana)
        extents = [const_extent(iv, ana) for iv in region]
        if any(e is None for e in extents):
            kept.append(buf)
            continue
        new = Buffer(buf.name, tuple(const(e) for e in extents), buf.dtype, buf.scope)
        new_loop = replace(loop, body=Allocate(new, _shift(loop.body, buf, new, [iv.lo for iv in region], ana)))
        body = mutate_stmt(body, f_stmt=lambda s, old=loop, nl=new_loop: nl if s is old else None)
    return func.with_body(replace(top, block=replace(root, body=body, alloc_buffers=tuple(kept))))

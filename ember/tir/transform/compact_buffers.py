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
from ..expr import Buffer, BufferLoad, const
from ..functor import collect, free_vars, mutate_stmt, stmt_children
from ..region import const_extent, region_under
from ..stmt import Allocate, BlockRealize, BufferStore, CallRoutine, For, PrimFunc, Stmt


def _use_paths(root: Stmt, buf: Buffer) -> tuple[list[list[For]], set]:
    """For every leaf block and routine call touching buf, the loops around it; and the loop
    variables that run over a reduction axis of a block writing buf (the buffer carries values
    across them)."""
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


def _shift(body: Stmt, old: Buffer, new: Buffer, lo) -> Stmt:
    def on_expr(e):
        if isinstance(e, BufferLoad) and e.buffer is old:
            return BufferLoad(new, tuple(i - m for i, m in zip(e.indices, lo)), e.dtype)
        return None

    def on_stmt(s):
        if isinstance(s, BufferStore) and s.buffer is old:
            return BufferStore(new, s.value, tuple(i - m for i, m in zip(s.indices, lo)))
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
        for f in lca:
            ana.bind_range(f.loop_var, f.min, f.extent)
        region = region_under(loop.body, buf, loads=True, stores=True, ana=ana)
        extents = [const_extent(iv, ana) for iv in region]
        if any(e is None for e in extents):
            kept.append(buf)
            continue
        new = Buffer(buf.name, tuple(const(e) for e in extents), buf.dtype, buf.scope)
        new_loop = replace(loop, body=Allocate(new, _shift(loop.body, buf, new, [iv.lo for iv in region])))
        body = mutate_stmt(body, f_stmt=lambda s, old=loop, nl=new_loop: nl if s is old else None)
    return func.with_body(replace(top, block=replace(root, body=body, alloc_buffers=tuple(kept))))

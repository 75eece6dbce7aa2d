"""Inlining: compute_inline folds a producer's expression into its consumers;
reverse_compute_inline folds a consumer's expression into its producer's store. Either way one
tensor disappears and never reaches memory.
"""

from __future__ import annotations

from dataclasses import replace

from ...errors import ScheduleError
from ..arith import Analyzer
from ..expr import BufferLoad, Var
from ..functor import mutate_expr, mutate_stmt, substitute, visit_expr
from ..region import with_regions
from ..stmt import Block, BlockRealize, BufferStore, Stmt
from .nest import check_sole_writer, detach, realizes_in
from .registry import primitive
from .state import BlockRV, Schedule


def _single_store(block: Block, primitive_name: str) -> BufferStore:
    if block.init is not None or block.is_reduction:
        raise ScheduleError(f"{primitive_name}: block {block.name!r} is a reduction")
    if not isinstance(block.body, BufferStore):
        raise ScheduleError(f"{primitive_name}: block {block.name!r} must consist of a single store")
    return block.body


def _check_intermediate(sch: Schedule, buf, block_name: str, primitive_name: str) -> None:
    if any(p is buf for p in sch.mod.params):
        raise ScheduleError(
            f"{primitive_name}: block {block_name!r} writes {buf.name}, an argument of the function; "
            "only intermediate tensors can be inlined"
        )


def _drop_alloc(sch: Schedule, buf) -> None:
    root = sch.root_block()
    sch.set_root(replace(root, alloc_buffers=tuple(b for b in root.alloc_buffers if b is not buf)))


@primitive
def compute_inline(sch: Schedule, block: BlockRV) -> None:
    """Replace every read of the block's tensor by the expression that computes it."""
    realize = sch.get_realize(block)
    blk = realize.block
    store = _single_store(blk, "compute_inline")
    ivars = [iv.var for iv in blk.iter_vars]
    if len(store.indices) != len(ivars) or any(i is not v for i, v in zip(store.indices, ivars)):
        raise ScheduleError(
            f"compute_inline: block {blk.name!r} must store at exactly its iteration point"
        )
    buf = store.buffer
    _check_intermediate(sch, buf, blk.name, "compute_inline")
    check_sole_writer(sch, realize, "compute_inline")

    def inline(e):
        if isinstance(e, BufferLoad) and e.buffer is buf:
            return substitute(store.value, dict(zip(ivars, e.indices)))
        return None

    detach(sch, block)

    def fix(s: Stmt):
        if isinstance(s, BlockRealize) and s.block.name != "root":
            new_block = mutate_stmt(s.block, f_expr=inline)
            if new_block is not s.block:
                return replace(s, block=with_regions(new_block))
        return None

    sch.mod = sch.mod.with_body(mutate_stmt(sch.mod.body, f_stmt=fix))
    _drop_alloc(sch, buf)


@primitive
def reverse_compute_inline(sch: Schedule, block: BlockRV) -> None:
    """Fold a spatial consumer into its producer: the producer stores the consumer's result."""
    realize = sch.get_realize(block)
    blk = realize.block
    store = _single_store(blk, "reverse_compute_inline")
    ivars = [iv.var for iv in blk.iter_vars]
    loads: list[BufferLoad] = []
    visit_expr(store.value, lambda n: loads.append(n) if isinstance(n, BufferLoad) else None)
    producers = {}
    for r in sch.all_realizes():
        for w in r.block.writes:
            producers.setdefault(w.buffer, []).append(r)
    candidates = [ld for ld in loads if ld.buffer in producers and ld.buffer is not store.buffer]
    bufs = {ld.buffer for ld in candidates}
    if len(bufs) != 1:
        raise ScheduleError(
            f"reverse_compute_inline: block {blk.name!r} must read exactly one computed tensor, "
            f"it reads {sorted(b.name for b in bufs)}"
        )
    pbuf = bufs.pop()
    _check_intermediate(sch, pbuf, blk.name, "reverse_compute_inline")
    if len(producers[pbuf]) != 1:
        raise ScheduleError(f"reverse_compute_inline: {pbuf.name} is written by several blocks")
    prod_realize = producers[pbuf][0]
    pblk = prod_realize.block
    others = sorted(r.block.name for r in sch.all_realizes() if r.block is not blk and r.block is not pblk
                    and any(rd.buffer is pbuf for rd in r.block.reads))
    if others:  # they would read a tensor that is no longer computed
        raise ScheduleError(f"reverse_compute_inline: {pbuf.name} is also read by block(s) {others}; only the "
                            f"single consumer of a tensor can be inlined into its producer")
    pstore = _single_store(pblk, "reverse_compute_inline")
    idx = candidates[0].indices
    if any(tuple(map(id, ld.indices)) != tuple(map(id, idx)) for ld in candidates):
        raise ScheduleError(f"reverse_compute_inline: block {blk.name!r} reads {pbuf.name} at several points")
    if sorted(map(id, idx)) != sorted(map(id, ivars)) or not all(isinstance(i, Var) for i in idx):
        raise ScheduleError(
            f"reverse_compute_inline: block {blk.name!r} must read {pbuf.name} at a permutation of its "
            "iteration variables"
        )
    dom = {iv.var: iv.dom.extent for iv in blk.iter_vars}
    ana = Analyzer()
    for i, pdim in zip(idx, pbuf.shape):
        if not ana.can_prove_equal(dom[i], pdim):
            raise ScheduleError(
                f"reverse_compute_inline: block {blk.name!r} does not cover all of {pbuf.name}"
            )
    vmap = dict(zip(idx, pstore.indices))

    def take_value(e):
        if isinstance(e, BufferLoad) and e.buffer is pbuf:
            return pstore.value
        return None

    new_value = mutate_expr(substitute(store.value, vmap), take_value)
    new_store = BufferStore(store.buffer, new_value, tuple(substitute(i, vmap) for i in store.indices))
    new_pblk = with_regions(replace(pblk, body=new_store))
    if any(r is prod_realize for r in realizes_in(sch.mod.body)):
        sch.replace(prod_realize, replace(prod_realize, block=new_pblk))
    detach(sch, block)
    _drop_alloc(sch, pbuf)

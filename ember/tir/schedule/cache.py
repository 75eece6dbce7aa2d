"""Cache stages: cache_read copies a tensor into a new buffer before a block reads it;
cache_write lets a block compute into a new buffer and copies the result out afterwards.

Both make a full-size buffer and a copy block at the top level; moving the copy under a tile
(compute_at / reverse_compute_at) and buffer compaction at lowering shrink it to a tile, which
is how a GEMM accumulates a register tile in a local array. The copy block and its buffer are
named `<tensor>_<scope>`; a second cache of one tensor in one scope is refused.
"""

from __future__ import annotations

from dataclasses import replace

from ...errors import ScheduleError
from ..expr import Buffer, BufferLoad, Var, const
from ..functor import mutate_stmt
from ..region import with_regions
from ..stmt import Block, BlockRealize, BufferStore, For, IterVar, Range, Stmt
from .nest import common_loop, insert_in_body, names_in_use, reads_buffer, same_nest, writes_buffer
from .registry import primitive
from .state import BlockRV, Schedule

SCOPES = ("global", "local", "shared", "wmma.accumulator")  # shared: a GPU block's memory; wmma.accumulator:
# a warp's Tensor Core accumulators, 16x16 fragments in registers (ember.intrinsics.wmma)
# the on-chip memories of accelerators, registered by their descriptions (ember.accel): "vdla.inp", ...
DEVICE_SCOPES: set[str] = set()


def register_scope(scope: str) -> str:
    """Accept `scope` in cache_read/cache_write: an accelerator's on-chip memory, which its
    backend checks and places (ember.accel)."""
    DEVICE_SCOPES.add(scope)
    return scope


def _copy_nest(name: str, src: Buffer, dst: Buffer) -> Stmt:
    ivs = tuple(IterVar(Var(f"v{d}"), Range(const(0), ext), "spatial") for d, ext in enumerate(dst.shape))
    idx = tuple(iv.var for iv in ivs)
    block = with_regions(Block(name, ivs, (), (), BufferStore(dst, BufferLoad(src, idx, src.dtype), idx)))
    loop_vars = [Var(f"ax{d}") for d in range(len(ivs))]
    body: Stmt = BlockRealize(tuple(loop_vars), const(True), block)
    for v, iv in reversed(list(zip(loop_vars, ivs))):
        body = For(v, const(0), iv.dom.extent, "serial", body)
    return body


def _redirect(block: Block, old: Buffer, new: Buffer, *, loads: bool, stores: bool) -> Block:
    def on_expr(e):
        if loads and isinstance(e, BufferLoad) and e.buffer is old:
            return BufferLoad(new, e.indices, e.dtype)
        return None

    def on_stmt(s):
        if stores and isinstance(s, BufferStore) and s.buffer is old:
            return BufferStore(new, s.value, s.indices)
        return None

    return with_regions(mutate_stmt(block, f_stmt=on_stmt, f_expr=on_expr))


def _check_scope(scope: str) -> None:
    if scope not in SCOPES and scope not in DEVICE_SCOPES:
        raise ScheduleError(f"unknown storage scope {scope!r}; the scopes are {(*SCOPES, *sorted(DEVICE_SCOPES))}")


def _check_name_free(sch: Schedule, name: str, primitive: str) -> None:
    """The copy block and its buffer are both named `name`; a second block of that name (a
    cache_read and a cache_write of one tensor) would be taken for the first one when the copy
    is placed, and the copy put after the loop whose blocks read it."""
    if name in names_in_use(sch):
        raise ScheduleError(f"{primitive}: a block or buffer named {name!r} exists already "
                            "(a cache of this tensor in this scope was made before)")


def _add_alloc_and_nest(sch: Schedule, buf: Buffer, nest: Stmt, **where) -> None:
    root = sch.root_block()
    sch.set_root(replace(root, body=insert_in_body(root.body, nest, **where),
                         alloc_buffers=root.alloc_buffers + (buf,)))


@primitive
def cache_write(sch: Schedule, block: BlockRV, write_buffer_index: int = 0,
                storage_scope: str = "local") -> BlockRV:
    """Let `block` write into a new `storage_scope` buffer; a new block copies it out.
    Returns the copy block."""
    _check_scope(storage_scope)
    realize = sch.get_realize(block)
    blk = realize.block
    if not 0 <= write_buffer_index < len(blk.writes):
        raise ScheduleError(f"cache_write: block {blk.name!r} has {len(blk.writes)} outputs")
    buf = blk.writes[write_buffer_index].buffer
    writers = [r.block.name for r in sch.all_realizes() if any(w.buffer is buf for w in r.block.writes)]
    if len(writers) > 1:
        raise ScheduleError(f"cache_write: {buf.name} is written by several blocks {writers}")
    name = f"{buf.name}_{storage_scope}"
    _check_name_free(sch, name, "cache_write")
    cache = Buffer(name, buf.shape, buf.dtype, storage_scope)
    sch.replace(realize, replace(realize, block=_redirect(blk, buf, cache, loads=True, stores=True)))
    _add_alloc_and_nest(sch, cache, _copy_nest(name, cache, buf), after_writer_of={cache})
    copy = sch.new_block_rv(name)
    # readers sharing a loop with the writer need the copy inside that loop
    writer = sch.get_realize(block)
    readers = [r for r in sch.all_realizes() if r.block.name not in (name, "root") and reads_buffer(r.block, {buf})]
    readers = same_nest(sch, writer, readers)
    loop = common_loop(sch, [writer, *readers]) if readers else None
    if loop is not None:
        sch.reverse_compute_at(copy, sch.new_loop_rv(loop.loop_var))
    return copy


@primitive
def cache_read(sch: Schedule, block: BlockRV, read_buffer_index: int = 0,
               storage_scope: str = "local", consumer_blocks: list[BlockRV] | None = None) -> BlockRV:
    """Copy a tensor that `block` reads into a new buffer first; `block` (and the other
    `consumer_blocks`, which read it too) read the copy. Returns the copy block."""
    _check_scope(storage_scope)
    realize = sch.get_realize(block)
    blk = realize.block
    if not 0 <= read_buffer_index < len(blk.reads):
        raise ScheduleError(f"cache_read: block {blk.name!r} reads {len(blk.reads)} tensors")
    buf = blk.reads[read_buffer_index].buffer
    name = f"{buf.name}_{storage_scope}"
    _check_name_free(sch, name, "cache_read")
    cache = Buffer(name, buf.shape, buf.dtype, storage_scope)
    consumers = [realize]
    for rv in consumer_blocks or []:
        r = sch.get_realize(rv)
        if not any(rd.buffer is buf for rd in r.block.reads):
            raise ScheduleError(f"cache_read: block {r.block.name!r} does not read {buf.name}")
        if all(c is not r for c in consumers):
            consumers.append(r)
    for r in consumers:
        sch.replace(r, replace(r, block=_redirect(r.block, buf, cache, loads=True, stores=False)))
    _add_alloc_and_nest(sch, cache, _copy_nest(name, buf, cache), before_reader_of={cache})
    copy = sch.new_block_rv(name)
    # a producer sharing a loop with the readers needs the copy inside that loop, after it
    readers = [r for r in sch.all_realizes() if r.block.name not in (name, "root") and reads_buffer(r.block, {cache})]
    writers = [r for r in sch.all_realizes() if r.block.name not in (name, "root") and writes_buffer(r.block, {buf})]
    writers = [w for r in readers for w in same_nest(sch, r, writers)]
    loop = common_loop(sch, [*readers, *writers]) if writers else None
    if loop is not None:
        sch.compute_at(copy, sch.new_loop_rv(loop.loop_var))
    return copy

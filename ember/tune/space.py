"""The design space of a task, generated from its computation by rules (Ansor's sketch rules,
MetaSchedule's schedule rules), with no hand-written template.

The rules run over the blocks of the unscheduled function:
- **inline**: an elementwise stage that is not an output is inlined into its readers (a bias
  add, an activation, a padding), so it never reaches memory;
- **multi-level tiling** of a block that reduces with data reuse (some input does not depend
  on some spatial loop: GEMM, conv, batched matmul): every spatial loop split into 4 levels,
  every reduction loop into 2, reordered S0 S1 R0 S2 R1 S3 so that the innermost S3 tile is
  the register tile (its last loop vectorized) and S2 x S3 the cache tile; the accumulator
  goes to a local buffer (cache_write) copied out, together with the elementwise consumer
  fused into the copy, at a sampled tile level; the S0 loops are fused into one parallel loop;
- **packing** (second sketch): each reused input of a tiled block is copied, at a sampled outer
  tile loop, into a buffer that compaction shrinks to the tile's panel, so the innermost loops
  read it contiguously (a B panel of a GEMM, GotoBLAS style);
- **tensorize** (a sketch per tile unit the target has, ember.tune.tile_rule): a product whose
  operands are in the unit's layout and dtypes is tiled to the unit's tile and each tile mapped
  onto its intrinsic, in place of the multi-level tiling;
- **parallel, vectorize, unroll** for every other nest at the root: its outer spatial loops
  fused and parallel, its innermost spatial loop vectorized; and on every nest an unroll limit
  sampled from UNROLL_STEPS.

Tile sizes, the cache-write level, the packing location and the unroll limit are sampling
instructions (ember.tir.schedule.sampling): a sketch is a trace whose decisions are free, and
`sample(task, sketch, seed)` replays it with fresh decisions into a concrete candidate.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ScheduleError
from ..intrinsics.tiles import UNITS
from ..schedules.rules import inline_intermediates, parallel_vectorize
from ..target import Target
from ..tir.expr import BufferLoad, Var, as_int
from ..tir.functor import collect, uses_var, visit_expr
from ..tir.schedule import BlockRV, LoopRV, Schedule
from ..tir.stmt import Block, BlockRealize, BufferStore, For
from .task import Task
from .tile_rule import tensorize_tiles, tile_extents, units_for

UNROLL_STEPS = (0, 16, 64)  # 512 (MetaSchedule's fourth) makes kernels the compiler takes seconds over
SPATIAL_LEVELS, REDUCE_LEVELS = 4, 2
MAX_INNER_SPATIAL = 64  # the widest register tile column (4 AVX-512 vectors)
MAX_INNER_REDUCE = 64
MAX_SAMPLE_TRIES = 16


@dataclass(frozen=True)
class Sketch:
    """A program of rules whose sampling instructions are its free parameters. Run with no
    decisions it samples every one; run with the decisions of an earlier candidate (one of them
    changed: a mutation) it rebuilds that candidate's neighbour, whatever the structure the
    changed decision leads to."""

    name: str
    pack: bool
    # the rules that sample it: a GPU sketch's (ember.tune.gpu_space); None: this module's
    rules: Callable[[Schedule], None] | None = None
    unit: str | None = None  # the tile unit (ember.intrinsics.tiles.UNITS) its products are tensorized onto


def design_space(task: Task, target: Target | None = None) -> list[Sketch]:
    """The sketches of a task: with and without packing when some block is tiled, else one; and
    one per tile unit of `target` (this machine's by default) some product of the task fits."""
    tiled = _apply_rules(Schedule(task.func, seed=0), pack=False)
    sketches = [Sketch("tile", False), Sketch("tile+pack", True)] if tiled else [Sketch("simple", False)]
    blocks = [r.block for r in Schedule(task.func).all_realizes()]
    for unit in units_for(target if target is not None else Target()):
        if not any(tile_extents(b, unit) for b in blocks):
            continue
        sch = Schedule(task.func, seed=0)
        _apply_rules(sch, pack=False, unit=unit.name)
        if any(i.kind == "tensorize" for i in sch.trace):
            sketches.append(Sketch(f"tensorize:{unit.name}", False, unit=unit.name))
    return sketches


def apply_sketch(task: Task, sketch: Sketch, decisions: list | None = None, seed: int = 0) -> Schedule:
    """The candidate the sketch gives with `decisions` (in sampling order; missing or illegal
    ones sampled with `seed`). Raises ScheduleError when the rules reject what was sampled."""
    sch = Schedule(task.func, seed=seed)
    sch.forced = list(decisions or [])
    if sketch.rules is not None:
        sketch.rules(sch)
    else:
        _apply_rules(sch, sketch.pack, sketch.unit)
    return sch


def sketch_of(sketches: list[Sketch], trace) -> Sketch:
    """The sketch that made `trace` (a record's): the one of the unit it tensorizes onto, else the
    packing one when it copies an input."""
    intrins = [dict(i.attrs)["intrin"] for i in trace if i.kind == "tensorize"]
    if intrins:
        return next((s for s in sketches if s.unit and intrins[0].startswith(f"{s.unit}_")), sketches[0])
    packs = any(i.kind == "cache_read" for i in trace)
    return next((s for s in sketches if s.pack == packs and s.unit is None), sketches[0])


def sample(task: Task, sketch: Sketch, seed: int) -> Schedule | None:
    """A random candidate of the sketch (None: no legal one in MAX_SAMPLE_TRIES draws)."""
    for attempt in range(MAX_SAMPLE_TRIES):
        with contextlib.suppress(ScheduleError):
            return apply_sketch(task, sketch, seed=seed * MAX_SAMPLE_TRIES + attempt)
    return None


# -- the rules ------------------------------------------------------------------------------------
def _apply_rules(sch: Schedule, pack: bool, unit: str | None = None) -> bool:
    """Apply every rule to a fresh schedule, the products of `unit`'s tiles tensorized onto it;
    True when some block was tiled."""
    outputs = {id(p) for p in sch.mod.params}
    inline_intermediates(sch, where=_elementwise)
    tiled = False
    for name in [r.block.name for r in sch.all_realizes()]:
        if name == "root" or not _exists(sch, name):
            continue
        realize = _realize(sch, name)
        if unit is not None and tile_extents(realize.block, UNITS[unit]) is not None:
            saved = sch.copy()
            try:
                tensorize_tiles(sch, sch.get_block(name), UNITS[unit])
                continue
            except ScheduleError:
                sch.__dict__.update(saved.__dict__)
        if realize.block.is_reduction and _has_reuse(realize.block) and _static(sch, name):
            for fuse_consumer in (True, False):  # the consumer's indexing may not allow fusing it
                saved = sch.copy()
                try:
                    _multi_level_tile(sch, sch.get_block(name), outputs, pack, fuse_consumer)
                except ScheduleError:
                    sch.__dict__.update(saved.__dict__)
                    continue
                tiled = True
                break
    for name in [r.block.name for r in sch.all_realizes()]:
        if name != "root" and _at_root(sch, name):
            with contextlib.suppress(ScheduleError):  # a vector loop the vectorizer cannot take stays scalar
                parallel_vectorize(sch, sch.get_block(name))
    for loop in root_loops(sch):
        limit = sch.sample_categorical(list(UNROLL_STEPS), [1] * len(UNROLL_STEPS))
        sch.annotate(loop, "pragma_auto_unroll_max_step", limit)
    return tiled


def _multi_level_tile(sch: Schedule, block: BlockRV, outputs: set[int], pack: bool, fuse_consumer: bool) -> None:
    realize = sch.get_realize(block)
    out = realize.block.writes[0].buffer
    kinds = [iv.kind for iv in realize.block.iter_vars]
    write_back = sch.cache_write(block, 0, "local")
    if fuse_consumer and id(out) not in outputs:  # the consumer reads the accumulator, copied out in its place
        consumer = _sole_reader(sch, out, exclude=sch.block_name(write_back))
        sch.compute_inline(write_back)
        write_back = consumer
    loops = sch.get_loops(block)
    last_spatial = [lp for lp, k in zip(loops, kinds) if k == "spatial"][-1]
    spatial, reduce = [], []
    for loop, kind in zip(loops, kinds):
        if kind == "spatial":
            inner = MAX_INNER_SPATIAL if loop is last_spatial else 16
            spatial.append(sch.split(loop, sch.sample_perfect_tile(loop, SPATIAL_LEVELS, inner)))
        else:
            reduce.append(sch.split(loop, sch.sample_perfect_tile(loop, REDUCE_LEVELS, MAX_INNER_REDUCE)))
    levels = [[s[k] for s in spatial] for k in range(SPATIAL_LEVELS)]
    rlevels = [[r[k] for r in reduce] for k in range(REDUCE_LEVELS)]
    sch.reorder(*levels[0], *levels[1], *rlevels[0], *levels[2], *rlevels[1], *levels[3])
    outer = sch.fuse(*levels[0]) if len(levels[0]) > 1 else levels[0][0]
    sch.parallel(outer)
    at = sch.sample_loop([outer, levels[1][-1]])
    sch.reverse_compute_at(write_back, at)
    wb_loops = sch.get_loops(write_back)
    with contextlib.suppress(ScheduleError):
        sch.vectorize(wb_loops[-1])
    with contextlib.suppress(ScheduleError):
        sch.vectorize(levels[3][-1])
    if pack:
        _pack_inputs(sch, block, [outer, *levels[1], *rlevels[0]])


def _pack_inputs(sch: Schedule, block: BlockRV, locations: list[LoopRV]) -> None:
    """Copy each input the block reuses into a buffer computed at a sampled outer loop."""
    blk = sch.get_realize(block).block
    spatial = [iv.var for iv in blk.iter_vars if iv.kind == "spatial"]
    for index in reversed(range(len(blk.reads))):
        if not _reused(blk.reads[index], spatial) or blk.reads[index].buffer.scope != "global":
            continue
        copy = sch.cache_read(block, index, "global")
        sch.compute_at(copy, sch.sample_loop(locations))
        with contextlib.suppress(ScheduleError):
            sch.vectorize(sch.get_loops(copy)[-1])


# -- analysis -------------------------------------------------------------------------------------
def _elementwise(block: Block) -> bool:
    """Every load indexed by iteration variables in order (a subset: broadcasting), one store."""
    stores = collect(block.body, lambda s: isinstance(s, BufferStore))
    if len(stores) != 1:
        return False
    order = [iv.var for iv in block.iter_vars]
    ok = [True]

    def check(e):
        if isinstance(e, BufferLoad):
            idx = list(e.indices)
            if not all(isinstance(i, Var) and i in order for i in idx) or \
                    [order.index(i) for i in idx] != sorted(order.index(i) for i in idx):
                ok[0] = False

    visit_expr(stores[0].value, check)
    return ok[0]


def _has_reuse(block: Block) -> bool:
    """Some input of the block is read at the same place by several spatial points."""
    spatial = [iv.var for iv in block.iter_vars if iv.kind == "spatial"]
    return any(_reused(rd, spatial) for rd in block.reads)


def _reused(read, spatial) -> bool:
    """Some spatial variable does not move the region read: its points share the data."""
    return not all(any(uses_var(r.min, {v}) for r in read.region) for v in spatial)


def _static(sch: Schedule, name: str) -> bool:
    return all(as_int(f.extent) is not None for f in _loops_of(sch, name))


def _loops_of(sch: Schedule, name: str) -> list[For]:
    """The loops around block `name` (a query: nothing traced)."""
    path = sch.find_path(lambda s: isinstance(s, BlockRealize) and s.block.name == name) or []
    return [s for s in path if isinstance(s, For)]


def _sole_reader(sch: Schedule, buf, exclude: str) -> BlockRV:
    from ..tir.schedule.nest import reads_buffer

    readers = [r.block.name for r in sch.all_realizes()
               if r.block.name not in ("root", exclude) and reads_buffer(r.block, {buf})]
    if len(readers) != 1:
        raise ScheduleError(f"{buf.name} has {len(readers)} readers; the tile fuses one")
    return sch.get_block(readers[0])


def _exists(sch: Schedule, name: str) -> bool:
    return any(r.block.name == name for r in sch.all_realizes())


def _realize(sch: Schedule, name: str) -> BlockRealize:
    return next(r for r in sch.all_realizes() if r.block.name == name)


def _at_root(sch: Schedule, name: str) -> bool:
    return _exists(sch, name) and all(f.kind == "serial" for f in _loops_of(sch, name))


def root_loops(sch: Schedule) -> list[LoopRV]:
    """The outermost loop of every nest at the root (found through a block inside it, so that
    the handle comes from a traced get_loops)."""
    nests = [s for s in _seq(sch.root_block().body) if isinstance(s, For)]
    loops = []
    for nest in nests:
        inner = collect(nest, lambda s: isinstance(s, BlockRealize))
        if inner:
            loops.append(sch.get_loops(sch.get_block(inner[0].block.name))[0])
    return loops


def _seq(body):
    from ..tir.stmt import SeqStmt

    return list(body.stmts) if isinstance(body, SeqStmt) else [body]

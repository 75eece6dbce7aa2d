"""The tensorize rule of the design space: a product whose operands are in a tile unit's layout
(ember.intrinsics.tiles: a (M, K / G, G), or (M, K) read in groups of G as qgemm's rows are, by
b (N / 16, K / G, 16, G) into (M, N / 16, 16), the dtypes the unit takes: bf16 x bf16 -> fp32 on
AVX512-BF16 and AMX, u8 x s8 -> s32 on VNNI and AMX) is tiled to one of the unit's tile shapes,
its tile loops moved innermost and mapped onto the unit's intrinsic by `sch.tensorize` (a traced
step: a record replays it, the interpreter runs its description). Only units whose feature the
target's flags enable are offered, so a target without the unit never draws a candidate that
calls it.

    for jo_0, i_0 (fused, parallel):         the tile shape (MR, NV) and which of the two outer
      for i_1 < MR, jo_1 < NV, ji < 16,      loops is outermost are sampling decisions; the
          kg < K / G, g < G:    ->  tile()   whole reduction is one call, so the accumulators
            c[i, jo, ji] += a[i, kg, g] * b[jo, kg, ji, g]     stay in registers (or tiles)

What the rule does not reach: a product over operands in their plain layouts (B as (K, N)),
which would need a layout transformation of the schedule to pack them (the compiler packs the
weights of bf16 and int8 models once, at compile time: ember.passes.bf16_weights).
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..intrinsics.tiles import LANES, UNITS, Unit
from ..tir.expr import as_int
from ..tir.schedule import BlockRV, Schedule
from ..tir.stmt import Block

ORDERS = 2  # 0: column blocks outermost (a panel of b stays in cache while the rows pass), 1: rows


def units_for(target) -> list[Unit]:
    """The tile units the target's flags enable (AMX's ahead of AVX-512's, as declared)."""
    return [u for u in UNITS.values() if u.feature in target.features]


def tile_extents(block: Block, unit: Unit) -> tuple[int, int, int] | None:
    """(M, N / 16, K / G) when `block` computes `unit`'s tile product (iterations M, N / 16, 16
    spatial then K / G, G reduced, its operands and result of the unit's dtypes), else None; the
    rest (the body's arithmetic, the strides) tensorize itself checks."""
    extents = [as_int(iv.dom.extent) for iv in block.iter_vars]
    kinds = [iv.kind for iv in block.iter_vars]
    if len(extents) != 5 or None in extents or kinds != ["spatial"] * 3 + ["reduce"] * 2 or len(block.writes) != 1:
        return None
    m, nb, lanes, kg, g = extents
    out = block.writes[0].buffer
    dtypes = sorted(r.buffer.dtype for r in block.reads if r.buffer is not out)
    if lanes != LANES or g != unit.group or out.dtype != unit.acc_dtype or \
            dtypes != sorted((unit.a_dtype, unit.b_dtype)) or kg % unit.kg_step:
        return None
    return m, nb, kg


def tensorize_tiles(sch: Schedule, block: BlockRV, unit: Unit) -> None:
    """Tile `block` (a product `tile_extents` accepts) by a sampled tile of the unit and
    tensorize each tile; ScheduleError when no tile of the unit divides it."""
    extents = tile_extents(sch.get_realize(block).block, unit)
    if extents is None:
        raise ScheduleError(f"block {sch.block_name(block)} is not a tile product of {unit.name}")
    m, nb, kg = extents
    shapes = [(mr, nv) for mr, nv in unit.shapes if m % mr == 0 and nb % nv == 0]
    if not shapes:
        raise ScheduleError(f"no tile of {unit.name} ({unit.shapes}) divides {m} rows x {nb} column blocks")
    mr, nv = shapes[sch.sample_categorical(list(range(len(shapes))), [1] * len(shapes))]
    i, jo, ji, k, g = sch.get_loops(block)
    io, ii = sch.split(i, [None, mr])
    joo, joi = sch.split(jo, [None, nv])
    outer = (joo, io) if sch.sample_categorical(list(range(ORDERS)), [1] * ORDERS) == 0 else (io, joo)
    sch.reorder(*outer, ii, joi, ji, k, g)
    sch.parallel(sch.fuse(*outer))
    sch.tensorize(ii, unit.intrin(mr, nv, kg).name)

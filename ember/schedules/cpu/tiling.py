"""Register-tiled CPU schedules for the reductions that carry a model's arithmetic (matmul, gemm,
conv), in the manner of examples/kernels/gemm.py.

A kernel's output is the operator's result, possibly followed by an elementwise epilogue fused
after it (bias, activation, residual add). The accumulating stage (the *anchor*, found by its te
tag) gets a local copy (`cache_write`; when the anchor is not the output, the anchor itself is
then inlined into its readers) computed at the output's tile. Inside the tile the reduction
loops go outermost, the tile's rows are unrolled and its columns vectorized, so that the
accumulators live in registers. The loops outside the tile are fused into one parallel loop.

Stages tagged PACK (an operand copied once into a padded or transposed layout, or a padded
input) are computed at the root, in parallel; every other spatial intermediate is inlined.
"""

from __future__ import annotations

from ...ops.hints import PACK, lanes_dividing
from ...te.tensor import ComputeOp, Tensor, input_tensors_of
from ...tir.expr import as_int
from ..rules import inline_intermediates
from .default import parallel_vectorize


def find_anchor(outputs: list[Tensor], tag: str) -> ComputeOp | None:
    """The one stage tagged `tag` among the producers of `outputs`, or None."""
    found = [op for op in input_tensors_of(outputs) if isinstance(op, ComputeOp) and op.tag == tag]
    return found[0] if len(found) == 1 else None


def prepare(s, outputs: list[Tensor], anchor: ComputeOp, lanes: int, keep: tuple[ComputeOp, ...] = ()) -> None:
    """Schedule the PACK stages (for `lanes`: fp32 lanes of a register) but those in `keep`, which
    the caller places; inline every other spatial intermediate but the anchor and those in `keep`."""
    out_ops = {id(t.op) for t in outputs}
    stages = [op for op in input_tensors_of(outputs) if isinstance(op, ComputeOp) and id(op) not in out_ops]
    for op in reversed(stages):
        if op.tag == PACK and op is not anchor and not op.reduce_axis and op not in keep:
            schedule_pack(s, op.output(0), lanes)
    inline_intermediates(s.sch, among={op.name for op in stages
                                       if op is not anchor and op.tag != PACK and op not in keep})


def untiled(s, outputs: list[Tensor], anchor: ComputeOp, lanes: int) -> None:
    """For shapes the register tile does not fit: the PACK stages as usual, the anchor and the
    outputs each parallel over their outer loops (the anchor's reduction inside)."""
    prepare(s, outputs, anchor, lanes)
    for t in dict.fromkeys([anchor.output(0), *outputs]):
        parallel_vectorize(s, t, lanes)


def schedule_pack(s, t: Tensor, lanes: int) -> None:
    """A copy into a new layout (a transpose, as often as not): `lanes` x (vector) blocks of its
    last two axes, so that both the reads and the writes of a block stay in a few cache lines."""
    stage = s[t]
    axes = list(stage.op.axis)
    width = lanes_dividing(as_int(axes[-1].dom.extent), (lanes, lanes // 2))
    rows = as_int(axes[-2].dom.extent) if len(axes) >= 2 else None
    if width is None or rows is None or rows < lanes:
        parallel_vectorize(s, t, lanes)
        return
    ro, co, ri, ci = stage.tile(axes[-2], axes[-1], lanes, width)
    stage.parallel(stage.fuse(*axes[:-2], ro, co))
    stage.vectorize(ci)


def register_tile(m: int | None, n: int, lanes: int) -> tuple[int, int]:
    """(mr, nr) of a register tile over m rows (None: unknown) and n columns (a multiple of half
    a register's `lanes`): the widest vectors dividing n, rows while the accumulators fit the
    16-32 vector registers."""
    nr = lanes_dividing(n, (4 * lanes, 2 * lanes, lanes, lanes // 2)
                        if m is not None and m < 4 else (2 * lanes, lanes, lanes // 2))
    return min(m or 8, 256 // nr, 12), nr


def tile_rows_cols(s, out: Tensor, anchor: ComputeOp, row_axis: int | None, col_axis: int, mr: int, nr: int,
                   vector_cols: bool = True, block: int | None = None, row_block: int | None = None,
                   prefetch: str | None = None, blocks: tuple[int, int] | None = None,
                   vector_rows: bool = False, blocks_first: bool = False):
    """Tile `out` by mr rows (axis row_axis; None: no row axis) x nr columns (axis col_axis),
    compute the anchor at the tile with its reduction outside, rows unrolled, columns
    vectorized (or unrolled too, with vector_cols=False: the anchor then vectorizes its own
    last axis; with vector_rows too, the rows are vectorized inside the unrolled columns: an
    epilogue in vectors along the rows, stored with their stride). Every other axis of out stays
    outside the tile, fused into the parallel loop.
    With `block`, a tile wider than that many columns runs over them in blocks of `block`
    inside the reduction (accumulators in L1 rather than registers: a wide row of a GEMV).
    With `row_block` (a multiple of mr), the column tiles run over blocks of that many rows, one
    block after the other: the block of the left operand stays in L2 while the columns go by.
    Where out has no other axis of more than one element, the blocks are a serial loop around
    the parallel one, so that the threads share each block's tiles: one parallel loop over all
    the blocks gave each thread whole blocks (at two threads, ViT's 257 rows in blocks of 256 and 1
    left the second thread one row; in blocks of 56, 197 rows left it 85 to the first's 112).
    Over a symbolic number of rows, the parallel loop runs over the column tiles only, each
    running its row tiles in turn, and the full row tiles run a copy without guards.
    `prefetch` names b's buffer when it comes in panels one tile wide: the row tiles of a panel
    then fetch the next panel into the caches while they compute (ember.tir.transform.prefetch).
    With `blocks` (axis, factor), the tile also spans that many along a third axis, outermost in
    the tile and unrolled (a convolution's blocks of output channels: each input value loaded
    once for all of them); with `blocks_first` too, those blocks are the outermost loop, before
    every other axis of out (a convolution whose weights outweigh its input reads each block's
    weights once for all its rows, not once a row). Returns the loop the accumulation is computed
    at (a stage the tile alone reads may go there)."""
    stage = s[out]
    axes = list(stage.op.axis)
    if out.op is anchor:
        acc = s.cache_write(out, "local")
    else:  # accumulate in a local copy of the anchor (registers), read by out directly
        acc = s.cache_write(anchor.output(0), "local")
        s[anchor.output(0)].compute_inline()
    stage = s[out]
    co, ci = stage.split(axes[col_axis], factor=nr)
    outer, inner, serial, blocks_outside = [co], [ci], None, []
    rest = [a for k, a in enumerate(axes) if k not in (row_axis, col_axis, blocks and blocks[0])]
    if row_axis is not None:
        ro, ri = stage.split(axes[row_axis], factor=mr)
        outer, inner = [co, ro], [ri, ci]
        if row_block is not None:
            rb, ro = stage.split(ro, factor=row_block // mr)
            if all(as_int(a.dom.extent) == 1 for a in rest) and blocks is None:
                outer, blocks_outside = [co, ro], [*rest, rb]
                rest = []
            else:
                outer = [rb, co, ro]
        elif as_int(axes[row_axis].dom.extent) is None:
            # symbolic rows (a prefill of any length): the row tiles run one after the other inside
            # each parallel column tile. Fused into the parallel loop, the rows' symbolic extent
            # would divide its index, and no bound on the columns could be proven: every element
            # guarded, the tile scalar (a thousand times slower)
            outer, serial = [co], ro
    if blocks is not None:
        bo, bi = stage.split(axes[blocks[0]], factor=blocks[1])
        outer, inner = [bo, *outer], [bi, *inner]
        if blocks_first:
            rest, outer = [bo, *rest], outer[1:]
    if vector_rows:
        inner = [*inner[:-2], inner[-1], inner[-2]]
    stage.reorder(*blocks_outside, *rest, *outer, *([serial] if serial is not None else []), *inner)
    fused = stage.fuse(*rest, *outer) if len(rest) + len(outer) > 1 else outer[0]
    stage.parallel(fused)
    if prefetch is not None and row_axis is not None and serial is None:
        tiles = row_block // mr if row_block is not None else -(-as_int(axes[row_axis].dom.extent) // mr)
        if tiles > 1:  # (a single tile would fetch the next panel as fast as it reads its own)
            stage.pragma(fused, "prefetch_panels", (prefetch, tiles))
    at = fused if serial is None else serial
    for a in inner[:-1]:
        stage.unroll(a)
    if block is not None and nr > block:
        stage.vectorize(stage.split(inner[-1], factor=block)[1])
    elif vector_cols or vector_rows:
        stage.vectorize(inner[-1])
    else:
        stage.unroll(inner[-1])
    s[acc].compute_at(stage, at)
    if serial is not None:  # every row tile guarded: a copy without the guards for the full ones
        stage.pragma(serial, "version_guards")  # (ember.tir.transform.version_guards)
    elif _static_tail(axes[col_axis], nr) or (row_axis is not None and _static_tail(axes[row_axis], mr)):
        # the last tile guarded (1599 output columns in tiles of 12), and with it every tile, inside
        # the reduction too: the full tiles run a copy without the guards
        stage.pragma(fused, "version_guards")
    acc_stage = s[acc]
    spatial = list(acc_stage.op.axis)
    last = [spatial[-1]]
    if block is not None and nr > block:
        last = list(acc_stage.split(spatial[-1], factor=block))
    acc_stage.reorder(*acc_stage.op.reduce_axis, *spatial[:-1], *last)
    for a in spatial[:-1]:
        acc_stage.unroll(a)
    acc_stage.vectorize(last[-1])
    return at


def _static_tail(axis, factor: int) -> bool:
    """A static extent that `factor` does not divide (its last tile guarded)."""
    extent = as_int(axis.dom.extent)
    return extent is not None and extent % factor != 0

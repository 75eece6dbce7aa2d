"""CPU schedule of conv2d_nchwc_bf16 (ember.ops.conv_bf16): the padded bf16 input once per call, a
parallel vectorized loop; the sum in tiles of MR output columns x NV blocks of 16 channels, each
one call of a direct-convolution tile (ember.intrinsics.conv_bf16: AMX's where the target has it,
else AVX512-BF16's) where a tile divides the row; elsewhere (the interpreter, a target without
either) the same bf16 products summed in fp32 on fp32 vectors of 16 channels. The result and its
fused epilogue: at each tile, where the output is NCHW16c, else a parallel vectorized loop of its
own."""

from __future__ import annotations

from ...intrinsics import conv_bf16
from ...ops.conv_bf16 import ANCHOR, CAST
from ...tir.expr import as_int
from ..rules import inline_intermediates
from . import schedules
from .default import parallel_vectorize
from .tiling import find_anchor


def tile_for(target, acc_shape, w_shape, strides, dilations) -> conv_bf16.ConvTile | None:
    """The tile of a sum of shape (N, OCB, OH, OW, 16) by weights `w_shape` on `target`: AMX's
    where the target has it and its tiles fit, else AVX512-BF16's, else None."""
    columns, blocks = as_int(acc_shape[3]), as_int(acc_shape[1])
    _, cb, kh, kw, ip = (as_int(d) for d in w_shape[:5])
    geometry = (cb, kh, kw, ip, strides[1], *dilations)
    if {"amx-tile", "amx-bf16"} <= target.features and (fit := conv_bf16.choose_amx(columns, blocks, ip)):
        return conv_bf16.ConvTile(*fit, *geometry, unit="amx")
    if conv_bf16.FEATURE in target.features and (fit := conv_bf16.choose(columns, blocks)):
        return conv_bf16.ConvTile(*fit, *geometry)
    return None


@schedules("conv2d_nchwc_bf16")
def schedule_conv_bf16(s, outputs, target):
    anchor, cast = find_anchor(outputs, ANCHOR), find_anchor(outputs, CAST)
    if anchor is None or cast is None or len(outputs) != 1:
        return False
    inline_intermediates(s.sch, where=lambda block: block.name != cast.name)
    lanes = target.lanes()
    parallel_vectorize(s, cast.output(0), lanes)
    acc = anchor.output(0)
    w = anchor.input_tensors[1]
    strides, dilations = anchor.attrs["strides"], anchor.attrs["dilations"]
    tile = tile_for(target, acc.shape, w.shape, strides, dilations)
    if tile is not None and outputs[0].ndim == 5:
        tensorize_at_output(s, outputs[0], acc, tile)
        return None
    if tile is not None:
        tensorize(s, acc, tile)
    else:
        stage = s[acc]
        n, o, y, z, lane = stage.op.axis
        stage.reorder(n, o, y, z, *stage.op.reduce_axis, lane)
        stage.parallel(stage.fuse(o, y))
        stage.vectorize(lane)
    parallel_vectorize(s, outputs[0], lanes)
    return None


def tensorize(s, acc, tile: conv_bf16.ConvTile) -> None:
    """The sum `acc` in tiles of `tile`, the tiles of an image one parallel loop."""
    stage = s[acc]
    n, o, y, z, lane = stage.op.axis
    zo, zi = stage.split(z, factor=tile.mr)
    oo, oi = stage.split(o, factor=tile.nv)
    stage.reorder(n, oo, y, zo, zi, oi, lane, *stage.op.reduce_axis)
    stage.parallel(stage.fuse(oo, y, zo))
    stage.tensorize(zi, conv_bf16.intrin(tile))


def tensorize_at_output(s, out, acc, tile: conv_bf16.ConvTile) -> None:
    """The sum of each tile of the NCHW16c output computed where the output's tile is written
    (its epilogue reads the accumulators while they are in L1), the tiles of an image one
    parallel loop."""
    stage = s[out]
    n, o, y, z, lane = stage.op.axis
    zo, zi = stage.split(z, factor=tile.mr)
    oo, oi = stage.split(o, factor=tile.nv)
    stage.reorder(n, oo, y, zo, oi, zi, lane)
    fused = stage.fuse(oo, y, zo)  # (the images one after the other: a symbolic batch bounds no fused index)
    stage.parallel(fused)
    stage.vectorize(lane)
    local = s.cache_write(acc, "local")  # (on the stack, not the heap: a tile's accumulators)
    s[acc].compute_inline()
    s[local].compute_at(stage, fused)
    a = s[local]
    an, ao, ay, az, al = a.op.axis
    a.reorder(an, ay, az, ao, al, *a.op.reduce_axis)
    a.tensorize(az, conv_bf16.intrin(tile))

"""CPU schedules of the blocked-layout operators (ember.ops.layout): a register tile of output
columns x the channels of one output block (two or three for a dense convolution), the block in
vector lanes; a depthwise convolution pads in each tile the input that tile reads (two output
rows a tile at stride 1)."""

from __future__ import annotations

import math

from ...ops.hints import PACK
from ...ops.layout import ANCHOR, MAX_TILE_COLUMNS, POOL_ANCHOR
from ...te.tensor import ComputeOp
from ...tir.expr import as_int
from . import schedules
from .tiling import find_anchor, prepare, tile_rows_cols

TILE_ACCUMULATORS = 24  # vectors of a tile of several channel blocks (2 blocks x 12 columns; 28 spill)


@schedules("conv2d_nchwc")
def schedule_conv_nchwc(s, outputs, target):
    anchor = find_anchor(outputs, ANCHOR)
    if anchor is None or len(outputs) != 1 or outputs[0].ndim not in (4, 5):
        return False
    out = outputs[0]
    depthwise = len(anchor.reduce_axis) == 2  # the kernel window alone: a dense one sums over channels too
    pad = _padding(anchor) if depthwise and out.ndim == 5 else None
    prepare(s, outputs, anchor, target.lanes(), keep=(pad,) if pad is not None else ())
    columns = tile_columns(as_int(out.shape[3]))
    if out.ndim == 5:  # a tile of columns x one block of channels, the block in vector lanes
        local = s.cache_read(pad.output(0), "local", [anchor.output(0)]) if pad is not None else None
        # a dense convolution's tile spans two blocks of output channels where they pair up, else
        # three (24 channels in blocks of 8), each input value broadcast once for all of them
        nb = next((b for b in (2, 3) if as_int(out.shape[1]) % b == 0), None)
        blocks = (1, nb) if not depthwise and nb is not None else None
        if blocks is not None:
            columns = tile_columns(as_int(out.shape[3]), TILE_ACCUMULATORS // nb)
        elif local is not None and as_int(out.shape[2]) % 2 == 0 and _same_rows(pad, out):
            # a depthwise one's tile spans two output rows, which read 4 padded input rows where
            # one row read 3 (2 of them again for the next): MobileNetV2's stride-1 layers over
            # 112x112 and 56x56 10-15% faster; at stride 2, 5 rows for 2 are not (28x28: 8% slower)
            blocks = (2, 2)
            columns = tile_columns(as_int(out.shape[3]), TILE_ACCUMULATORS // 2)
        at = tile_rows_cols(s, out, anchor, 3, 4, columns, as_int(out.shape[4]), blocks=blocks,
                            blocks_first=not depthwise and blocks is not None and _weights_outweigh(anchor))
        if local is not None:
            s[pad.output(0)].compute_inline()
            s[local].compute_at(s[out], at)
            s[local].vectorize(s[local].op.axis[-1])
    else:  # written as NCHW: the same tile, its channels unrolled, read from the accumulators' lanes
        tile_rows_cols(s, out, anchor, 1, 3, as_int(anchor.output(0).shape[4]), columns, vector_cols=False)
    return None


def _weights_outweigh(anchor) -> bool:
    """More weights than input values per image: the tiles of a block of output channels go over
    all the rows before the next block (its weights then come from memory once, from L2 for the
    other rows), not each row over all the blocks (ResNeXt-50's 1024 -> 2048 1x1 over 7 x 7 read
    its 8 MiB of weights 7 times a call)."""
    w = next((t for t in anchor.input_tensors if t.ndim == 6), None)
    x = next((t for t in anchor.input_tensors if t.ndim in (4, 5)), None)
    if w is None or x is None:
        return False
    weights, inputs = math.prod(as_int(d) or 0 for d in w.shape), math.prod(as_int(d) or 0 for d in x.shape[1:])
    return weights > inputs > 0


def _padding(anchor):
    """The padded input stage of a conv2d_nchwc, or None."""
    return next((t.op for t in anchor.input_tensors if isinstance(t.op, ComputeOp) and t.op.tag == PACK), None)


def _same_rows(pad, out) -> bool:
    """A depthwise convolution with as many output rows as input rows (stride 1, same padding)."""
    return as_int(pad.input_tensors[0].shape[2]) == as_int(out.shape[2])


def tile_columns(width: int, most: int = MAX_TILE_COLUMNS) -> int:
    """Output columns per register tile: the largest divisor of width up to `most`, unless that
    is under half of min(width, most): then `most` with a partial last tile."""
    best = max(d for d in range(1, min(width, most) + 1) if width % d == 0)
    return best if 2 * best >= min(width, most) else most


@schedules("max_pool2d_nchwc", "avg_pool2d_nchwc")
def schedule_pool_nchwc(s, outputs, target):
    anchor = find_anchor(outputs, POOL_ANCHOR)
    if anchor is None or len(outputs) != 1 or outputs[0].ndim != 5:
        return False
    out, pad = outputs[0], _padding(anchor)
    prepare(s, outputs, anchor, target.lanes(), keep=(pad,) if pad is not None else ())
    # each tile pads only the input rows and columns it reads, as a depthwise convolution does (a
    # padded copy of the whole input cost more than the pooling: 112 x 112 x 64, 3 x 3 of stride 2)
    local = s.cache_read(pad.output(0), "local", [anchor.output(0)]) if pad is not None else None
    at = tile_rows_cols(s, out, anchor, 3, 4, tile_columns(as_int(out.shape[3])), as_int(out.shape[4]))
    if local is not None:
        s[pad.output(0)].compute_inline()
        s[local].compute_at(s[out], at)
        s[local].vectorize(s[local].op.axis[-1])
    return None

"""CPU schedules of the convolutions (ember.ops.conv): the accumulation in a register tile of
B * b output channels (B: the packed block, one vector of the target) x w output columns, written
back in vectors along the columns; grouped convolutions in tiles of 4 channels x one vector of
columns when the columns fill vectors."""

from __future__ import annotations

from ...ops.conv import ANCHOR, GROUPED
from ...ops.hints import lanes_dividing
from ...tir.expr import as_int
from . import schedules
from .tiling import find_anchor, prepare, tile_rows_cols, untiled


@schedules("conv1d", "conv2d", "conv3d", "conv_transpose2d", "conv_transpose3d")
def schedule_conv(s, outputs, target):
    anchor = find_anchor(outputs, ANCHOR) or find_anchor(outputs, GROUPED)
    if anchor is None or len(outputs) != 1 or outputs[0].ndim != len(anchor.axis) - (anchor.tag == ANCHOR):
        return False
    out = outputs[0]
    width, vector = as_int(out.shape[-1]), target.lanes()
    if anchor.tag == ANCHOR:
        # a tile of block * blocks output channels x cols output columns, the columns unrolled in
        # the accumulation (a vector of a block's channels each: the accumulation's last axis);
        # the output (and its epilogue) is written in vectors along the columns, the tile
        # transposed in registers, unless a tail of columns would guard the lanes: then each
        # column's vectors of channels, stored with a channel's stride (wav2vec2's GELU after a
        # convolution over 1599 columns, scalar erf per element before)
        block = as_int(anchor.output(0).shape[-1])
        # two blocks where they pair up, but in a 1-d convolution whose taps do not overlap or whose
        # rows are long: there one block of up to 24 columns was faster, measured on wav2vec2's
        # 512 -> 512 layers (benchmarks/conv1d_layers.py, one thread, AMD EPYC Zen 5): k=3 s=2 over
        # 1599 and 799 columns 190 -> 205 GFLOP/s, k=2 s=2 over 99 and 49 117 -> 195; k=3 over 399
        # and 199 columns ran 170 -> 117, and keep two blocks
        pairs = as_int(anchor.output(0).shape[1]) % 2 == 0 and not (
            out.ndim == 3 and (width >= 512 or _taps_apart(anchor, width)))
        blocks = 2 if pairs else 1
        cols = _tile_width(width, 12 if blocks == 2 else 24)
        prepare(s, outputs, anchor, vector)
        tail = width % cols != 0
        tile_rows_cols(s, out, anchor, 1, out.ndim - 1, block * blocks, cols, vector_cols=not tail, vector_rows=tail)
        return None
    # grouped: 4 output channels x one vector of output columns, when the columns fill vectors
    lanes = lanes_dividing(width, (vector, vector // 2, vector // 4))
    if lanes is None:
        untiled(s, outputs, anchor, vector)
        return None
    prepare(s, outputs, anchor, vector)
    tile_rows_cols(s, out, anchor, 1, out.ndim - 1, 4 if as_int(out.shape[1]) % 4 == 0 else 1, lanes)
    return None


def _tile_width(width: int, most: int) -> int:
    """Output columns per register tile: the divisor of width nearest `most` from below, or
    `most` (with a tail) when width has none above a third of it."""
    best = max(d for d in range(1, min(width, most) + 1) if width % d == 0)
    return best if best * 3 > min(width, most) else min(width, most)



def _taps_apart(anchor, width: int) -> bool:
    """Whether a 1-d convolution's taps read disjoint input columns (its kernel no wider than its
    stride), from the width of its (padded) input and of its output."""
    kernel = as_int(anchor.reduce_axis[-1].dom.extent)
    length = max(as_int(t.shape[-1]) for t in anchor.input_tensors if t.ndim == 3)
    return width > 1 and kernel <= (length - kernel) // (width - 1)

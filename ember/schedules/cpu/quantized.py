"""The CPU schedules of qgemm, qconv and im2col (ember.ops.quantized). qgemm: a register tile of rows x
panels of 16 int32 accumulators (`tile`), the reduction over K-groups of 4 outside it, the tiles
over the operand that is larger in the outer parallel loop (each panel of weights, or each row
block of activations, read from memory once), and the epilogue
(requantization and whatever elementwise work fused after it) vectorized over the tile's columns
as it leaves the registers. qconv: qgemm's, its patches gathered into a local array per row tile
where those are the outer loop (at the root of the kernel, all of them, where the column panels
are).

Where the target has AVX512-VNNI (`avx512vnni` among its features) the tile's inner product is
tensorized onto `vpdpbusd` (ember.intrinsics.vnni's NATIVE form, with no test of the CPU per
call: a model built for the feature refuses to load without it; one instruction per panel and
K-group, the accumulators in registers across the K loop since their reset is a block of its
own); elsewhere it is
portable C, the 4 products of a group unrolled and the 16 lanes of a panel vectorized, which
the compiler turns into the vector unit's own widening multiply-adds.
"""

from __future__ import annotations

from ...intrinsics import vnni
from ...ops.hints import PACK, lanes_dividing
from ...ops.quantized import ANCHOR, IM2COL, LANES
from ...te.tensor import ComputeOp
from ...tir.expr import as_int
from ..rules import inline_intermediates
from . import schedules
from .tiling import find_anchor, prepare

FEATURE = "avx512vnni"  # the compiler's name of the feature (ember.target.FEATURES)


ACCUMULATORS = 28  # vector registers a tile's accumulators may take (of 32: the rest broadcast and load)


def tile(m: int, n: int) -> tuple[int, int]:
    """(rows, panels) of the register tile: up to 4 panels of 16 accumulators and the most rows
    (up to 7) dividing m that keep them within ACCUMULATORS registers (7 x 4 for ResNet's 56 x 56,
    28 x 28, 14 x 14 and 7 x 7 outputs alike)."""
    panels = next(p for p in (4, 2, 1) if (n // LANES) % p == 0)
    return next(r for r in (7, 6, 5, 4, 3, 2, 1) if m % r == 0 and r * panels <= ACCUMULATORS), panels


@schedules("qgemm", "qconv")
def schedule_qgemm(s, outputs, target):
    anchor = find_anchor(outputs, ANCHOR)
    if anchor is None or len(outputs) != 1 or outputs[0].ndim != 2:
        return False
    out = outputs[0]
    m, n = (as_int(d) for d in out.shape)
    if m is None or n is None or n != as_int(anchor.output(0).shape[1]) * LANES:
        return False
    rows, panels = tile(m, n)
    rows_in = next(t for t in anchor.input_tensors if t.op.tag in (PACK, IM2COL))
    patches = rows_in.op if rows_in.op.tag == IM2COL else None  # qconv's
    if patches is not None:
        padded = [t.op for t in patches.input_tensors if isinstance(t.op, ComputeOp) and t.op.tag == PACK]
        prepare(s, outputs, anchor, target.lanes(), keep=(patches, *padded))
        for op in padded:
            pad_pixels(s, op.output(0))
    elif isinstance(rows_in.op.input_tensors[0].op, ComputeOp):  # a quantization fused before: once, at the root
        prepare(s, outputs, anchor, target.lanes())
    else:  # the kernel's input itself, read in place
        inline_intermediates(s.sch)
    # qconv's patches: where the row tiles are the outer loop, each one's gathered into a local
    # array before its column tiles; else all of them at the root (few: m < n), each once
    gathered = patches is not None and n <= m
    if gathered:
        window = s.cache_read(rows_in, "local", [anchor.output(0)])
        s[rows_in].compute_inline()
    elif patches is not None:
        copy_runs(s, rows_in, patches.attrs["run"], _widths(target), parallel=True)
    acc = s.cache_write(anchor.output(0), "local")
    s[anchor.output(0)].compute_inline()
    stage = s[out]
    i, j = stage.op.axis
    io, jo, ii, ji = stage.tile(i, j, rows, panels * LANES)
    if n > m:  # more weights than activations: each column panel read once, from L2, by every row tile
        stage.reorder(jo, io, ii, ji)
        io, jo = jo, io
    at = jo if gathered else stage.fuse(io, jo)
    stage.parallel(io if gathered else at)
    stage.unroll(ii)
    s[acc].compute_at(stage, at)
    if gathered:
        s[window].compute_at(stage, io)
        copy_runs(s, window, patches.attrs["run"], _widths(target))
    # the epilogue a panel (16 lanes) at a time: wider vector types GCC splits badly
    panel, lanes = stage.split(ji, factor=LANES)
    stage.unroll(panel)
    stage.vectorize(lanes)
    inner = s[acc]
    ai, ap, al = inner.op.axis
    ko, ki = inner.op.reduce_axis
    if FEATURE in target.features:
        inner.reorder(ko, ai, ap, al, ki)
        inner.unroll(ai)
        inner.unroll(ap)
        inner.decompose_reduction(ko)
        inner.tensorize(al, vnni.native(rows, panels))
    else:
        inner.reorder(ko, ai, ap, ki, al)
        inner.unroll(ai)
        inner.unroll(ap)
        inner.unroll(ki)
        inner.vectorize(al)
    return None


def pad_pixels(s, padded) -> None:
    """im2col's padded copy of a narrow input (N, H', W' * Cp) a pixel of Cp bytes at a time, its
    rows in parallel: the test of the bounds once per pixel, not per byte."""
    stage = s[padded]
    b, y, zc = stage.op.axis
    _, c = stage.split(zc, factor=padded.op.attrs["channels"])
    stage.parallel(stage.fuse(b, y))
    stage.unroll(c)


def _widths(target) -> tuple[int, ...]:
    """The vector widths of qconv's copies of uint8 patches: a register's bytes, halves, quarters."""
    lanes = target.lanes("uint8")
    return lanes, lanes // 2, lanes // 4


@schedules("im2col")
def schedule_im2col(s, outputs, target):
    """The patches (and whatever fused before them: a layout change, the quantization) one row per
    parallel iteration, each contiguous run of the row (a tap's channels, or a kernel row's taps
    of a narrow input) a vector copy; the padded copy of a narrow input (ember.ops.quantized) a
    stage of its own, before."""
    out = outputs[0]
    if len(outputs) != 1 or not isinstance(out.op, ComputeOp) or out.op.tag != IM2COL:
        return False
    prepare(s, outputs, out.op, target.lanes())
    copy_runs(s, out, out.op.attrs["run"], (target.lanes(),), parallel=True)
    return None


def copy_runs(s, patches, run: int, widths: tuple[int, ...], parallel: bool = False) -> None:
    """A stage of im2col's rows (`patches`) a row at a time (in parallel, or not), each contiguous
    `run` of the row (a tap's channels, or a kernel row's taps of a narrow input) in vector copies
    of the first of `widths` (lanes) dividing it."""
    stage = s[patches]
    rows, cols = stage.op.axis
    _, inner = stage.split(cols, factor=run)
    width = lanes_dividing(run, widths)
    if width is not None and run > width:
        outer, inner = stage.split(inner, factor=width)
        stage.unroll(outer)
    if parallel:
        stage.parallel(rows)
    if width is not None or run & (run - 1) == 0:
        stage.vectorize(inner)
    # (else a run of a first layer's taps, 7 x 4 bytes, which C copies as it likes: no vector type has that width)

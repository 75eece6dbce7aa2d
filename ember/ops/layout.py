"""Blocked channel layouts (NCHW[x]c, Liu et al., "Optimizing CNN Model Inference on CPUs"):
`layout_transform` between layouts, and the operators that read and write them, what
ember.passes.layout rewrites conv2d, max_pool2d and avg_pool2d into: `conv2d_nchwc`, `max_pool2d_nchwc`,
`avg_pool2d_nchwc`.

A layout is a string of axes: an upper-case letter is a primal axis (N, C, H, W; O, I for
weights), a number and a lower-case letter a block of that many of its primal axis, which the
upper-case one then counts in blocks of. "NCHW16c" is (N, C/16, H, W, 16); "OIHW16i32o" is
(O/32, I/16, H, W, 16, 32). Plain NCHW is NCHW1c with the unit axis left out.

conv2d_nchwc(x, w, bias?; strides, padding, dilations, groups, in_channels):
- x: (N, C/ib, H, W, ib), or plain (N, C, H, W) (ib = 1: a first layer of 3 channels reads its
  input as it comes); a dense convolution with in_channels sums over x's first in_channels
  channels only (the rest are a padded block's padding lanes, ember.passes.layout: 24 channels
  in two blocks of 16, whose last 8 lanes no output reads);
- w: (OC/ob, C/ib, KH, KW, ib, ob) ("OIHW{ib}i{ob}o"), or for a depthwise convolution (groups
  = C = OC, the block of x and of the output the same) (C/ob, 1, KH, KW, 1, ob) ("OIHW1i{ob}o"),
  or for other groups (ib = ob, grouped_blocks) (OC/ob, the input blocks of an output block's
  groups, KH, KW, ob, ob), zero where a lane's group does not take the channel (grouped_weights);
- bias: (OC,); out: (N, OC/ob, OH, OW, ob), or with out_layout="NCHW" (N, OC, OH, OW).
The te compute pads x in its own layout (PACK) and accumulates over (input channel blocks,
kernel rows, kernel columns, channels of a block) into (N, OC/ob, OH, OW, ob), tagged
"conv_nchwc". The schedule keeps a tile of output columns x the ob channels of one output block
in registers (the block in vector lanes), the reduction outside the tile, each input value
broadcast against one vector of weights; the loops outside the tile run in parallel. The output
tile is what an epilogue over the same layout (bias, activation, residual add) reads, so fusion
keeps it in registers too. An NCHW output is written from the same tile, a channel at a time.

max_pool2d_nchwc, avg_pool2d_nchwc: the pool's window over x in NCHW{b}c, a tile of output columns x
one block (an average's sum in the tile, divided as it is stored: ember.ops.pool.window_mean).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .. import te
from ..graph.core import Dim, TensorType
from ..tir import dtype as dt
from ..tir.expr import as_int, cast
from .common import check_float, result_dtype, te_shape
from .conv import MAX_SPAN, conv_reference, pack_weights, window_attrs, window_out
from .hints import PACK
from .pool import pool_attrs, window_mean
from .registry import REQUIRED, OpDef, OpTypeError, get, register

ANCHOR, POOL_ANCHOR = "conv_nchwc", "pool_nchwc"
MAX_TILE_COLUMNS = 14  # output columns per register tile (accumulators: columns x vectors of a block)


# -- layouts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """A parsed layout string: its axes in order, each (letter, block size or None)."""

    text: str
    axes: tuple[tuple[str, int | None], ...]

    @property
    def primal(self) -> str:
        """The primal axes in the order they appear ("NCHW" for "NCHW16c")."""
        return "".join(a for a, f in self.axes if f is None)

    def block(self, axis: str) -> int | None:
        """The block size of primal `axis`, None when it is not blocked."""
        return next((f for a, f in self.axes if a == axis.lower() and f is not None), None)


def parse_layout(text: str) -> Layout:
    if not isinstance(text, str) or not re.fullmatch(r"(\d*[A-Za-z])+", text):
        raise OpTypeError(f"layout {text!r} must be axis letters, upper case for primal axes and a number and a "
                          "lower-case letter for a block of one (e.g. 'NCHW16c')")
    axes = []
    for number, letter in re.findall(r"(\d*)([A-Za-z])", text):
        if letter.isupper() and number:
            raise OpTypeError(f"layout {text!r}: the primal axis {letter} takes no size; a block is lower case")
        if letter.islower() and (not number or int(number) < 1):
            raise OpTypeError(f"layout {text!r}: the block {letter} needs a positive size (e.g. 16{letter})")
        axes.append((letter, int(number) if number else None))
    letters = [a for a, _ in axes]
    if len(set(letters)) != len(letters):
        raise OpTypeError(f"layout {text!r} names an axis twice")
    orphans = [a for a, f in axes if f is not None and a.upper() not in letters]
    if orphans:
        raise OpTypeError(f"layout {text!r}: block(s) {orphans} of no primal axis")
    return Layout(text, tuple(axes))


def blocked(primal: str, axis: str, block: int) -> str:
    """The layout of `primal` with `axis` in blocks of `block` ("NCHW", "C", 16: "NCHW16c");
    `primal` itself when block is 1."""
    return primal if block == 1 else f"{primal}{block}{axis.lower()}"


def _layouts(op: str, attrs) -> tuple[Layout, Layout]:
    try:
        src, dst = parse_layout(attrs["src"]), parse_layout(attrs["dst"])
    except OpTypeError as e:
        raise OpTypeError(f"{op}: {e}") from None
    if sorted(src.primal) != sorted(dst.primal):
        raise OpTypeError(f"{op}: layouts {src.text!r} and {dst.text!r} have different primal axes")
    return src, dst


def primal_sizes(op: str, layout: Layout, shape) -> dict[str, Dim]:
    """The size of each primal axis of a tensor of `shape` in `layout`."""
    if len(shape) != len(layout.axes):
        raise OpTypeError(f"{op}: a tensor of shape {tuple(shape)} is not in layout {layout.text!r} "
                          f"({len(layout.axes)} axes)")
    sizes = dict(zip((a for a, _ in layout.axes), shape))
    for a, f in layout.axes:
        if f is not None and sizes[a] != f:
            raise OpTypeError(f"{op}: axis {a} of shape {tuple(shape)} must be {f} in layout {layout.text!r}")
    out = {}
    for a in layout.primal:
        f = layout.block(a)
        if f is not None and isinstance(sizes[a], str):
            raise OpTypeError(f"{op}: the blocked axis {a} of {tuple(shape)} must have a known size")
        out[a] = sizes[a] if f is None else sizes[a] * f
    return out


def shape_in(op: str, layout: Layout, sizes: dict[str, Dim]) -> tuple[Dim, ...]:
    """The shape of a tensor of primal `sizes` in `layout`; blocks must divide their axis."""
    shape = []
    for a, f in layout.axes:
        if f is not None:
            shape.append(f)
            continue
        f = layout.block(a)
        if f is not None and (isinstance(sizes[a], str) or sizes[a] % f):
            raise OpTypeError(f"{op}: axis {a} of size {sizes[a]} does not split into blocks of {f} "
                              f"(layout {layout.text!r})")
        shape.append(sizes[a] if f is None else sizes[a] // f)
    return tuple(shape)


def _infer_transform(types, attrs):
    (x,) = types
    src, dst = _layouts("layout_transform", attrs)
    return [TensorType(shape_in("layout_transform", dst, primal_sizes("layout_transform", src, x.shape)), x.dtype)]


def to_primal(x: np.ndarray, layout: Layout) -> np.ndarray:
    """x in `layout` as an array of its primal axes, in the order of layout.primal."""
    where = {a: k for k, (a, _) in enumerate(layout.axes)}
    order = [k for a in layout.primal for k in ([where[a]] + ([where[a.lower()]] if layout.block(a) else []))]
    sizes = [x.shape[where[a]] * (layout.block(a) or 1) for a in layout.primal]
    return x.transpose(order).reshape(sizes)


def from_primal(x: np.ndarray, primal: str, layout: Layout) -> np.ndarray:
    """x (axes in the order of `primal`) in `layout`."""
    x = x.transpose([primal.index(a) for a in layout.primal])
    split, names = [], []
    for a, n in zip(layout.primal, x.shape):
        f = layout.block(a)
        split += [n] if f is None else [n // f, f]
        names += [a] if f is None else [a, a.lower()]
    return np.ascontiguousarray(x.reshape(split).transpose([names.index(a) for a, _ in layout.axes]))


def convert_layout(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    """x from layout `src` to layout `dst` (NumPy)."""
    src_l, dst_l = parse_layout(src), parse_layout(dst)
    return from_primal(to_primal(x, src_l), src_l.primal, dst_l)


def _compute_transform(inputs, attrs, out_types):
    (x,) = inputs
    src, dst = _layouts("layout_transform", attrs)

    def element(*i):
        at = dict(zip((a for a, _ in dst.axes), i))
        coord = {a: at[a] if dst.block(a) is None else at[a] * dst.block(a) + at[a.lower()] for a in dst.primal}
        index = []
        for a, f in src.axes:
            if f is not None:  # a block: the position inside it
                index.append(coord[a.upper()] % f)
            else:
                index.append(coord[a] if src.block(a) is None else coord[a] // src.block(a))
        return x[tuple(index)]

    return [te.compute(te_shape(out_types[0], inputs), element, name="layout_transform")]


register(OpDef(
    name="layout_transform",
    infer=_infer_transform,
    reference=lambda inputs, attrs: [convert_layout(inputs[0], attrs["src"], attrs["dst"])],
    compute=_compute_transform,
    pattern="injective",
    attrs={"src": REQUIRED, "dst": REQUIRED},
    doc="The tensor from layout src to layout dst (e.g. 'NCHW' to 'NCHW16c'); blocks must divide their axis.",
))


# -- conv2d_nchwc --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockedConv:
    """What conv2d_nchwc's operand shapes say."""

    in_block: int  # 1: plain NCHW input
    out_channels: int
    out_block: int
    kernel: tuple[int, int]


def blocked_conv(op: str, x: TensorType, w: TensorType, groups) -> BlockedConv:
    check_float(op, x)
    if x.rank not in (4, 5) or w.rank != 6:
        raise OpTypeError(f"{op}: x must be N, C/ib, H, W, ib (or plain N, C, H, W) and w OC/ob, C/ib, KH, KW, "
                          f"ib, ob; got {x.shape} and {w.shape}")
    if any(isinstance(d, str) for d in x.shape[1:]) or any(isinstance(d, str) for d in w.shape):
        raise OpTypeError(f"{op}: x {x.shape} may only have a symbolic batch dimension, w {w.shape} none")
    in_block = x.shape[4] if x.rank == 5 else 1
    channels = x.shape[1] * in_block
    ocb, icb, kh, kw, wib, ob = w.shape
    if groups == 1:
        if (icb, wib) != (x.shape[1], in_block):
            raise OpTypeError(f"{op}: w {w.shape} must read {x.shape[1]} blocks of {in_block} input channels "
                              f"(x {x.shape})")
        return BlockedConv(in_block, ocb * ob, ob, (kh, kw))
    if groups == channels and (icb, wib) == (1, 1) and ob == in_block and ocb * ob == channels:
        return BlockedConv(in_block, channels, ob, (kh, kw))
    if isinstance(groups, int) and groups > 1 and wib == ob == in_block and (icb, ocb * ob) == grouped_blocks(
            channels, ocb * ob, groups, ob):
        return BlockedConv(in_block, ocb * ob, ob, (kh, kw))
    raise OpTypeError(f"{op}: groups={groups!r} must be 1, or the {channels} channels of x {x.shape} for a "
                      f"depthwise w of shape ({x.shape[1]}, 1, KH, KW, 1, {in_block}), or groups whose blocks of "
                      f"{in_block} channels read whole blocks of x (see grouped_blocks); w is {w.shape}")


def grouped_blocks(channels: int, out_channels: int, groups: int, block: int) -> tuple[int, int] | None:
    """(input blocks an output block reads, output channels) of a grouped conv2d_nchwc over
    `channels` in blocks of `block`, else None. A block of output channels lies in one group (the
    group's input channels are whole blocks) or spans whole groups (their input channels together
    one or more whole blocks, at most MAX_SPAN groups); the weights are zero where a lane's group
    does not take the channel."""
    if groups < 2 or channels % groups or out_channels % groups or channels % block or out_channels % block:
        return None
    cg, ocg = channels // groups, out_channels // groups
    if ocg % block == 0 and cg % block == 0:
        return cg // block, out_channels
    if block % ocg == 0 and block // ocg <= MAX_SPAN and block // ocg * cg % block == 0:
        return block // ocg * cg // block, out_channels
    return None


def grouped_weights(w: np.ndarray, groups: int, block: int) -> np.ndarray:
    """(OC, C/groups, KH, KW) weights as a grouped conv2d_nchwc reads them: (OC/block, the input
    blocks of a block's groups, KH, KW, block, block), zero where a lane's group does not take the
    channel (ember.ops.conv.pack_weights' blocks, their input channels in blocks)."""
    packed = pack_weights(w, groups, block)  # (OC/block, span * C/groups, KH, KW, block)
    blocks, channels, kh, kw, _ = packed.shape
    return np.ascontiguousarray(packed.reshape(blocks, channels // block, block, kh, kw, block)
                                .transpose(0, 1, 3, 4, 2, 5))


def _infer_conv(types, attrs):
    op = "conv2d_nchwc"
    x, w = types[:2]
    result_dtype(op, *types)
    conv = blocked_conv(op, x, w, attrs["groups"])
    if len(types) == 3 and tuple(types[2].shape) != (conv.out_channels,):
        raise OpTypeError(f"{op}: bias of shape {types[2].shape} must be ({conv.out_channels},)")
    used = attrs["in_channels"]
    if used is not None and (attrs["groups"] != 1 or x.rank != 5 or not isinstance(used, int)
                             or not 0 < used <= x.shape[1] * x.shape[4]):
        raise OpTypeError(f"{op}: in_channels={used!r} must be a count of x's {x.shape} channels, for a blocked "
                          f"x and groups 1")
    strides, pads_b, pads_e, dilations = window_attrs(op, attrs, 2)
    out_hw = tuple(window_out(op, *args) for args in zip(x.shape[2:4], conv.kernel, strides, pads_b, pads_e,
                                                          dilations))
    if attrs["out_layout"] == "NCHW":
        return [TensorType((x.shape[0], conv.out_channels) + out_hw, x.dtype)]
    if attrs["out_layout"] != "NCHWc":
        raise OpTypeError(f"{op}: out_layout must be 'NCHWc' (blocks of w's output block) or 'NCHW', "
                          f"got {attrs['out_layout']!r}")
    return [TensorType((x.shape[0], conv.out_channels // conv.out_block) + out_hw + (conv.out_block,), x.dtype)]


def _reference_conv(inputs, attrs):
    x, w = inputs[:2]
    conv = blocked_conv("conv2d_nchwc", TensorType(x.shape, x.dtype.name), TensorType(w.shape, w.dtype.name),
                        attrs["groups"])
    x_layout = blocked("NCHW", "C", conv.in_block) if x.ndim == 5 else "NCHW"
    strides, pads_b, pads_e, dilations = window_attrs("conv2d_nchwc", attrs, 2)
    groups, ob = attrs["groups"], conv.out_block
    x = convert_layout(x, x_layout, "NCHW")
    if groups != 1 and w.shape[1] * w.shape[4] > 1:  # grouped: as one group of block-diagonal weights
        ocb, icb, kh, kw, ib, _ = w.shape
        first = _first_block(x.shape[1], conv.out_channels, groups, ob, ib)
        dense = np.zeros((conv.out_channels, x.shape[1], kh, kw), w.dtype)
        for c in range(ocb):
            dense[c * ob:(c + 1) * ob, first(c) * ib:(first(c) + icb) * ib] = \
                w[c].transpose(4, 0, 3, 1, 2).reshape(ob, icb * ib, kh, kw)
        w, groups = dense, 1
    else:
        used = attrs["in_channels"]
        x, w = x[:, :used], convert_layout(w, f"OIHW{w.shape[4]}i{ob}o", "OIHW")[:, :used]
    out = conv_reference(x, w, inputs[2] if len(inputs) == 3 else None, strides, pads_b, pads_e, dilations, groups)
    plain = attrs["out_layout"] == "NCHW"
    return [out if plain else convert_layout(out, "NCHW", blocked("NCHW", "C", conv.out_block))]


def _padded(x, pads_b, pads_e, fill=None):
    """x with `fill` (default 0) around its spatial axes (2 and 3), pads_b before and pads_e
    after, in its own layout; x itself without pads."""
    if not any(pads_b) and not any(pads_e):
        return x
    size = [as_int(d) for d in x.shape[2:4]]
    shape = list(x.shape)
    shape[2:4] = [n + b + e for n, b, e in zip(size, pads_b, pads_e)]

    def element(*i):  # (n, c, h, w) or (n, c, h, w, k)
        q = (i[2] - pads_b[0], i[3] - pads_b[1])
        inside = te.all(q[0] >= 0, q[0] < size[0], q[1] >= 0, q[1] < size[1])
        return te.if_then_else(inside, x[i[:2] + q + i[4:]], te.const(0, x.dtype) if fill is None else fill)

    return te.compute(shape, element, name="x_padded", tag=PACK)


def _first_block(channels: int, out_channels: int, groups: int, ob: int, ib: int):
    """The first input block output block c reads: 0 for one group, else its first group's."""
    if groups == 1:
        return lambda c: 0
    cg, ocg = channels // groups, out_channels // groups
    return lambda c: c * ob // ocg * cg // ib


def _compute_conv(inputs, attrs, out_types):
    x, w = inputs[:2]
    bias = inputs[2] if len(inputs) == 3 else None
    strides, pads_b, pads_e, dilations = window_attrs("conv2d_nchwc", attrs, 2)
    ocb, icb, kh, kw, ib, ob = (as_int(d) for d in w.shape)
    acc_dtype = dt.compute_dtype(x.dtype)
    xp = _padded(x, pads_b, pads_e)
    rh, rw = te.reduce_axis((0, kh), name="kh"), te.reduce_axis((0, kw), name="kw")

    def tap(n, c, oh, ow, k):
        """x at channel k of block c, under kernel tap (rh, rw) of output pixel (oh, ow)."""
        at = (n, c, oh * strides[0] + rh * dilations[0], ow * strides[1] + rw * dilations[1])
        return cast(acc_dtype, xp[at + ((k,) if x.ndim == 5 else ())])

    groups = attrs["groups"]
    if groups != 1 and icb == ib == 1:  # depthwise: one block of x against the same block of w
        def element(n, c, oh, ow, k):
            return te.sum(tap(n, c, oh, ow, k) * cast(acc_dtype, w[c, 0, rh, rw, 0, k]), axis=[rh, rw])
    elif attrs["in_channels"] not in (None, icb * ib):  # over the used channels, then the kernel window
        rc = te.reduce_axis((0, attrs["in_channels"]), name="ic")

        def element(n, c, oh, ow, k):
            at = (n, rc // ib, oh * strides[0] + rh * dilations[0], ow * strides[1] + rw * dilations[1], rc % ib)
            return te.sum(cast(acc_dtype, xp[at]) * cast(acc_dtype, w[c, rc // ib, rh, rw, rc % ib, k]),
                          axis=[rc, rh, rw])
    else:  # over the input channel blocks (a group's: from its first), the kernel window, a block's channels
        rc = te.reduce_axis((0, icb), name="icb")
        ri = te.reduce_axis((0, ib), name="ici") if ib > 1 else 0
        first = _first_block(as_int(x.shape[1]) * ib, ocb * ob, groups, ob, ib)

        def element(n, c, oh, ow, k):
            return te.sum(tap(n, first(c) + rc, oh, ow, ri) * cast(acc_dtype, w[c, rc, rh, rw, ri, k]),
                          axis=[rc, rh, rw] + ([ri] if ib > 1 else []))

    out_hw = tuple(out_types[0].shape[2:4])
    acc = te.compute((x.shape[0], ocb) + out_hw + (ob,), element, name="conv_nchwc", tag=ANCHOR)
    plain = attrs["out_layout"] == "NCHW"
    if bias is None and acc_dtype == x.dtype and not plain:
        return [acc]

    def finish(*i):  # (n, c, h, w, k), or (n, c, h, w) when plain
        value = acc[i[0], i[1] // ob, i[2], i[3], i[1] % ob] if plain else acc[i]
        channel = i[1] if plain else i[1] * ob + i[4]
        return cast(x.dtype, value if bias is None else value + cast(acc_dtype, bias[channel]))

    return [te.compute((x.shape[0], ocb * ob) + out_hw if plain else acc.shape, finish, name="conv_nchwc_out")]


register(OpDef(
    name="conv2d_nchwc",
    infer=_infer_conv,
    reference=_reference_conv,
    compute=_compute_conv,
    pattern="out_elementwise_fusable",
    attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilations": (1, 1), "groups": 1, "out_layout": "NCHWc",
           "in_channels": None},
    num_inputs=(2, 3),
    doc="2-d convolution in blocked channel layouts: x NCHW{ib}c (or NCHW), w OIHW{ib}i{ob}o, out NCHW{ob}c.",
    takes_prologue=False,
))


# -- max_pool2d_nchwc, avg_pool2d_nchwc -------------------------------------------------------------


def _plain_type(op: str, x: TensorType) -> TensorType:
    """The NCHW type of an NCHW{b}c one."""
    if x.rank != 5 or any(isinstance(d, str) for d in x.shape[1:]):
        raise OpTypeError(f"{op}_nchwc: x must be N, C/b, H, W, b of known sizes but N, got {x.shape}")
    return TensorType((x.shape[0], x.shape[1] * x.shape[4]) + tuple(x.shape[2:4]), x.dtype)


def _pool_op(op: str) -> None:
    """Register `op`_nchwc (op: max_pool2d or avg_pool2d): op's window over x in NCHW{b}c."""

    def infer(types, attrs):
        (x,) = types
        (out,) = get(op).infer([_plain_type(op, x)], attrs)
        return [TensorType((x.shape[0], x.shape[1]) + tuple(out.shape[2:]) + (x.shape[4],), x.dtype)]

    def reference(inputs, attrs):
        (x,) = inputs  # (N, C/b, H, W, b), b = 1 among them (which a blocked Layout does not name)
        n, cb, h, w, b = x.shape
        (out,) = get(op).reference([x.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w)], attrs)
        return [out.reshape(n, cb, b, *out.shape[2:]).transpose(0, 1, 3, 4, 2)]

    def compute(inputs, attrs, out_types):
        (x,) = inputs
        kernel = attrs["kernel"]
        strides, pads_b, _, dilations = window_attrs(f"{op}_nchwc", attrs, 2, tuple(kernel))
        out_hw = [as_int(d) for d in out_types[0].shape[2:4]]
        # padded as far as the last window reaches (a ceil_mode window may reach past the padding)
        reach = [(o - 1) * s + d * (k - 1) + 1 for o, s, d, k in zip(out_hw, strides, dilations, kernel)]
        pads_e = [max(r - as_int(n) - b, 0) for r, n, b in zip(reach, x.shape[2:4], pads_b)]
        rh, rw = te.reduce_axis((0, kernel[0]), name="kh"), te.reduce_axis((0, kernel[1]), name="kw")

        def tap(xp, n, c, h, w, k):
            return xp[n, c, h * strides[0] + rh * dilations[0], w * strides[1] + rw * dilations[1], k]

        shape = te_shape(out_types[0], inputs)
        if op == "max_pool2d":
            xp = _padded(x, pads_b, pads_e, te.max.identity(x.dtype))
            return [te.compute(shape, lambda *i: te.max(tap(xp, *i), axis=[rh, rw]), name=f"{op}_nchwc",
                               tag=POOL_ANCHOR)]
        xp, acc_dtype = _padded(x, pads_b, pads_e), dt.compute_dtype(x.dtype)
        acc = te.compute(shape, lambda *i: te.sum(cast(acc_dtype, tap(xp, *i)), axis=[rh, rw]), name="pool_sum",
                         tag=POOL_ANCHOR)
        return [window_mean(acc, x.dtype, attrs, [as_int(d) for d in x.shape[2:4]], slice(2, 4), f"{op}_nchwc")]

    register(OpDef(
        name=f"{op}_nchwc",
        infer=infer,
        reference=reference,
        compute=compute,
        pattern="reduction",
        attrs=pool_attrs(2),
        doc=f"{op} over x in NCHW{{b}}c, out in the same layout.",
    ))


for _op in ("max_pool2d", "avg_pool2d"):
    _pool_op(_op)

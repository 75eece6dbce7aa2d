"""Convolutions: conv1d, conv2d, conv3d (x: N, C, spatial...; w: OC, C/groups, kernel...) and
conv_transpose2d, conv_transpose3d (w: C, OC/groups, kernel...), one n-d definition each, with
ONNX-style padding (begin..., end...), strides,
dilations and groups; and the sliding-window arithmetic that pooling shares.

The te compute, for n spatial dimensions:
- a padded input stage (PACK), when there is padding; for a transposed one it also spreads the
  input out by the strides (zeros between), which makes the transposed convolution a plain
  convolution with the kernel flipped and its in/out channels swapped;
- groups == 1: the weights are packed as (OC/B, C, kernel..., B) (PACK; output channels padded
  to a multiple of B, the target's fp32 lanes, attrs["lanes"]: 16 for AVX-512), the accumulation
  (tagged "conv") runs over (N, OC/B, out spatial..., B) with the B output channels of a block in
  one vector, and the result is read back as NCHW: the schedule keeps a tile of B*b channels x w
  output columns in registers (B read from the accumulation's shape), each input value
  broadcast against the packed weights (one load, one FMA per vector), and writes it (with the
  bias and any fused epilogue) in vectors along the output columns, the tile transposed in
  registers;
- depthwise (groups == C == OC): the same, with the padded input also in blocks of B channels
  (N, C/B, spatial..., B), so that any stride reads whole vectors;
- other groups, when a block of B output channels lies in one group (B divides OC/groups) or
  spans at most MAX_SPAN whole groups (OC/groups divides B): the same accumulation, each block
  reading its groups' input channels against packed weights that are zero where a lane's group
  does not take the channel (_grouped_blocks);
- else: out[n, oc, ...] directly (tagged "conv_grouped"), the schedule vectorizing the output
  columns when their count allows.
float16 accumulates in float32. Bias is added as the accumulation is read back.

Packed weights (attrs w_block = B > 0, set by ember.passes.pack_weights on constant weights): w is
the PACK stage's (blocks, ..., B) array itself (pack_weights below, w_shape its (OC, C/groups,
kernel...)), packed once at compile time instead of at every call.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import as_int, cast, const
from .common import check_float, result_dtype
from .hints import PACK
from .registry import OpDef, OpTypeError, register

ANCHOR, GROUPED = "conv", "conv_grouped"
# the most groups one block of output channels may span (a grouped convolution computed as blocks
# of a vector of output channels: that many times its arithmetic, see _grouped_blocks)
MAX_SPAN = 4


# -- sliding windows -----------------------------------------------------------------------------


def window_attrs(op: str, attrs, n: int, kernel: tuple[int, ...] | None = None):
    """(strides, pads_begin, pads_end, dilations) of an n-dimensional window, checked."""
    strides = tuple(attrs["strides"]) if attrs["strides"] is not None else kernel
    dilations = tuple(attrs["dilations"])
    pads = tuple(attrs["padding"])
    for what, v, length in (("strides", strides, n), ("dilations", dilations, n), ("padding", pads, 2 * n)):
        if len(v) != length or not all(isinstance(x, int) for x in v):
            raise OpTypeError(f"{op}: {what} {v} must be {length} integers"
                              + (" (begin_1..begin_n, end_1..end_n)" if what == "padding" else ""))
    if min(strides) < 1 or min(dilations) < 1:
        raise OpTypeError(f"{op}: strides {strides} and dilations {dilations} must be >= 1")
    return strides, pads[:n], pads[n:], dilations


def window_out(op: str, size: int, k: int, stride: int, pad_b: int, pad_e: int, dilation: int,
               ceil_mode: bool = False) -> int:
    """Outputs of a window sliding over size + pads; in ceil_mode a last partial window counts
    if it starts inside the input or its begin padding (PyTorch's and ONNX's rule)."""
    span = size + pad_b + pad_e - dilation * (k - 1) - 1
    if span < 0:
        raise OpTypeError(f"{op}: the window (kernel {k}, dilation {dilation}) is larger than the padded "
                          f"input ({size} + {pad_b} + {pad_e})")
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_b:
        out -= 1
    return out


def _static_dims(op: str, t: TensorType, what: str) -> tuple[int, ...]:
    for d in t.shape[1:]:
        if isinstance(d, str):
            raise OpTypeError(f"{op}: {what} {t.shape} may only have a symbolic batch dimension")
    return tuple(t.shape[1:])


# -- type inference ------------------------------------------------------------------------------


def _conv_types(op: str, n: int, types: list[TensorType], attrs, transposed: bool):
    x, w = types[:2]
    if not transposed and attrs["w_block"]:
        w = _packed_type(op, w, attrs, x)
    dtype = result_dtype(op, *types)
    check_float(op, x)
    if x.rank != n + 2 or w.rank != n + 2:
        names = "N, C" + "".join(", " + d for d in "DHW"[3 - n:])
        raise OpTypeError(f"{op}: x must be rank {n + 2} ({names}) and w rank {n + 2}, got {x.shape} and {w.shape}")
    c, *spatial = _static_dims(op, x, "x")
    w_shape = _static_dims(op, TensorType((1,) + w.shape), "w")
    groups = attrs["groups"]
    if not isinstance(groups, int) or groups < 1:
        raise OpTypeError(f"{op}: groups must be a positive integer, got {groups!r}")
    if transposed:
        w_in, oc_per_group, *kernel = w_shape
        oc = oc_per_group * groups
        if w_in != c:
            raise OpTypeError(f"{op}: x has {c} channels but w (in, out/groups, k...) of shape {w.shape} takes {w_in}")
    else:
        oc, c_per_group, *kernel = w_shape
        if c_per_group * groups != c:
            raise OpTypeError(f"{op}: x has {c} channels but w of shape {w.shape} with groups={groups} takes "
                              f"{c_per_group * groups}")
    if c % groups or oc % groups:
        raise OpTypeError(f"{op}: groups={groups} does not divide the input channels {c} and output channels {oc}")
    if len(types) == 3 and tuple(types[2].shape) != (oc,):
        raise OpTypeError(f"{op}: bias of shape {types[2].shape} must be ({oc},)")
    strides, pads_b, pads_e, dilations = window_attrs(op, attrs, n)
    if transposed:
        out_pad = tuple(attrs["output_padding"])
        if len(out_pad) != n or any(p < 0 or p >= max(s, d) for p, s, d in zip(out_pad, strides, dilations)):
            raise OpTypeError(f"{op}: output_padding {out_pad} must be {n} integers smaller than the stride "
                              "or the dilation")
        out_spatial = tuple((size - 1) * s - pb - pe + d * (k - 1) + op_ + 1 for size, k, s, pb, pe, d, op_ in
                            zip(spatial, kernel, strides, pads_b, pads_e, dilations, out_pad))
        if min(out_spatial) < 1:
            raise OpTypeError(f"{op}: the padding {attrs['padding']} leaves no output of input {tuple(spatial)}")
    else:
        out_spatial = tuple(window_out(op, *args) for args in
                            zip(spatial, kernel, strides, pads_b, pads_e, dilations))
    return [TensorType((x.shape[0], oc) + out_spatial, dtype)]


# -- packed weights ------------------------------------------------------------------------------


def packed_form(oc: int, cg: int, groups: int, block: int) -> str | None:
    """How conv_compute packs the weights of a convolution in blocks of `block` output channels:
    "dense" (one group, or a block inside one group: (blocks, cg, kernel..., block)), "depthwise"
    ((blocks, kernel..., block)), "spanning" (a block over span whole groups, block-diagonal:
    (blocks, span * cg, kernel..., block)); None where it reads w as it is (per output element)."""
    ocg = oc // groups
    if groups == 1:
        return "dense"
    if cg == 1 and oc == groups:
        return "depthwise"
    if ocg % block == 0:
        return "dense"
    if block % ocg == 0 and groups % (block // ocg) == 0 and block // ocg <= MAX_SPAN:
        return "spanning"
    return None


def packed_shape(w_shape, groups: int, block: int) -> tuple[int, ...] | None:
    """The shape of the packed weights of (OC, C/groups, kernel...) `w_shape` (see packed_form)."""
    oc, cg, *kernel = w_shape
    form = packed_form(oc, cg, groups, block)
    blocks = -(-oc // block)
    if form is None:
        return None
    return {"dense": (blocks, cg), "depthwise": (blocks,),
            "spanning": (blocks, block // (oc // groups) * cg)}[form] + tuple(kernel) + (block,)


def pack_weights(w: np.ndarray, groups: int, block: int) -> np.ndarray:
    """(OC, C/groups, kernel...) weights as conv_compute's PACK stage computes them (zero past OC,
    and where a spanning block's lane does not take the channel)."""
    oc, cg, *kernel = w.shape
    form = packed_form(oc, cg, groups, block)
    blocks = -(-oc // block)
    full = np.zeros((blocks * block,) + w.shape[1:], w.dtype)
    full[:oc] = w
    if form == "depthwise":
        full = full[:, 0]
    elif form == "spanning":
        span = block // (oc // groups)
        wide = np.zeros((blocks * block, span * cg) + tuple(kernel), w.dtype)
        for lane_group in range(span):  # the output channels of the block's lane_group-th group
            rows = (np.arange(blocks * block) % block) // (oc // groups) == lane_group
            wide[rows, lane_group * cg:(lane_group + 1) * cg] = full[rows]
        full = wide
    return np.ascontiguousarray(np.moveaxis(full.reshape((blocks, block) + full.shape[1:]), 1, -1))


def unpack_weights(wp: np.ndarray, w_shape, groups: int) -> np.ndarray:
    """pack_weights' inverse: the (OC, C/groups, kernel...) weights of packed `wp`."""
    oc, cg, *kernel = w_shape
    block = wp.shape[-1]
    full = np.moveaxis(wp, -1, 1).reshape((wp.shape[0] * block,) + wp.shape[1:-1])[:oc]
    form = packed_form(oc, cg, groups, block)
    if form == "depthwise":
        return np.ascontiguousarray(full[:, None])
    if form == "spanning":
        lane_group = (np.arange(oc) % block) // (oc // groups)
        return np.ascontiguousarray(full[np.arange(oc)[:, None], lane_group[:, None] * cg + np.arange(cg)])
    return np.ascontiguousarray(full)


def _packed_type(op: str, w: TensorType, attrs, x: TensorType) -> TensorType:
    """The (OC, C/groups, kernel...) type of packed weights `w`, their shape checked."""
    w_shape, block, groups = attrs["w_shape"], attrs["w_block"], attrs["groups"]
    w_shape = tuple(w_shape) if isinstance(w_shape, (tuple, list)) else w_shape
    if not isinstance(w_shape, tuple) or len(w_shape) != x.rank or not all(isinstance(d, int) and d > 0
                                                                            for d in w_shape):
        raise OpTypeError(f"{op}: packed weights (w_block={block}) need w_shape, the (OC, C/groups, kernel...) "
                          f"shape they were packed from, as {x.rank} positive integers; got {w_shape!r}")
    if not isinstance(block, int) or block < 1 or not isinstance(groups, int) or groups < 1 or w_shape[0] % groups:
        raise OpTypeError(f"{op}: w_block {block!r} and groups {groups!r} must be positive integers, groups "
                          f"dividing the {w_shape[0]} output channels")
    expected = packed_shape(w_shape, groups, block)
    if expected is None or tuple(w.shape) != expected:
        raise OpTypeError(f"{op}: weights {w_shape} packed in blocks of {block} (groups={attrs['groups']}) have "
                          f"shape {expected}, got {w.shape}")
    return TensorType(w_shape, w.dtype)


# -- NumPy references ----------------------------------------------------------------------------


def conv_reference(x: np.ndarray, w: np.ndarray, bias, strides, pads_b, pads_e, dilations, groups: int):
    """N-d grouped convolution (cross-correlation) in NumPy; w is (OC, C/groups, kernel...)."""
    n = x.ndim - 2
    acc = dt.to_numpy(dt.compute_dtype(x.dtype.name))
    width = [(0, 0), (0, 0)] + [(max(b, 0), max(e, 0)) for b, e in zip(pads_b, pads_e)]
    xp = np.pad(x.astype(acc), width)
    crop = (slice(None),) * 2 + tuple(slice(-min(b, 0), xp.shape[2 + k] + min(e, 0))
                                      for k, (b, e) in enumerate(zip(pads_b, pads_e)))
    xp = xp[crop]
    kernel = w.shape[2:]
    out_spatial = [(xp.shape[2 + k] - dilations[k] * (kernel[k] - 1) - 1) // strides[k] + 1 for k in range(n)]
    oc, cg = w.shape[0], w.shape[1]
    ocg = oc // groups
    out = np.zeros((x.shape[0], oc, *out_spatial), acc)
    for taps in np.ndindex(*kernel):
        window = xp[(slice(None), slice(None)) + tuple(
            slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(taps, dilations, out_spatial, strides))]
        for g in range(groups):
            xs = window[:, g * cg:(g + 1) * cg]
            ws = w[(slice(g * ocg, (g + 1) * ocg), slice(None)) + taps]
            out[:, g * ocg:(g + 1) * ocg] += np.einsum("nc...,oc->no...", xs, ws.astype(acc))
    if bias is not None:
        out += bias.astype(acc).reshape((1, oc) + (1,) * n)
    return out.astype(x.dtype)


def _reference_conv(inputs, attrs):
    x, w = inputs[:2]
    if attrs["w_block"]:
        w = unpack_weights(w, attrs["w_shape"], attrs["groups"])
    strides, pads_b, pads_e, dilations = window_attrs("conv", attrs, x.ndim - 2)
    return [conv_reference(x, w, inputs[2] if len(inputs) == 3 else None, strides, pads_b, pads_e, dilations,
                           attrs["groups"])]


def transposed_as_conv(w_shape, attrs):
    """A transposed convolution as a convolution: the input spread by the strides and padded by
    (pads_b', pads_e'); the kernel flipped, in/out channels swapped per group. Returns
    (pads_b', pads_e')."""
    kernel = w_shape[2:]
    n = len(kernel)
    strides, pads_b, pads_e, dilations = window_attrs("conv_transpose", attrs, n)
    full = [d * (k - 1) for k, d in zip(kernel, dilations)]
    return (tuple(f - pb for f, pb in zip(full, pads_b)),
            tuple(f - pe + op_ for f, pe, op_ in zip(full, pads_e, attrs["output_padding"])))


def _flip_weights(w: np.ndarray, groups: int) -> np.ndarray:
    """(C, OC/g, k...) transposed-conv weights -> (OC, C/g, k...) conv weights, flipped."""
    c, ocg = w.shape[:2]
    cg = c // groups
    wg = w.reshape((groups, cg, ocg) + w.shape[2:]).swapaxes(1, 2)
    wg = np.flip(wg, axis=tuple(range(3, w.ndim + 1)))
    return np.ascontiguousarray(wg.reshape((groups * ocg, cg) + w.shape[2:]))


def _reference_conv_transpose(inputs, attrs):
    x, w = inputs[:2]
    n = x.ndim - 2
    strides, _, _, dilations = window_attrs("conv_transpose", attrs, n)
    spread = np.zeros(x.shape[:2] + tuple((s_ - 1) * st + 1 for s_, st in zip(x.shape[2:], strides)), x.dtype)
    spread[(slice(None), slice(None)) + tuple(slice(None, None, st) for st in strides)] = x
    pads_b, pads_e = transposed_as_conv(w.shape, attrs)
    return [conv_reference(spread, _flip_weights(w, attrs["groups"]), inputs[2] if len(inputs) == 3 else None,
                           (1,) * n, pads_b, pads_e, dilations, attrs["groups"])]


# -- te compute ----------------------------------------------------------------------------------


def _input_stage(x, pads_b, pads_e, spread, block: int | None = None):
    """x spread by `spread` (zeros between elements) and padded by pads_b/pads_e (negative:
    cropped); x itself when nothing changes. With `block`: channels in blocks of that many, the
    last axis, (N, C/block, spatial..., block), as a depthwise convolution reads them."""
    blocked = block is not None
    if not blocked and not any(pads_b) and not any(pads_e) and all(s == 1 for s in spread):
        return x
    channels = as_int(x.shape[1])
    spatial = [as_int(d) for d in x.shape[2:]]
    shape = [(size - 1) * s + 1 + pb + pe for size, s, pb, pe in zip(spatial, spread, pads_b, pads_e)]

    def element(n, c, pos, conds):
        src = []
        for p, size, s, pb in zip(pos, spatial, spread, pads_b):
            q = p - pb
            conds += [q >= 0, q < (size - 1) * s + 1]
            if s > 1:
                conds.append(q % s == 0)
                q = q // s
            src.append(q)
        return te.if_then_else(te.all(*conds), x[(n, c) + tuple(src)], te.const(0, x.dtype))

    if not blocked:
        return te.compute(tuple(x.shape[:2]) + tuple(shape), lambda *i: element(i[0], i[1], i[2:], []),
                          name="x_padded", tag=PACK)
    return te.compute(
        (x.shape[0], -(-channels // block)) + tuple(shape) + (block,),
        lambda *i: element(i[0], i[1] * block + i[-1], i[2:-1],
                           [] if channels % block == 0 else [i[1] * block + i[-1] < channels]),
        name="x_blocked", tag=PACK)


def conv_compute(x, weight, oc: int, cg: int, kernel, strides, dilations, groups: int, bias, out_spatial,
                 pads_b, pads_e, spread, block: int, prepacked=None):
    """The te convolution of x padded by pads_b/pads_e (and spread, see _input_stage);
    weight(oc, ic, *taps) is the weight element (an expression: transposed convolutions remap
    it); `block` output channels per packed weight block (the target's fp32 lanes); `prepacked`: the
    weights already packed (pack_weights), read in place of the PACK stage."""
    n = len(kernel)
    acc_dtype = dt.compute_dtype(x.dtype)
    ic = te.reduce_axis((0, cg), name="ic")
    taps = [te.reduce_axis((0, k), name=f"k{d}") for d, k in enumerate(kernel)]

    def window(pos):
        return tuple(p * s + t * d for p, t, s, d in zip(pos, taps, strides, dilations))

    def packed_weights(shape, element):
        """Weights in blocks of `block` output channels (the last axis), zero past oc."""
        if prepacked is not None:
            return prepacked

        def packed(*i):
            o = i[0] * block + i[-1]
            value = cast(acc_dtype, element(o, i[1:-1]))
            return value if oc % block == 0 else te.if_then_else(o < oc, value, const(0, acc_dtype))

        return te.compute(shape + (block,), packed, name="w_packed", tag=PACK)

    def read_back(acc):
        """The blocked accumulation as N, OC, spatial..., plus the bias, in x's dtype."""
        def element(*i):
            value = acc[(i[0], i[1] // block) + i[2:] + (i[1] % block,)]
            return cast(x.dtype, value if bias is None else value + cast(acc_dtype, bias[i[1]]))

        return te.compute((x.shape[0], oc) + tuple(out_spatial), element, name="conv_out")

    blocks = -(-oc // block)
    acc_shape = (x.shape[0], blocks) + tuple(out_spatial) + (block,)
    if groups == 1:
        xp = _input_stage(x, pads_b, pads_e, spread)
        wp = packed_weights((blocks, cg) + tuple(kernel), lambda o, rest: weight(o, *rest))
        return read_back(te.compute(acc_shape, lambda *i: te.sum(
            cast(acc_dtype, xp[(i[0], ic) + window(i[2:2 + n])]) * wp[(i[1], ic, *taps, i[-1])], axis=[ic, *taps]),
            name="conv", tag=ANCHOR))
    if cg == 1 and oc == groups:  # depthwise: channel blocks of the input against the same of w
        xb = _input_stage(x, pads_b, pads_e, spread, block)
        wp = packed_weights((blocks,) + tuple(kernel), lambda o, rest: weight(o, 0, *rest))
        return read_back(te.compute(acc_shape, lambda *i: te.sum(
            cast(acc_dtype, xb[(i[0], i[1]) + window(i[2:2 + n]) + (i[-1],)]) * wp[(i[1], *taps, i[-1])],
            axis=taps), name="conv", tag=ANCHOR))
    ocg = oc // groups
    if packed_form(oc, cg, groups, block) is not None:
        return read_back(_grouped_blocks(x, weight, block, cg, ocg, kernel, window, (ic, taps), acc_shape,
                                         _input_stage(x, pads_b, pads_e, spread), packed_weights))
    xp = _input_stage(x, pads_b, pads_e, spread)
    acc = te.compute(
        (x.shape[0], oc) + tuple(out_spatial),
        lambda *i: te.sum(cast(acc_dtype, xp[(i[0], i[1] // ocg * cg + ic) + window(i[2:])])
                          * cast(acc_dtype, weight(i[1], ic, *taps)), axis=[ic, *taps]),
        name="conv", tag=GROUPED)
    if bias is None and acc_dtype == x.dtype:
        return acc

    def finish(*i):
        return cast(x.dtype, acc[i] if bias is None else acc[i] + cast(acc_dtype, bias[i[1]]))

    return te.compute(acc.shape, finish, name="conv_out")


def _grouped_blocks(x, weight, block: int, cg: int, ocg: int, kernel, window, reduce_axes, acc_shape, xp,
                    packed_weights):
    """A grouped convolution as blocks of `block` output channels in one vector (the dense
    accumulation's layout and schedule). A block inside one group (ocg a multiple of block) reads
    that group's cg input channels; a block spanning span = block / ocg groups reads their
    span * cg channels against block-diagonal packed weights (zero where a lane's group does not
    take the channel): span times the arithmetic, in whole vectors, where the per-group form
    filled a vector only when the output columns did (a 28-wide map: 4 lanes of 16)."""
    ic, taps = reduce_axes
    span = max(block // ocg, 1)
    acc_dtype = dt.compute_dtype(x.dtype)

    def base(blk):  # the first input channel a block reads
        return blk * (span * cg) if span > 1 else blk * block // ocg * cg

    def element(o, rest):
        c, *t = rest
        if span == 1:
            return weight(o, c, *t)
        c = c + (o // block) * span * cg - o // ocg * cg  # the channel within o's group
        return te.if_then_else(te.all(c >= 0, c < cg), cast(acc_dtype, weight(o, c, *t)), const(0, acc_dtype))

    reduce_ic = te.reduce_axis((0, span * cg), name="ic") if span > 1 else ic
    wp = packed_weights((acc_shape[1], span * cg) + tuple(kernel), element)
    n = len(kernel)
    return te.compute(acc_shape, lambda *i: te.sum(
        cast(acc_dtype, xp[(i[0], base(i[1]) + reduce_ic) + window(i[2:2 + n])]) * wp[(i[1], reduce_ic, *taps, i[-1])],
        axis=[reduce_ic, *taps]), name="conv", tag=ANCHOR)


def _compute_conv(inputs, attrs, out_types):
    x, w = inputs[:2]
    n = x.ndim - 2
    strides, pads_b, pads_e, dilations = window_attrs("conv", attrs, n)
    oc, cg, *kernel = tuple(attrs["w_shape"]) if attrs["w_block"] else [as_int(d) for d in w.shape]
    return [conv_compute(x, lambda o, c, *t: w[(o, c) + t], oc, cg, kernel, strides, dilations, attrs["groups"],
                         inputs[2] if len(inputs) == 3 else None, out_types[0].shape[2:], pads_b, pads_e, (1,) * n,
                         attrs["w_block"] or attrs["lanes"], prepacked=w if attrs["w_block"] else None)]


def _compute_conv_transpose(inputs, attrs, out_types):
    x, w = inputs[:2]
    n = x.ndim - 2
    strides, _, _, dilations = window_attrs("conv_transpose", attrs, n)
    w_shape = [as_int(d) for d in w.shape]
    pads_b, pads_e = transposed_as_conv(w_shape, attrs)
    groups = attrs["groups"]
    c, ocg, *kernel = w_shape
    cg = c // groups

    def weight(o, ic, *taps):
        return w[(o // ocg * cg + ic, o % ocg) + tuple(k - 1 - t for k, t in zip(kernel, taps))]

    return [conv_compute(x, weight, ocg * groups, cg, kernel, (1,) * n, dilations, groups,
                         inputs[2] if len(inputs) == 3 else None, out_types[0].shape[2:], pads_b, pads_e, strides,
                         attrs["lanes"])]


# -- registration --------------------------------------------------------------------------------


def _conv_op(name: str, n: int) -> OpDef:
    return OpDef(
        name=name,
        infer=lambda types, attrs: _conv_types(name, n, types, attrs, transposed=False),
        reference=_reference_conv,
        compute=_compute_conv,
        pattern="out_elementwise_fusable",
        attrs={"strides": (1,) * n, "padding": (0,) * (2 * n), "dilations": (1,) * n, "groups": 1, "w_block": 0,
               "w_shape": None},
        num_inputs=(2, 3),
        doc=f"{n}-d convolution (cross-correlation), ONNX-style padding, grouped; w_block > 0: w packed in blocks "
            "of that many output channels (pack_weights), w_shape its (OC, C/groups, kernel...).",
        lanes=True,
        takes_prologue=False,
    )


def _conv_transpose_op(name: str, n: int) -> OpDef:
    return OpDef(
        name=name,
        infer=lambda types, attrs: _conv_types(name, n, types, attrs, transposed=True),
        reference=_reference_conv_transpose,
        compute=_compute_conv_transpose,
        pattern="out_elementwise_fusable",
        attrs={"strides": (1,) * n, "padding": (0,) * (2 * n), "output_padding": (0,) * n, "dilations": (1,) * n,
               "groups": 1},
        num_inputs=(2, 3),
        doc=f"{n}-d transposed convolution (the gradient of conv{n}d by its input), w as (in, out/groups, k...).",
        lanes=True,
        takes_prologue=False,
    )


for _n in (1, 2, 3):
    register(_conv_op(f"conv{_n}d", _n))
for _n in (2, 3):
    register(_conv_transpose_op(f"conv_transpose{_n}d", _n))

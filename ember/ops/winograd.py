"""conv2d_winograd(x, u, bias?, residual?; padding, relu, residual): a 3x3, stride-1 convolution of
one group over NCHW{ib}c x by Winograd's F(m x m, 3 x 3) (ember.tir.winograd), its weights given
transformed and packed, u = G w G^T as (alpha^2, OC/ob, C, ob), m read from alpha^2 (16: F(2x2),
36: F(4x4)); out (N, OC/ob, OH, OW, ob). The epilogue a ResNet block gives the convolution is
part of the operator, applied in the output transform's registers: the bias, a residual of the
output's shape (the fourth input, attrs["residual"]), a ReLU (attrs["relu"]). ember.passes.winograd
makes it from conv2d_nchwc.

The kernel is one te.extern over a scratch V (alpha^2, rows, C) of transformed input tiles: a
parallel loop of winograd_input calls (R tiles each), then a parallel loop of winograd_product
calls (R x RG tiles x NB blocks of output channels each: the GEMMs over the channels in a
register tile of R tiles x NB vectors, and the output transform with the epilogue); their C in
ember.codegen.c_winograd, the calling conventions in ember.tir.routines. R is sized to the
target's registers (12 tiles x 2 vectors with AVX-512's 32, 6 x 2 with 16) and to the tile
count (the fewest padded tiles); RG so that one call's products stay in L2. The product calls
run pair of output blocks by pair, its tiles' calls in turn: a thread's consecutive calls read
the same weights, and the partial last call of each pair spreads over the threads.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir import winograd
from ..tir.expr import Buffer, Var, as_int, const
from ..tir.routines import WINOGRAD_INPUT, WINOGRAD_PRODUCT
from ..tir.stmt import Allocate, CallRoutine, For, Pointer, seq
from .layout import blocked, convert_layout
from .registry import OpDef, OpTypeError, register

NAME = "conv2d_winograd"
PRODUCTS_BYTES = 128 * 1024  # one product call's alpha^2 x tiles x blocks vectors of sums (L2)


def _shapes(types, attrs):
    x, u = types[:2]
    if x.dtype != "float32" or u.dtype != "float32":
        raise OpTypeError(f"{NAME}: x and u must be float32, got {x.dtype} and {u.dtype}")
    if x.rank != 5 or u.rank != 4 or not x.is_static or not u.is_static:
        raise OpTypeError(f"{NAME}: x must be N, C/ib, H, W, ib and u alpha^2, OC/ob, C, ob, of known sizes; got "
                          f"{x.shape} and {u.shape}")
    taps, ocb, c, ob = u.shape
    m = {(t + 2) ** 2: t for t in winograd.TILES}.get(taps)
    if m is None or c != x.shape[1] * x.shape[4]:
        raise OpTypeError(f"{NAME}: u {u.shape} must hold 16 or 36 taps (F(2x2) or F(4x4)) over the {x.shape[1]} x "
                          f"{x.shape[4]} channels of x")
    pads = tuple(attrs["padding"])
    if len(pads) != 4 or not all(isinstance(p, int) and 0 <= p <= 2 for p in pads):
        raise OpTypeError(f"{NAME}: padding {pads} must be 4 integers from 0 to 2 (top, left, bottom, right)")
    out_h, out_w = x.shape[2] + pads[0] + pads[2] - 2, x.shape[3] + pads[1] + pads[3] - 2
    if min(out_h, out_w) < 1:
        raise OpTypeError(f"{NAME}: x {x.shape} padded by {pads} is smaller than the 3x3 kernel")
    return m, (x.shape[0], ocb, out_h, out_w, ob)


def _infer(types, attrs):
    _, out = _shapes(types, attrs)
    extra = types[2:]
    residual = bool(attrs["residual"])
    if len(extra) - residual not in (0, 1):
        raise OpTypeError(f"{NAME}: takes x, u, bias?, residual? (residual={residual}), got {len(types)} inputs")
    if len(extra) - residual == 1 and tuple(extra[0].shape) != (out[1] * out[4],):
        raise OpTypeError(f"{NAME}: bias of shape {extra[0].shape} must be ({out[1] * out[4]},)")
    if residual and tuple(extra[-1].shape) != out:
        raise OpTypeError(f"{NAME}: the residual {extra[-1].shape} must have the output's shape {out}")
    return [TensorType(out, "float32")]


def _reference(inputs, attrs):
    x, u = inputs[:2]
    m, _ = _shapes([TensorType(x.shape, "float32"), TensorType(u.shape, "float32")], attrs)
    layout = blocked("NCHW", "C", x.shape[4])
    out_layout = blocked("NCHW", "C", u.shape[3])
    pads = tuple(attrs["padding"])
    out_hw = (x.shape[2] + pads[0] + pads[2] - 2, x.shape[3] + pads[1] + pads[3] - 2)
    y = winograd.convolve(convert_layout(x, layout, "NCHW"), u, m, pads[:2], out_hw)
    if len(inputs) - attrs["residual"] == 3:
        y = y + inputs[2].astype(np.float64)[None, :, None, None]
    if attrs["residual"]:
        y = y + convert_layout(inputs[-1], out_layout, "NCHW")
    if attrs["relu"]:
        y = np.maximum(y, 0)
    return [convert_layout(y.astype(np.float32), "NCHW", out_layout)]


def plan(tiles: int, m: int, ob: int, blocks: int, lanes: int) -> tuple[int, int, int]:
    """(R, RG, NB): R tiles x NB blocks of output channels a register tile, R x RG tiles a
    product call. R from the target's registers: of the widths from half the registers' worth
    (or all the tiles, when fewer) up to all of it, the one with the fewest padded tiles (the
    largest of those)."""
    most = 12 if lanes >= 16 else 6
    r = min(range(min(most // 2, tiles), most + 1), key=lambda r: (-(-tiles // r) * r - tiles, -r))
    nb = 2 if blocks % 2 == 0 else 1
    rg = max(1, min(-(-tiles // r), PRODUCTS_BYTES // ((m + 2) ** 2 * r * nb * ob * 4)))
    return r, rg, nb


def _compute(inputs, attrs, out_types):
    x, u = inputs[:2]
    n, _, h, w, ib = (as_int(d) for d in x.shape)
    taps, ocb, c, ob = (as_int(d) for d in u.shape)
    m = {(t + 2) ** 2: t for t in winograd.TILES}[taps]
    out = tuple(out_types[0].shape)
    pads = tuple(attrs["padding"])
    grid = winograd.tile_grid(out[2], out[3], m)
    tiles = n * grid[0] * grid[1]
    r, rg, nb = plan(tiles, m, ob, ocb, attrs["lanes"])
    calls = -(-tiles // (r * rg))
    rows = calls * r * rg
    has_bias = len(inputs) - attrs["residual"] == 3

    def build(bufs, outs):
        (y,) = outs
        v = Buffer("winograd_v", (const(taps * rows * c),), "float32")
        t_in, t_out = Var("tile", dt.INDEX_DTYPE), Var("work", dt.INDEX_DTYPE)
        read_in = CallRoutine(WINOGRAD_INPUT, (("m", m), ("ib", ib), ("r", r)), (Pointer(bufs[0], const(0)),),
                              (Pointer(v, const(0)),),
                              (t_in * r,) + tuple(const(s) for s in (tiles, rows, c, h, w, *grid, pads[0], pads[1], n)))
        params = (("m", m), ("c", c), ("ob", ob), ("r", r), ("rg", rg), ("nb", nb), ("bias", has_bias),
                  ("residual", bool(attrs["residual"])), ("relu", bool(attrs["relu"])))
        pairs = ocb // nb
        product = CallRoutine(WINOGRAD_PRODUCT, params,
                              (Pointer(v, const(0)),) + tuple(Pointer(b, const(0)) for b in bufs[1:]),
                              (Pointer(y, const(0)),),
                              (t_out % calls * (r * rg), t_out // calls) + tuple(
                                  const(s) for s in (tiles, rows, ocb, out[2], out[3], *grid, n)))
        return Allocate(v, seq(For(t_in, const(0), const(rows // r), "parallel", read_in),
                               For(t_out, const(0), const(calls * pairs), "parallel", product)))

    return te.extern([(out, "float32")], list(inputs), build, name=NAME)


register(OpDef(
    name=NAME,
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="opaque",
    attrs={"padding": (1, 1, 1, 1), "relu": False, "residual": False},
    num_inputs=(2, 4),
    doc="3x3 stride-1 convolution over NCHW{b}c by Winograd's F(2x2) or F(4x4), weights transformed "
        "(alpha^2, OC/ob, C, ob), with its bias, residual add and ReLU.",
    lanes=True,
))

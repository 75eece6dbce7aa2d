"""grid_sample(x, grid; mode, padding_mode, align_corners): ONNX GridSample (torch's
F.grid_sample) of N, C, spatial... by a grid of N, out spatial..., ndim normalized coordinates
(x, the last spatial axis, first), 2-D and 3-D.

Each output point reads its coordinates from the grid and maps each to input pixels:
  align_corners  (g + 1) / 2 * (size - 1)        else  ((g + 1) * size - 1) / 2
"nearest" rounds it (half to even), "linear" weighs the two neighbours, "cubic" the four of
Keys' kernel (a = -0.75). A coordinate past the edges [-1/2, size - 1/2] ([0, size - 1] with
align_corners) is clamped to [0, size - 1] ("border") or reflected back inside ("reflection")
first; then each neighbour outside the input reads 0 ("zeros"), the nearest edge pixel
("border"), or its reflection ("reflection"). The algorithm is written once, over NumPy for the
reference and over te for the kernel (`_Backend`). Pattern `opaque`: the source coordinates
are a stage of their own.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir.expr import as_int, cast
from .common import check_float, te_shape
from .registry import OpDef, OpTypeError, register

MODES = ("nearest", "linear", "cubic")
PADDING = ("zeros", "border", "reflection")
CUBIC_A = -0.75


@dataclass(frozen=True)
class _Backend:
    """The few operations the sampling needs, of NumPy or of te."""

    floor: Callable
    round: Callable
    select: Callable
    lo: Callable  # elementwise min
    hi: Callable  # elementwise max
    any: Callable
    all: Callable
    to_index: Callable  # float -> int64, truncating


NUMPY = _Backend(np.floor, np.rint, np.where, np.minimum, np.maximum, np.logical_or, np.logical_and,
                 lambda v: np.trunc(v).astype("int64"))
TE = _Backend(te.floor, te.round, te.if_then_else, te.min, te.max, te.any, te.all, lambda v: cast("int64", v))


def _infer(types, attrs):
    x, grid = types
    for key, allowed in (("mode", MODES), ("padding_mode", PADDING)):
        if attrs[key] not in allowed:
            raise OpTypeError(f"grid_sample: {key} {attrs[key]!r} is not one of {allowed}")
    check_float("grid_sample", x)
    check_float("grid_sample (grid)", grid)
    nd = x.rank - 2
    if nd not in (2, 3) or grid.rank != x.rank or grid.shape[-1] != nd or grid.shape[0] != x.shape[0]:
        raise OpTypeError(f"grid_sample: x must be N, C and 2 or 3 spatial dims and grid N, out dims..., {nd}; got "
                          f"{x.shape} and {grid.shape}")
    if not all(isinstance(d, int) for d in x.shape[2:]):
        raise OpTypeError(f"grid_sample: the spatial dims of x {x.shape} must be known sizes")
    return [TensorType(tuple(x.shape[:2]) + tuple(grid.shape[1:-1]), x.dtype)]


def _reflect(b: _Backend, v, low: float, high: float):
    """v reflected off the nearer edge of [low, high] until inside (v itself when inside)."""
    span = high - low
    below, above = low - v, v - high
    dist = b.hi(b.hi(below, above), 0.0 * v)
    n = b.floor(dist / span)
    r = dist - n * span
    odd = (n - 2.0 * b.floor(n * 0.5)) > 0.5
    from_low = b.select(odd, high - r, low + r)
    from_high = b.select(odd, low + r, high - r)
    return b.select(below > 0, from_low, b.select(above > 0, from_high, v))


def _edges(size: int, attrs) -> tuple[float, float]:
    return (0.0, size - 1.0) if attrs["align_corners"] else (-0.5, size - 0.5)


def _source(b: _Backend, g, size: int, attrs):
    """The input coordinate of grid value g along one axis: denormalized, rounded for "nearest",
    brought inside the edges for "border" and "reflection"."""
    v = (g + 1.0) * 0.5 * (size - 1) if attrs["align_corners"] else ((g + 1.0) * size - 1.0) * 0.5
    low, high = _edges(size, attrs)
    if attrs["mode"] == "nearest":
        v = b.round(v)
    if attrs["padding_mode"] == "border":
        v = b.select(b.any(v < low, v > high), b.lo(b.hi(v, 0.0 * v), size - 1.0), v)
    elif attrs["padding_mode"] == "reflection":
        v = _reflect(b, v, low, high)
    return v


def _taps(b: _Backend, v, size: int, attrs):
    """[(index, weight, valid)] of the input pixels that source coordinate v reads along one axis."""
    padding, mode = attrs["padding_mode"], attrs["mode"]
    low, high = _edges(size, attrs)
    if mode == "nearest":
        taps = [(v, 1.0 + 0.0 * v)]
    else:
        base = b.floor(v)
        t = v - base
        if mode == "linear":
            taps = [(base, 1.0 - t), (base + 1.0, t)]
        else:
            a = CUBIC_A
            far = [t + 1.0, 2.0 - t]  # distances of the outer taps
            taps = [(base - 1.0, ((a * far[0] - 5 * a) * far[0] + 8 * a) * far[0] - 4 * a),
                    (base, ((a + 2) * t - (a + 3)) * t * t + 1.0),
                    (base + 1.0, ((a + 2) * (1.0 - t) - (a + 3)) * (1.0 - t) * (1.0 - t) + 1.0),
                    (base + 2.0, ((a * far[1] - 5 * a) * far[1] + 8 * a) * far[1] - 4 * a)]
    out = []
    for position, weight in taps:
        valid = None
        if padding == "zeros":
            valid = b.all(position >= 0.0, position <= size - 1.0)
        elif padding == "reflection" and high - low >= 2:  # a tap is at most 2 past an edge: one bounce
            position = b.select(position < low, 2 * low - position,
                                b.select(position > high, 2 * high - position, position))
        elif padding == "reflection":
            position = _reflect(b, position, low, high)
        index = b.lo(b.hi(b.to_index(b.lo(b.hi(position, -1.0 + 0.0 * position), float(size))), 0), size - 1)
        out.append((index, weight, valid))
    return out


def _reference(inputs, attrs):
    x, grid = inputs
    nd = x.ndim - 2
    sizes = x.shape[2:]
    g = grid.astype("float64")
    n_idx = np.arange(x.shape[0]).reshape((-1,) + (1,) * nd)
    axes = [_taps(NUMPY, _source(NUMPY, g[..., nd - 1 - k], sizes[k], attrs), sizes[k], attrs) for k in range(nd)]
    out = np.zeros((x.shape[0],) + g.shape[1:-1] + (x.shape[1],))
    xt = np.moveaxis(x.astype("float64"), 1, -1)  # N, spatial..., C
    for corner in itertools.product(*axes):
        weight = math.prod(w for _, w, _ in corner)
        for _, _, valid in corner:
            if valid is not None:
                weight = weight * valid
        out += xt[(n_idx, *(i for i, _, _ in corner))] * weight[..., None]
    return [np.moveaxis(out, -1, 1).astype(x.dtype)]


def _compute(inputs, attrs, out_types):
    x, grid = inputs
    nd = x.ndim - 2
    sizes = [as_int(d) for d in x.shape[2:]]
    wdt = "float64" if x.dtype == "float64" else "float32"
    out_shape = te_shape(out_types[0], inputs)
    # the source coordinates first, a stage per axis: reflection's expression is large, and each
    # output point's taps read it many times
    def source(k: int):
        return lambda *i: _source(TE, cast(wdt, grid[(*i, nd - 1 - k)]), sizes[k], attrs)

    sources = [te.compute((out_shape[0], *out_shape[2:]), source(k), name=f"source{k}") for k in range(nd)]

    def element(*i):
        n, c, pos = i[0], i[1], i[2:]
        axes = [_taps(TE, sources[k][(n, *pos)], sizes[k], attrs) for k in range(nd)]
        total = None
        for corner in itertools.product(*axes):
            weight = corner[0][1]
            for _, w, _ in corner[1:]:
                weight = weight * w
            term = cast(wdt, x[(n, c, *(index for index, _, _ in corner))]) * weight
            valid = [v for _, _, v in corner if v is not None]
            if valid:
                term = te.if_then_else(te.all(*valid), term, te.const(0, wdt))
            total = term if total is None else total + term
        return total if x.dtype == wdt else total.astype(x.dtype)

    return [te.compute(out_shape, element, name="grid_sample")]


register(OpDef(
    name="grid_sample",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="opaque",
    attrs={"mode": "linear", "padding_mode": "zeros", "align_corners": False},
    num_inputs=(2, 2),
    doc="ONNX GridSample / torch grid_sample of 2 or 3 spatial dims (nearest, linear, cubic).",
))

"""resize(x; sizes, mode, coordinate_transformation_mode, nearest_mode): ONNX Resize of the
spatial dimensions of an N, C, spatial... tensor to `sizes` (the spatial sizes; a full shape whose
leading N, C are x's is accepted too).

Each output coordinate maps to an input coordinate, kept as an exact fraction num/den of integers
so that nearest rounding never depends on float error:
  half_pixel            (x + 0.5) * in/out - 0.5
  pytorch_half_pixel    the same, but 0 when out == 1
  asymmetric            x * in/out
  align_corners         x * (in - 1)/(out - 1), 0 when out == 1
"nearest" rounds it (nearest_mode: round_prefer_floor, round_prefer_ceil, floor, ceil) and clamps
to the input; "linear" interpolates between the two neighbours of each spatial axis (coordinates
clamped at the edges, as ONNX and PyTorch do); "cubic" weighs the four neighbours floor - 1 ..
floor + 2 of each axis by Keys' cubic kernel with parameter `cubic_coeff_a` (-0.75 as ONNX and
PyTorch's bicubic -0.75), neighbours past an edge reading the edge (or, with `exclude_outside`,
weighted 0 and the other weights scaled to sum to 1). Pattern `injective`.
"""

from __future__ import annotations

import itertools

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir.expr import as_int, cast, max_, min_
from .common import check_float
from .registry import REQUIRED, OpDef, OpTypeError, register

MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _spatial_sizes(x: TensorType, attrs) -> tuple[int, ...]:
    sizes = tuple(attrs["sizes"])
    if x.rank < 3:
        raise OpTypeError(f"resize: x must be N, C, spatial... (rank 3 or more), got shape {x.shape}")
    if len(sizes) == x.rank:
        if tuple(sizes[:2]) != tuple(x.shape[:2]):
            raise OpTypeError(f"resize: sizes {sizes} change N or C of {x.shape}; only spatial dims are resized")
        sizes = sizes[2:]
    if len(sizes) != x.rank - 2 or not all(isinstance(s, int) and s > 0 for s in sizes):
        raise OpTypeError(f"resize: sizes {tuple(attrs['sizes'])} must be {x.rank - 2} positive spatial sizes "
                          f"for x of shape {x.shape}")
    return sizes


def _infer(types, attrs):
    (x,) = types
    for key, allowed in (("mode", MODES), ("coordinate_transformation_mode", COORDINATE_MODES),
                         ("nearest_mode", NEAREST_MODES)):
        if attrs[key] not in allowed:
            raise OpTypeError(f"resize: {key} {attrs[key]!r} is not one of {allowed}")
    if attrs["mode"] != "nearest":
        check_float(f"resize ({attrs['mode']})", x)
    sizes = _spatial_sizes(x, attrs)
    for k, d in enumerate(x.shape[2:]):
        if isinstance(d, str):
            raise OpTypeError(f"resize: spatial dimension {k} is the symbol {d!r}; it must be a known size")
    return [TensorType(tuple(x.shape[:2]) + sizes, x.dtype)]


def source_fraction(x, n_in: int, n_out: int, mode: str):
    """The input coordinate of output coordinate x as (numerator, denominator); x is an int,
    a NumPy integer array or a te expression."""
    if mode in ("half_pixel", "pytorch_half_pixel"):
        if mode == "pytorch_half_pixel" and n_out == 1:
            return 0 * x, 1
        return (2 * x + 1) * n_in - n_out, 2 * n_out
    if mode == "asymmetric":
        return x * n_in, n_out
    if n_out == 1:  # align_corners
        return 0 * x, 1
    return x * (n_in - 1), n_out - 1


def nearest_index(num, den: int, n_in: int, rounding: str, lo, hi):
    """num/den rounded by `rounding`, clamped to [0, n_in - 1] with the given min/max."""
    match rounding:
        case "floor":
            i = num // den
        case "ceil":
            i = 0 - ((0 - num) // den)
        case "round_prefer_floor":  # ceil(v - 1/2)
            i = 0 - ((den - 2 * num) // (2 * den))
        case _:  # round_prefer_ceil: floor(v + 1/2)
            i = (2 * num + den) // (2 * den)
    return lo(hi(i, 0), n_in - 1)


def linear_neighbours(num, den: int, n_in: int, lo, hi):
    """(index below, index above, weight of the one above) of coordinate num/den, clamped."""
    num = hi(num, 0)
    below = num // den
    return lo(below, n_in - 1), lo(below + 1, n_in - 1), num % den


def cubic_fraction(x, n_in: int, n_out: int, mode: str):
    """The input coordinate of cubic resizing: source_fraction's, but -1/2 for pytorch_half_pixel
    to one pixel (linear clamps that to 0, cubic reads the neighbours of -1/2)."""
    if mode == "pytorch_half_pixel" and n_out == 1:
        return 0 * x - 1, 2
    return source_fraction(x, n_in, n_out, mode)


def cubic_taps(num, den: int, n_in: int, a: float, exclude_outside: bool, lo, hi, select, both, to_float):
    """[(index, weight)] of the four neighbours of coordinate num/den: indices clamped to the
    input, weights of Keys' kernel of the distances (float expressions via to_float). `lo`, `hi`,
    `select`, `both`: min, max, where and logical and, of NumPy or of te."""
    base = num // den
    t = to_float(num - base * den) / float(den)
    distances = [t + 1, t, 1 - t, 2 - t]
    weights = [((a * d - 5 * a) * d + 8 * a) * d - 4 * a if k in (0, 3) else ((a + 2) * d - (a + 3)) * d * d + 1
               for k, d in enumerate(distances)]
    indices = [base + k - 1 for k in range(4)]
    if exclude_outside:
        weights = [select(both(i >= 0, i <= n_in - 1), w, 0.0 * w) for i, w in zip(indices, weights)]
        total = weights[0] + weights[1] + weights[2] + weights[3]
        weights = [w / total for w in weights]
    return [(lo(hi(i, 0), n_in - 1), w) for i, w in zip(indices, weights)]


def _reference(inputs, attrs):
    (x,) = inputs
    sizes = _spatial_sizes(TensorType(x.shape, x.dtype.name), attrs)
    out = x
    for axis, (n_in, n_out) in enumerate(zip(x.shape[2:], sizes), start=2):
        num, den = source_fraction(np.arange(n_out), n_in, n_out, attrs["coordinate_transformation_mode"])
        if attrs["mode"] == "nearest":
            out = np.take(out, nearest_index(num, den, n_in, attrs["nearest_mode"], np.minimum, np.maximum), axis)
            continue
        shape = (-1,) + (1,) * (x.ndim - 1 - axis)
        if attrs["mode"] == "cubic":
            num, den = cubic_fraction(np.arange(n_out), n_in, n_out, attrs["coordinate_transformation_mode"])
            taps = cubic_taps(num, den, n_in, attrs["cubic_coeff_a"], attrs["exclude_outside"], np.minimum,
                              np.maximum, np.where, np.logical_and, lambda v: v.astype("float64"))
            out = sum(np.take(out, i, axis) * w.reshape(shape) for i, w in taps)
            continue
        below, above, frac = linear_neighbours(num, den, n_in, np.minimum, np.maximum)
        w = (frac / den).reshape(shape)
        out = np.take(out, below, axis) * (1 - w) + np.take(out, above, axis) * w
    return [out.astype(x.dtype)]


def _compute(inputs, attrs, out_types):
    (x,) = inputs
    sizes = tuple(out_types[0].shape[2:])
    n_in = [as_int(d) for d in x.shape[2:]]
    coord_mode = attrs["coordinate_transformation_mode"]
    weight_dtype = "float64" if x.dtype == "float64" else "float32"

    def element(*i):
        n, c, pos = i[0], i[1], i[2:]
        fracs = [source_fraction(p, a, b, coord_mode) for p, a, b in zip(pos, n_in, sizes)]
        if attrs["mode"] == "nearest":
            return x[(n, c) + tuple(nearest_index(num, den, a, attrs["nearest_mode"], min_, max_)
                                    for (num, den), a in zip(fracs, n_in))]
        axes = []  # per spatial axis: the (index, weight) of each neighbour
        if attrs["mode"] == "cubic":
            for p, a, b in zip(pos, n_in, sizes):
                num, den = cubic_fraction(p, a, b, coord_mode)
                axes.append(cubic_taps(num, den, a, attrs["cubic_coeff_a"], attrs["exclude_outside"], min_, max_,
                                       te.if_then_else, te.all, lambda v: cast(weight_dtype, v)))
        else:
            for (num, den), a in zip(fracs, n_in):
                below, above, frac = linear_neighbours(num, den, a, min_, max_)
                w = cast(weight_dtype, frac) / float(den)
                axes.append(((below, 1.0 - w), (above, w)))
        total = None
        for corner in itertools.product(*axes):
            weight = corner[0][1]
            for _, wk in corner[1:]:
                weight = weight * wk
            term = cast(weight_dtype, x[(n, c) + tuple(i for i, _ in corner)]) * weight
            total = term if total is None else total + term
        return total

    return [te.compute(tuple(x.shape[:2]) + sizes, element, name="resize")]


register(OpDef(
    name="resize",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="injective",
    attrs={"sizes": REQUIRED, "mode": "nearest", "coordinate_transformation_mode": "half_pixel",
           "nearest_mode": "round_prefer_floor", "cubic_coeff_a": -0.75, "exclude_outside": False},
    doc="ONNX Resize of the spatial dims (nearest, n-linear or cubic).",
))

"""resize(x; sizes, mode, coordinate_transformation_mode, nearest_mode, scales, roi,
extrapolation_value, antialias): ONNX Resize of the spatial dimensions of an N, C, spatial...
tensor to `sizes` (the spatial sizes; a full shape whose leading N, C are x's is accepted too).

Each output coordinate x maps to an input coordinate, an affine function (a*x + b)/den of
integers (source_affine), so that nearest rounding never depends on float error. s is the scale
of the axis: `scales` when given (ONNX: the output size is floor(in * s), and the mapping uses s
itself), else out/in; W = s * in, the scaled size, which need not be whole:
  half_pixel            (x + 0.5) / s - 0.5
  pytorch_half_pixel    the same, but -0.5 when W == 1
  half_pixel_symmetric  the same, shifted by in/2 * (1 - out/W) (centred when out != W)
  asymmetric            x / s
  align_corners         x * (in - 1)/(W - 1), 0 when W == 1
  tf_crop_and_resize    roi (start, end) of the axis in [0, 1]: start * (in - 1) + x * (end - start)
                        * (in - 1)/(W - 1); a coordinate outside [0, in - 1] on any axis gives
                        `extrapolation_value`
"nearest" rounds it (nearest_mode: round_prefer_floor, round_prefer_ceil, floor, ceil) and clamps
to the input; "linear" interpolates between the two neighbours of each spatial axis (coordinates
clamped at the edges, as ONNX and PyTorch do); "cubic" weighs the four neighbours floor - 1 ..
floor + 2 of each axis by Keys' cubic kernel with parameter `cubic_coeff_a` (-0.75 as ONNX and
PyTorch's bicubic -0.75), neighbours past an edge reading the edge (or, with `exclude_outside`,
weighted 0 and the other weights scaled to sum to 1). With `antialias` (linear and cubic, as
ONNX and PyTorch's antialias), a downscaling axis stretches the kernel by 1/s: the taps within
its reach (2 - 2 * (floor(-r/s) + 1) of them, r = 1 for linear, 2 for cubic) weighted by
kernel(s * distance), normalized to sum to 1. Pattern `injective`.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir.expr import as_int, cast, max_, min_
from .common import check_float
from .registry import REQUIRED, OpDef, OpTypeError, register

MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric",
                    "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
DENOMINATOR = 1 << 24  # a float32 scale or roi is this exact fraction; float64 ones the nearest such
WIDEST = 1 << 31  # the largest denominator of a mapping: its products with coordinates stay in int64
AXIS_STAGE = "resize_axis"  # the tag of a stage of one axis (its taps' tables; antialias: the axis resized)


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
    n = len(sizes)
    if attrs["scales"] is not None and (len(attrs["scales"]) != n or min(attrs["scales"]) <= 0):
        raise OpTypeError(f"resize: scales {attrs['scales']} must be {n} positive numbers, one per spatial axis")
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" and len(attrs["roi"] or ()) != 2 * n:
        raise OpTypeError(f"resize: tf_crop_and_resize needs roi of {2 * n} numbers (starts, then ends, of the "
                          f"spatial axes), got {attrs['roi']}")
    for k, d in enumerate(x.shape[2:]):
        if isinstance(d, str):
            raise OpTypeError(f"resize: spatial dimension {k} is the symbol {d!r}; it must be a known size")
    return [TensorType(tuple(x.shape[:2]) + sizes, x.dtype)]


def _scale(attrs, axis: int, n_in: int, n_out: int) -> Fraction:
    if attrs["scales"] is None:
        return Fraction(n_out, n_in)
    return Fraction(attrs["scales"][axis]).limit_denominator(DENOMINATOR)


def source_affine(attrs, axis: int, n_in: int, n_out: int) -> tuple[int, int, int]:
    """(a, b, den): output coordinate x of spatial axis `axis` maps to input coordinate
    (a*x + b)/den (see the module's docstring)."""
    mode = attrs["coordinate_transformation_mode"]
    s = _scale(attrs, axis, n_in, n_out)
    width, half = s * n_in, Fraction(1, 2)
    match mode:
        case "half_pixel" | "pytorch_half_pixel" | "half_pixel_symmetric":
            a, b = 1 / s, half / s - half
            if mode == "pytorch_half_pixel" and width == 1:
                a, b = Fraction(0), -half
            if mode == "half_pixel_symmetric":
                b += Fraction(n_in, 2) * (1 - n_out / width)
        case "asymmetric":
            a, b = 1 / s, Fraction(0)
        case "align_corners":
            a, b = (Fraction(0) if width == 1 else (n_in - 1) / (width - 1)), Fraction(0)
        case _:  # tf_crop_and_resize
            n = len(attrs["roi"]) // 2
            start, end = (Fraction(attrs["roi"][k]).limit_denominator(DENOMINATOR) for k in (axis, axis + n))
            if width == 1:
                a, b = Fraction(0), (end - start) * (n_in - 1) / 2 + start * (n_in - 1)
            else:
                a, b = (end - start) * (n_in - 1) / (width - 1), start * (n_in - 1)
    if math.lcm(a.denominator, b.denominator) > WIDEST:
        a, b = a.limit_denominator(WIDEST // 2), b.limit_denominator(WIDEST // 2)
    den = math.lcm(a.denominator, b.denominator)
    return int(a * den), int(b * den), den


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


def antialias_reach(attrs, scale: float) -> tuple[int, int]:
    """(first, count): the taps of an antialiased kernel are base + first ... base + first +
    count - 1 around coordinate base + t (0 <= t < 1); the kernel (reach 1 for linear, 2 for
    cubic) stretched by 1/scale when downscaling."""
    reach = 1 if attrs["mode"] == "linear" else 2
    first = math.floor(-reach / min(scale, 1.0)) + 1
    return first, 2 - 2 * first


def antialias_distance(num, den: int, tap, scale: float, attrs, select, to_float):
    """The kernel's argument for tap number `tap` (an int, an array or a te expression, counted
    from antialias_reach's first) of coordinate num/den: |s * distance|, s = min(scale, 1)."""
    first, _ = antialias_reach(attrs, scale)
    base = num // den
    t = to_float(num - base * den) / float(den)
    d = (to_float(tap + first) - t) * min(scale, 1.0)
    return select(d < 0, 0.0 - d, d)


def antialias_weight(num, den: int, n_in: int, tap, scale: float, d, attrs, lo, hi, select, both):
    """(index, weight) of tap number `tap` of coordinate num/den whose kernel argument is d
    (antialias_distance: a compute reads it from a table, as the cubic kernel reads it ten
    times): the index clamped to the input, the weight kernel(d), not yet normalized (0 past an
    edge with exclude_outside)."""
    first, _ = antialias_reach(attrs, scale)
    a = attrs["cubic_coeff_a"]
    if attrs["mode"] == "linear":
        w = select(d < 1, 1.0 - d, 0.0 * d)
    else:
        w = select(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                   select(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0 * d))
    index = num // den + first + tap
    if attrs["exclude_outside"]:
        w = select(both(index >= 0, index <= n_in - 1), w, 0.0 * w)
    return lo(hi(index, 0), n_in - 1), w


def axis_taps(attrs, axis: int, pos, n_in: int, n_out: int, ops):
    """[(index, weight)] of output coordinate `pos` along spatial axis `axis` (weight None for
    nearest), and the condition that its coordinate lies in the input (None but for
    tf_crop_and_resize). `ops`: (min, max, where, and, to_float) of NumPy or of te."""
    lo, hi, select, both, to_float = ops
    a, b, den = source_affine(attrs, axis, n_in, n_out)
    num = a * pos + b
    inside = None
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        inside = both(num >= 0, num <= (n_in - 1) * den)
    if attrs["mode"] == "nearest":
        return [(nearest_index(num, den, n_in, attrs["nearest_mode"], lo, hi), None)], inside
    if attrs["antialias"]:
        scale = float(_scale(attrs, axis, n_in, n_out))
        taps = []
        for k in range(antialias_reach(attrs, scale)[1]):
            d = antialias_distance(num, den, k, scale, attrs, select, to_float)
            taps.append(antialias_weight(num, den, n_in, k, scale, d, attrs, lo, hi, select, both))
        total = sum(w for _, w in taps)
        return [(i, w / total) for i, w in taps], inside
    if attrs["mode"] == "cubic":
        return cubic_taps(num, den, n_in, attrs["cubic_coeff_a"], attrs["exclude_outside"], lo, hi, select, both,
                          to_float), inside
    below, above, frac = linear_neighbours(num, den, n_in, lo, hi)
    w = to_float(frac) / float(den)
    return [(below, 1.0 - w), (above, w)], inside


def _reference(inputs, attrs):
    (x,) = inputs
    sizes = _spatial_sizes(TensorType(x.shape, x.dtype.name), attrs)
    ops = (np.minimum, np.maximum, np.where, np.logical_and, lambda v: np.asarray(v, "float64"))
    out = x if attrs["mode"] == "nearest" else x.astype("float64")
    for k, (n_in, n_out) in enumerate(zip(x.shape[2:], sizes)):
        axis = k + 2
        taps, inside = axis_taps(attrs, k, np.arange(n_out), n_in, n_out, ops)
        shape = (-1,) + (1,) * (x.ndim - 1 - axis)
        if attrs["mode"] == "nearest":
            out = np.take(out, taps[0][0], axis)
        else:
            out = sum(np.take(out, i, axis) * np.broadcast_to(w, (n_out,)).reshape(shape) for i, w in taps)
        if inside is not None:
            out = np.where(inside.reshape(shape), out, np.asarray(attrs["extrapolation_value"]).astype(out.dtype))
    return [out.astype(x.dtype)]


def _compute(inputs, attrs, out_types):
    (x,) = inputs
    sizes = tuple(out_types[0].shape[2:])
    n_in = [as_int(d) for d in x.shape[2:]]
    weight_dtype = "float64" if x.dtype == "float64" else "float32"
    ops = (min_, max_, te.if_then_else, te.all, lambda v: cast(weight_dtype, v))
    if attrs["antialias"]:
        return [_compute_separable(x, attrs, sizes, weight_dtype, ops)]
    tables = None
    if attrs["coordinate_transformation_mode"] != "tf_crop_and_resize":
        tables = [_tap_tables(attrs, k, a, b, ops) for k, (a, b) in enumerate(zip(n_in, sizes))]

    def element(*i):
        n, c, pos = i[0], i[1], i[2:]
        axes, inside = [], []
        for k, (p, a, b) in enumerate(zip(pos, n_in, sizes)):
            if tables is not None:
                axes.append([(index[p], None if weight is None else weight[p]) for index, weight in tables[k]])
                continue
            taps, within = axis_taps(attrs, k, p, a, b, ops)
            axes.append(taps)
            inside += [] if within is None else [within]
        total = None
        for corner in itertools.product(*axes):
            term = x[(n, c) + tuple(j for j, _ in corner)]
            if attrs["mode"] != "nearest":
                weight = corner[0][1]
                for _, wk in corner[1:]:
                    weight = weight * wk
                term = cast(weight_dtype, term) * weight
            total = term if total is None else total + term
        if inside:
            total = te.if_then_else(te.all(*inside), total, te.const(attrs["extrapolation_value"], total.dtype))
        return total

    return [te.compute(tuple(x.shape[:2]) + sizes, element, name="resize")]


def _tap_tables(attrs, k: int, n_in: int, n_out: int, ops):
    """[(index, weight)] tables over the output coordinates of spatial axis k, one pair per tap
    (weight None for nearest): computed once per axis, where inlined they were recomputed for
    every output element (a 64-bit vector division per lane and tap: a 520x520 bilinear
    upsampling at half torch's speed)."""
    def table(t: int, part: int, what: str):
        return te.compute((n_out,), lambda o: axis_taps(attrs, k, o, n_in, n_out, ops)[0][t][part],
                          name=f"resize_{what}{k}_{t}", tag=AXIS_STAGE)

    count = len(axis_taps(attrs, k, te.var("o"), n_in, n_out, ops)[0])
    return [(table(t, 0, "index"), None if attrs["mode"] == "nearest" else table(t, 1, "weight"))
            for t in range(count)]


def _compute_separable(x, attrs, sizes, weight_dtype, ops):
    """Antialiased resizing one spatial axis after the other (its taps grow as 1/scale: a stage
    per axis reads sum(taps) rather than their product): per axis tables of the taps' kernel
    arguments, input indices and weights (output coordinate x tap), the weights' sums, and the weighted sum over
    the taps of each output."""
    lo, hi, select, both, to_float = ops

    def along(src, k: int, n_in: int, n_out: int):
        """src resized along spatial axis k."""
        axis = k + 2
        a, b, den = source_affine(attrs, k, n_in, n_out)
        scale = float(_scale(attrs, k, n_in, n_out))
        count = antialias_reach(attrs, scale)[1]

        distance = te.compute((n_out, count),
                              lambda o, j: antialias_distance(a * o + b, den, j, scale, attrs, select, to_float),
                              name=f"resize_distance{k}", tag=AXIS_STAGE)

        def tap(o, j):
            return antialias_weight(a * o + b, den, n_in, j, scale, distance[o, j], attrs, lo, hi, select, both)

        weights = te.compute((n_out, count), lambda o, j: tap(o, j)[1], name=f"resize_weights{k}", tag=AXIS_STAGE)
        index = te.compute((n_out, count), lambda o, j: tap(o, j)[0], name=f"resize_index{k}", tag=AXIS_STAGE)
        r = te.reduce_axis((0, count), name=f"w{k}")
        total = te.compute((n_out,), lambda o: te.sum(weights[o, r], axis=r), name=f"resize_total{k}",
                           tag=AXIS_STAGE)
        j = te.reduce_axis((0, count), name=f"t{k}")

        def element(*i):
            source = src[i[:axis] + (index[i[axis], j],) + i[axis + 1:]]
            return te.sum(cast(weight_dtype, source) * weights[i[axis], j], axis=j)

        shape = tuple(src.shape[:axis]) + (n_out,) + tuple(src.shape[axis + 1:])
        summed = te.compute(shape, element, name=f"resize_axis{k}", tag=AXIS_STAGE)

        def normalized(*i):
            value = summed[i] / total[i[axis]]
            if attrs["coordinate_transformation_mode"] != "tf_crop_and_resize":
                return value
            num = a * i[axis] + b
            return te.if_then_else(both(num >= 0, num <= (n_in - 1) * den), value,
                                   te.const(attrs["extrapolation_value"], weight_dtype))

        return te.compute(shape, normalized, name=f"resize_norm{k}")

    out = x
    for k, n_out in enumerate(sizes):
        out = along(out, k, as_int(x.shape[k + 2]), n_out)
    return te.compute(out.shape, lambda *i: cast(x.dtype, out[i]), name="resize")


register(OpDef(
    name="resize",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="injective",
    attrs={"sizes": REQUIRED, "mode": "nearest", "coordinate_transformation_mode": "half_pixel",
           "nearest_mode": "round_prefer_floor", "cubic_coeff_a": -0.75, "exclude_outside": False,
           "scales": None, "roi": None, "extrapolation_value": 0.0, "antialias": False},
    doc="ONNX Resize of the spatial dims (nearest, n-linear or cubic; antialias; every coordinate mode).",
))

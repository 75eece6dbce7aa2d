"""ONNX shape, data-movement and constant operators as ember operators.

ember takes shapes, axes, pads and sizes as attributes, so the ONNX inputs that carry them must
be constants; shape arithmetic is folded at import (NodeContext.op on arrays), and Shape, Size,
ConstantOfShape, Range and Constant produce arrays directly. Reshape's 0 and -1 are resolved
here to a concrete (possibly symbolic) shape; Expand's bidirectional broadcast too. A Slice whose
starts are computed at run time and whose ends are those starts plus constants (a loop body's
Slice at its iteration number) is a dynamic_slice: windows of static sizes at run-time starts.
"""

from __future__ import annotations

import collections
import math
from fractions import Fraction

import numpy as np

from .... import dims
from ....checks import check_fits
from ....graph.core import Dim, TensorType
from ....ops.common import broadcast_shapes
from ....ops.registry import OpTypeError
from ....ops.shape import slice_ranges
from ....tir import dtype as dt
from ...fold import is_symbolic
from ..node import NodeContext
from ..registry import converts

# -- values that are the input itself, and constants ---------------------------------------


@converts("Identity")
def _identity(cx: NodeContext):
    return [cx.input(0)]


@converts("Dropout")
def _dropout(cx: NodeContext):
    training = cx.const(2, "training_mode")
    if training is not None and training.item():
        # ratio 0 keeps every element; any other ratio draws a random mask, which ember's kernels
        # have no generator for (ONNX's expected outputs come from NumPy's seeded one)
        ratio = cx.const(1, "ratio")
        if ratio is None or ratio.item() != 0:
            raise cx.unsupported("training_mode=True")
    x = cx.input(0)
    if not cx.wants_output(1):
        return [x]
    return [x, np.ones(cx.static_shape(x, "the mask output"), dtype=bool)]


@converts("Constant")
def _constant(cx: NodeContext):
    (kind,) = cx.attrs  # exactly one of the value attributes
    match kind:
        case "value" if cx.attrs["value"].dtype.name in dt.SCALAR_DTYPES:
            return [cx.attrs["value"]]
        case "value_float" | "value_floats":
            return [np.asarray(cx.attrs[kind], dtype="float32")]
        case "value_int" | "value_ints":
            return [np.asarray(cx.attrs[kind], dtype="int64")]
    raise cx.unsupported(kind if kind != "value" else f"value of dtype {cx.attrs['value'].dtype}")


@converts("ConstantOfShape")
def _constant_of_shape(cx: NodeContext):
    value = cx.attr("value", np.zeros(1, "float32"))
    shape = cx.const_ints(0, "shape")
    if any(d < 0 for d in shape):
        raise cx.error(f"the shape {shape} has a negative dimension")
    out = TensorType(tuple(shape), dt.from_numpy(value.dtype))
    check_fits(out, f"{cx.where}: the constant of shape {shape}")
    return [np.full(shape, value.reshape(-1)[0], dtype=value.dtype)]


@converts("Range")
def _range(cx: NodeContext):
    start, limit, delta = (cx.const(k, name, symbolic=True) for k, name in enumerate(("start", "limit", "delta")))
    if any(is_symbolic(x) for x in (start, limit, delta)):
        return [_symbolic_range(cx, start, limit, delta)]
    given = f"start {start.item()}, limit {limit.item()}, delta {delta.item()}"
    if delta.item() == 0 or not all(math.isfinite(v.item()) for v in (start, limit, delta)):
        raise cx.error(f"{given}: the delta must be nonzero and every value finite")
    count = max(math.ceil((limit.item() - start.item()) / delta.item()), 0)
    check_fits(TensorType((count,), dt.from_numpy(start.dtype)), f"{cx.where}: the range of {given}")
    return [(start + delta * np.arange(count)).astype(start.dtype)]


def _symbolic_range(cx: NodeContext, start, limit, delta):
    """Range(start, limit, 1) with a symbolic limit (a prefill's positions up to its length), its
    start a number: ember's arange of the length limit - start, which may be symbolic."""
    if is_symbolic(start) or is_symbolic(delta) or delta.item() != 1:
        raise cx.error(f"start {start.tolist()}, limit {limit.tolist()}, delta {delta.tolist()}: ember takes a "
                       "symbolic limit with a numeric start and delta 1 (import_onnx(..., input_shapes=...) can make "
                       "them static)")
    length = dims.add(str(limit.item()), -int(start.item()))  # (a symbol, or an expression: symbolic.Expr)
    return cx.op("arange", [], {"length": length, "start": start.item(), "step": 1,
                                "dtype": dt.from_numpy(start.dtype)})


@converts("Shape")
def _shape(cx: NodeContext):
    dims = cx.type(cx.input(0)).shape[slice(cx.attr("start", 0), cx.attr("end"))]
    static = all(isinstance(d, int) for d in dims)
    return [np.asarray(dims, dtype="int64" if static else object)]  # (object: a symbolic shape)


@converts("Size")
def _size(cx: NodeContext):
    return [np.asarray(math.prod(cx.static_shape(cx.input(0), "Size")), dtype="int64")]


# -- reshaping ------------------------------------------------------------------------------


def reshape_target(cx: NodeContext, shape: tuple[Dim, ...], target: list[Dim], allow_zero: bool) -> tuple[Dim, ...]:
    """ONNX Reshape's target shape resolved: 0 copies the input's dimension (unless allow_zero),
    -1 is what the element count leaves (a symbol when the others cancel all but one)."""
    out: list[Dim] = [shape[k] if d == 0 and not allow_zero else d for k, d in enumerate(target)]
    if out.count(-1) > 1:
        raise cx.error(f"shape {target} has more than one -1")
    if -1 in out:
        known = [d for d in out if d != -1]
        out[out.index(-1)] = _quotient(cx, shape, known)
    return tuple(out)


def _quotient(cx: NodeContext, numerator: tuple[Dim, ...], denominator: list[Dim]) -> Dim:
    """prod(numerator) / prod(denominator), for dims that are ints and symbols."""
    num_syms = collections.Counter(d for d in numerator if isinstance(d, str))
    den_syms = collections.Counter(d for d in denominator if isinstance(d, str))
    num = math.prod(d for d in numerator if isinstance(d, int))
    den = math.prod(d for d in denominator if isinstance(d, int))
    left = num_syms - den_syms
    if den_syms - num_syms or den == 0 or num % den or (left and (num // den != 1 or left.total() != 1)):
        raise cx.error(f"cannot resolve -1 of a reshape of {numerator} to {denominator} and one -1")
    return next(iter(left)) if left else num // den


@converts("Reshape")
def _reshape(cx: NodeContext):
    x = cx.input(0)
    shape = cx.type(x).shape
    target = reshape_target(cx, shape, cx.const_dims(1, "shape"), bool(cx.attr("allowzero", 0)))
    return [x if target == shape else cx.op("reshape", [x], {"shape": target})]


@converts("Flatten")
def _flatten(cx: NodeContext):
    """To 2-D: the dimensions before `axis` times the ones from it on."""
    x = cx.input(0)
    rank = cx.type(x).rank
    axis = cx.attr("axis", 1)
    axis = axis + rank if axis < 0 else axis
    if axis in (0, rank):
        return [cx.op("unsqueeze", [cx.op("flatten", [x], {"start_dim": 0})], {"axes": (1 if axis else 0,)})]
    y = x if axis == rank - 1 else cx.op("flatten", [x], {"start_dim": axis})
    return [y if axis == 1 else cx.op("flatten", [y], {"start_dim": 0, "end_dim": axis - 1})]


@converts("Squeeze")
def _squeeze(cx: NodeContext):
    axes = cx.const_ints(1, "axes")
    return [cx.op("squeeze", [cx.input(0)], {"axes": None if axes is None else tuple(axes)})]


@converts("Unsqueeze")
def _unsqueeze(cx: NodeContext):
    return [cx.op("unsqueeze", [cx.input(0)], {"axes": tuple(cx.const_ints(1, "axes"))})]


@converts("Transpose")
def _transpose(cx: NodeContext):
    x = cx.input(0)
    perm = cx.attr("perm") or list(reversed(range(cx.type(x).rank)))
    return [cx.op("transpose", [x], {"perm": tuple(perm)})]


@converts("Expand")
def _expand(cx: NodeContext):
    x = cx.input(0)
    shape = cx.type(x).shape
    target = broadcast_shapes("Expand", shape, tuple(cx.const_dims(1, "shape")))
    return [x if target == shape else cx.op("expand", [x], {"shape": target})]


@converts("Tile")
def _tile(cx: NodeContext):
    """Each dimension d repeated r times: (d) -> (1, d) -> expand (r, d) -> reshape (r * d)."""
    x = cx.input(0)
    repeats = cx.const_ints(1, "repeats")
    if all(r == 1 for r in repeats):
        return [x]
    shape = cx.static_shape(x, "Tile")
    pairs = [(1, d) for d in shape]
    y = cx.op("reshape", [x], {"shape": tuple(v for p in pairs for v in p)})
    y = cx.op("expand", [y], {"shape": tuple(v for r, d in zip(repeats, shape) for v in (r, d))})
    return [cx.op("reshape", [y], {"shape": tuple(r * d for r, d in zip(repeats, shape))})]


@converts("Trilu")
def _trilu(cx: NodeContext):
    """The upper (or lower) triangle of the last two dimensions, from the k-th diagonal on; the
    rest zeros: `where` with a constant mask, or, of symbolic sizes (a prefill's causal mask over
    its length), a mask compared from two aranges: column - row >= k (upper) or <= k."""
    x = cx.input(0)
    rows, cols = cx.type(x).shape[-2:]
    (k,) = cx.const_ints(1, "k") or [0]
    if isinstance(rows, int) and isinstance(cols, int):
        ones = np.ones((rows, cols), dtype=bool)
        keep = np.triu(ones, k) if cx.attr("upper", 1) else np.tril(ones, k)
    else:
        row, col = (cx.op("arange", [], {"length": n, "start": 0, "step": 1, "dtype": "int64"}) for n in (rows, cols))
        diagonal = cx.op("sub", [col, cx.op("reshape", [row], {"shape": (rows, 1)})])
        keep = cx.op("greater_equal" if cx.attr("upper", 1) else "less_equal", [diagonal, np.array(k, np.int64)])
    return [cx.op("where", [keep, x, cx.scalar(0, x)])]


@converts("DepthToSpace", "SpaceToDepth")
def _depth_space(cx: NodeContext):
    """Blocks of channels to pixels and back: reshape, transpose, reshape (DepthToSpace's DCR
    mode takes the block index before the channel, CRD after it)."""
    x = cx.input(0)
    n, c, h, w = cx.type(x).shape
    bs = cx.attr("blocksize")
    if cx.node.op_type == "SpaceToDepth":  # (mode since SpaceToDepth-28)
        perm = (0, 3, 5, 1, 2, 4) if cx.attr("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
        split, out = (n, c, h // bs, bs, w // bs, bs), (n, c * bs * bs, h // bs, w // bs)
    elif cx.attr("mode", "DCR") == "DCR":
        split, perm, out = (n, bs, bs, c // bs**2, h, w), (0, 3, 4, 1, 5, 2), (n, c // bs**2, h * bs, w * bs)
    else:
        split, perm, out = (n, c // bs**2, bs, bs, h, w), (0, 1, 4, 2, 5, 3), (n, c // bs**2, h * bs, w * bs)
    y = cx.op("transpose", [cx.op("reshape", [x], {"shape": split})], {"perm": perm})
    return [cx.op("reshape", [y], {"shape": out})]


# -- joining, splitting, indexing -------------------------------------------------------------


@converts("Concat")
def _concat(cx: NodeContext):
    return [cx.op("concat", [t for t in cx.inputs if t is not None], {"axis": cx.attr("axis")})]


@converts("Split")
def _split(cx: NodeContext):
    x = cx.input(0)
    t = cx.type(x)
    axis = cx.attr("axis", 0) % t.rank
    sizes = cx.const_ints(1, "split")
    if sizes is None:  # equal parts; with num_outputs (opset 18) the last may be smaller
        size = t.shape[axis]
        if not isinstance(size, int):
            raise cx.error(f"splitting the symbolic dimension {size!r} into equal parts")
        parts = cx.attr("num_outputs", cx.num_outputs)
        chunk = -(-size // parts)
        sizes = [min(chunk, size - k * chunk) for k in range(parts)]
    return cx.ops("split", [x], {"axis": axis, "sizes": tuple(sizes)})


@converts("Slice")
def _slice(cx: NodeContext):
    axes, steps = cx.const_ints(3, "axes"), cx.const_ints(4, "steps")
    starts, ends = cx.input(1), cx.input(2)
    if not (isinstance(starts, np.ndarray) and isinstance(ends, np.ndarray)) and all(s == 1 for s in steps or [1]):
        sizes = _window_sizes(cx, starts, ends)
        shape = cx.type(cx.input(0)).shape
        along = list(range(len(sizes or ()))) if axes is None else axes
        # ends = starts + sizes: windows of static sizes at run-time starts, on static axes they fit in
        if sizes is not None and all(isinstance(shape[a], int) and n <= shape[a] for a, n in zip(along, sizes)):
            return [cx.op("dynamic_slice", [cx.input(0), starts], {"axes": tuple(along), "sizes": tuple(sizes)})]
    attrs = {"starts": tuple(cx.const_dims(1, "starts")), "ends": tuple(cx.const_dims(2, "ends")),
             "axes": None if axes is None else tuple(axes), "steps": None if steps is None else tuple(steps)}
    shape = cx.type(cx.input(0)).shape
    try:
        out = cx.op("slice", [cx.input(0)], attrs)
        _bound_within_axes(cx.importer.graph.ranges, shape, slice_ranges("slice", shape, attrs))
    except OpTypeError as e:
        raise OpTypeError(f"{cx.where}: {e}") from None
    return [out]


def _bound_within_axes(ranges: dict[str, tuple[int, int | None]], shape: tuple[Dim, ...],
                       sliced: dict[int, tuple[Dim, int, Dim]]) -> None:
    """A slice with a symbolic bound or of a symbolic axis (`position_ids[:, :seq]` of a table of
    512, `x[:, -4:]` of a sequence) is taken to lie within its axis (ember.ops.shape's slice:
    no clamp), which ONNX, unlike torch.export, does not assert: where onnxruntime would clamp,
    the kernel would read past the axis. So each symbol's range (Graph.ranges, checked at each
    call) is narrowed to the sizes for which 0 <= start and start + length <= the axis, and a
    slice whose bounds relate two symbols (`x[:, :n]` of an axis of m) is refused: no range of
    one symbol can check it."""
    for axis, (start, _, length) in sliced.items():
        if length == 0 or not any(isinstance(d, str) for d in (shape[axis], start, length)):
            continue  # (static: clamped by the slice itself)
        for low in (start, length, dims.add(shape[axis], dims.mul(start, -1), dims.mul(length, -1))):
            p = dims.poly(low)  # (must be >= 0)
            terms = dict(p.terms)
            if p.constant is not None:
                bad = p.constant < 0
            elif len(p.symbols) == 1 and set(terms) <= {(), p.symbols}:
                (symbol,), scale, offset = p.symbols, terms[p.symbols], terms.get((), 0)
                lo, hi = ranges.get(symbol, (0, None))
                if scale > 0:  # symbol >= -offset / scale
                    lo = max(lo, -(offset // scale))
                else:  # symbol <= offset / -scale
                    hi = offset // -scale if hi is None else min(hi, offset // -scale)
                ranges[symbol] = (lo, hi)
                bad = hi is not None and hi < lo
            else:
                bad = True
            if bad:
                raise OpTypeError(f"axis {axis} of length {shape[axis]} sliced from {start} for {length}: a slice "
                                  f"lies within its axis for a range of one symbol's sizes, which each call is "
                                  f"checked against; this one's {dims.canonical(low)} >= 0 is not such a range")


def _window_sizes(cx: NodeContext, starts, ends) -> list[int] | None:
    """ends - starts, when it is the same constant for every value the run may give: both the
    same value plus constants (an iteration number and that number + 1), else None."""
    (a, at), (b, bt) = _base_and_offset(cx, starts), _base_and_offset(cx, ends)
    if a is None or a is not b:
        return None
    count = cx.type(starts).numel
    sizes = np.broadcast_to(bt - at, (count,)) if count is not None else None
    return None if sizes is None or (sizes < 0).any() else [int(n) for n in sizes]


def _base_and_offset(cx: NodeContext, t) -> tuple[object, np.ndarray]:
    """t as (a value, an int64 offset added to it): the additions and subtractions of constants
    and the integer casts and reshapes of one-element values peeled off; (None, t) for a constant."""
    graph, offset = cx.importer.graph, np.zeros((), np.int64)
    while True:
        if isinstance(t, np.ndarray) or graph.is_constant(t):
            return None, offset + (t if isinstance(t, np.ndarray) else graph.constants[t.name]).astype(np.int64)
        n = t.node
        constant = [graph.constants[v.name].astype(np.int64) if graph.is_constant(v) else None
                    for v in (n.inputs if n is not None else ())]
        match n and n.op:
            case "add" if constant[1] is not None:
                t, offset = n.inputs[0], offset + constant[1]
            case "add" if constant[0] is not None:
                t, offset = n.inputs[1], offset + constant[0]
            case "sub" if constant[1] is not None:
                t, offset = n.inputs[0], offset - constant[1]
            case "unsqueeze" | "squeeze" | "reshape" | "cast" if t.type.numel == 1 and dt.is_int(n.inputs[0].dtype):
                t = n.inputs[0]
            case _:
                return t, offset


@converts("Gather")
def _gather(cx: NodeContext):
    return [cx.op("gather", [cx.input(0), cx.input(1)], {"axis": cx.attr("axis", 0)})]


# -- padding and resizing -------------------------------------------------------------------


@converts("Pad")
def _pad(cx: NodeContext):
    x = cx.input(0)
    rank = cx.type(x).rank
    mode = cx.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise cx.unsupported(f"mode={mode}")
    pads = cx.const_ints(1, "pads")
    axes = cx.const_ints(3, "axes")
    if axes is not None:  # opset 18: pads of the given axes only
        full = [0] * 2 * rank
        for k, a in enumerate(axes):
            full[a % rank], full[a % rank + rank] = pads[k], pads[k + len(axes)]
        pads = full
    attrs = {"pads": tuple(pads), "mode": mode}
    value = cx.const(2, "constant_value")
    if value is not None and value.size:
        attrs["value"] = value.item()
    return [cx.op("pad", [x], attrs)]


RESIZE_MODES = ("nearest", "linear", "cubic")
TRANSFORM_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric",
                   "tf_crop_and_resize")


@converts("Resize")
def _resize(cx: NodeContext):
    """Resizes of the spatial dimensions of N, C, spatial..., to the size given by `sizes`
    (keep_aspect_ratio_policy not_larger/not_smaller: one scale for every resized axis, the
    smallest or largest of out/in, and the sizes in * scale rounded half up) or by `scales`
    (the size floor(in * scale), the coordinates mapped with the scale itself); roi per axis
    (starts, then ends) for tf_crop_and_resize, the resized axes' taken from `axes`."""
    x = cx.input(0)
    shape = cx.type(x).shape
    rank = len(shape)
    mode, transform = cx.attr("mode", "nearest"), cx.attr("coordinate_transformation_mode", "half_pixel")
    if mode not in RESIZE_MODES:
        raise cx.unsupported(f"mode={mode}")
    if transform not in TRANSFORM_MODES:
        raise cx.unsupported(f"coordinate_transformation_mode={transform}")
    policy = cx.attr("keep_aspect_ratio_policy", "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise cx.error(f"keep_aspect_ratio_policy {policy!r} is not one of stretch, not_larger, not_smaller")
    axes = [a % rank for a in cx.attr("axes", range(rank))]
    scales, sizes = cx.const(2, "scales"), cx.const_ints(3, "sizes")
    out, scale_of = list(shape), [None] * rank
    if sizes and policy != "stretch":
        ratios = [Fraction(size, shape[a]) for a, size in zip(axes, sizes)]
        scale = min(ratios) if policy == "not_larger" else max(ratios)
        for a in axes:
            out[a], scale_of[a] = math.floor(shape[a] * scale + Fraction(1, 2)), float(scale)
    elif sizes:
        for a, size in zip(axes, sizes):
            out[a] = size
    elif scales is not None and scales.size:
        for a, scale in zip(axes, scales.tolist()):
            if scale == 1:
                continue
            if not math.isfinite(scale) or scale <= 0:
                raise cx.error(f"the scales {scales.tolist()} have {scale} for axis {a}: each must be positive "
                               "and finite")
            if not isinstance(shape[a], int):
                raise cx.error(f"scaling the symbolic dimension {shape[a]!r}")
            out[a], scale_of[a] = math.floor(shape[a] * scale), scale
    else:
        raise cx.error("neither scales nor sizes is given")
    if rank < 3 or out[:2] != list(shape[:2]):
        raise cx.unsupported("resizing other dimensions than the spatial ones of N, C, spatial...")
    attrs = {"sizes": tuple(out[2:]), "mode": mode, "coordinate_transformation_mode": transform}
    if any(s is not None for s in scale_of[2:]):
        attrs["scales"] = tuple(out[a] / shape[a] if s is None else s for a, s in enumerate(scale_of) if a >= 2)
    if transform == "tf_crop_and_resize":
        attrs |= {"roi": _spatial_roi(cx, axes, rank), "extrapolation_value": cx.attr("extrapolation_value", 0.0)}
    if mode == "nearest":
        attrs["nearest_mode"] = cx.attr("nearest_mode", "round_prefer_floor")
    else:
        attrs["antialias"] = bool(cx.attr("antialias", 0))
    if mode == "cubic" or attrs.get("antialias"):
        attrs |= {"cubic_coeff_a": cx.attr("cubic_coeff_a", -0.75),
                  "exclude_outside": bool(cx.attr("exclude_outside", 0))}
    return [cx.op("resize", [x], attrs)]


def _spatial_roi(cx: NodeContext, axes: list[int], rank: int) -> tuple[float, ...]:
    """The roi of Resize's spatial axes, (starts..., ends...): the whole axis (0, 1) where `axes`
    leaves one out; N and C must keep theirs whole."""
    roi = cx.const(1, "roi")
    if roi is None or not roi.size:
        raise cx.error("coordinate_transformation_mode tf_crop_and_resize needs the roi input")
    roi = roi.astype("float64").tolist()
    starts, ends = [0.0] * rank, [1.0] * rank
    for k, a in enumerate(axes):
        starts[a], ends[a] = roi[k], roi[k + len(axes)]
    if starts[:2] != [0.0, 0.0] or ends[:2] != [1.0, 1.0]:
        raise cx.unsupported("a roi that crops N or C")
    return tuple(starts[2:] + ends[2:])

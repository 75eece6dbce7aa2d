"""Shape operators: reshape, flatten, squeeze, unsqueeze, transpose, expand, concat, split, slice.

Every output element is one input element (for concat: of one of the inputs), found by index
arithmetic on the output's indices: pattern `injective`, the default schedule, and inlined into
their consumer when fused. Dimensions may be symbols or expressions of them (ember.dims): merged
dimensions are their product ("5*batch"), concatenated ones their sum ("past + 1").
"""

from __future__ import annotations

import numpy as np

from .. import dims, te
from ..graph.core import Dim, TensorType
from ..tir.expr import as_int, const, max_, min_
from ..tir.functor import free_vars
from ..tir.structural import structural_key
from .common import broadcast_shapes, normalize_axis, result_dtype, te_dim, te_shape
from .registry import REQUIRED, OpDef, OpTypeError, register


def _static(op: str, d: Dim, what: str) -> int:
    if isinstance(d, str):
        raise OpTypeError(f"{op}: {what} is the symbolic dimension {d!r}; it must be a known size")
    return int(d)


def _linear(indices, shape) -> object:
    """Row-major linear index of `indices` into `shape` (te expressions)."""
    flat = None
    for i, d in zip(indices, shape):
        flat = i if flat is None else flat * d + i
    return const(0) if flat is None else flat


def _unlinear(flat, shape) -> list:
    """The indices into `shape` of a row-major linear index (no wrap on the outermost)."""
    out = []
    for k in range(len(shape) - 1, 0, -1):
        out.append(flat % shape[k])
        flat = flat // shape[k]
    out.append(flat)
    return out[::-1]


# -- reshape, flatten ----------------------------------------------------------------------------


def _infer_reshape(types, attrs):
    (x,) = types
    shape = tuple(attrs["shape"])
    for d in shape:
        if not (isinstance(d, str) or (isinstance(d, int) and d >= 0)):
            raise OpTypeError(f"reshape: target shape {shape} must hold sizes >= 0 and symbols (no -1: "
                              "the frontend resolves it)")
    if dims.mul(*x.shape) != dims.mul(*shape):
        raise OpTypeError(f"reshape: cannot reshape {x.shape} into {shape}: the sizes differ (or cannot be "
                          "proved equal)")
    return [TensorType(shape, x.dtype)]


def _reference_reshape(inputs, attrs):
    (x,) = inputs
    shape = list(attrs["shape"])
    symbols = [k for k, d in enumerate(shape) if isinstance(d, str)]
    if len(symbols) > 1:
        raise OpTypeError(f"reshape: the reference resolves one symbolic dimension, {attrs['shape']} has several")
    for k in symbols:
        shape[k] = -1
    return [x.reshape(shape)]


def reshape_compute(x, out_shape, name: str = "reshape"):
    """x's elements, in row-major order, in out_shape. Where only dimensions of size 1 are added
    or removed, each index maps straight to an index of x, with no division: bound analysis sees
    through it (a fused kernel computes a producer at a tile of its reshaped consumer). Else the
    trailing dimensions both shapes share map straight too, and only the leading ones go through
    a linear index."""
    src, dst = [_dim_key(d) for d in x.shape], [_dim_key(d) for d in out_shape]
    if [d for d in src if d != 1] == [d for d in dst if d != 1]:  # symbolic sizes too ("seq" == "seq")
        def element(*i):
            kept = iter(k for k, d in zip(i, dst) if d != 1)
            return x[tuple(0 if d == 1 else next(kept) for d in src)]

        return te.compute(out_shape, element, name=name)
    kept = _shared_trailing(src, dst)
    lead_x, lead_out = tuple(x.shape[:len(src) - kept]), tuple(out_shape[:len(dst) - kept])
    return te.compute(out_shape, lambda *i: x[tuple(_unlinear(_linear(i[:len(lead_out)], lead_out), lead_x))
                                              + tuple(i[len(lead_out):])], name=name)


def _shared_trailing(src: list, dst: list) -> int:
    """How many trailing dimensions src and dst share (at most all but their first): those index x
    as they are, and only the leading ones are linearized again (rows of a product split into a
    batch and rows read it at row (i // M) * M + i % M, which the simplifier folds back to i)."""
    kept = 0
    while kept < min(len(src), len(dst)) - 1 and src[-1 - kept] == dst[-1 - kept]:
        kept += 1
    return kept


def _dim_key(d) -> int | str:
    """A te dimension as a comparable value: its size, or the structure of a symbolic one."""
    n = as_int(d)
    return n if n is not None else structural_key(d)


def _compute_reshape(inputs, attrs, out_types):
    return [reshape_compute(inputs[0], te_shape(out_types[0], inputs))]


def _infer_flatten(types, attrs):
    (x,) = types
    rank = max(x.rank, 1)
    start = normalize_axis("flatten", attrs["start_dim"], rank)
    end = normalize_axis("flatten", attrs["end_dim"], rank)
    if start > end:
        raise OpTypeError(f"flatten: start_dim {attrs['start_dim']} comes after end_dim {attrs['end_dim']}")
    shape = x.shape or (1,)
    return [TensorType(shape[:start] + (dims.mul(*shape[start:end + 1]),) + shape[end + 1:], x.dtype)]


def _reference_flatten(inputs, attrs):
    (x,) = inputs
    shape = x.shape or (1,)
    rank = len(shape)
    start, end = attrs["start_dim"] % rank, attrs["end_dim"] % rank
    return [x.reshape(shape[:start] + (int(np.prod(shape[start:end + 1])),) + shape[end + 1:])]


# -- squeeze, unsqueeze, transpose, expand -------------------------------------------------------


def _squeezed_axes(op: str, x: TensorType, axes) -> list[int]:
    if axes is None:
        return [k for k, d in enumerate(x.shape) if d == 1]
    norm = sorted({normalize_axis(op, a, x.rank) for a in axes})
    for a in norm:
        if x.shape[a] != 1:
            raise OpTypeError(f"squeeze: dimension {a} of {x.shape} is {x.shape[a]!r}, not 1")
    return norm


def _infer_squeeze(types, attrs):
    (x,) = types
    drop = _squeezed_axes("squeeze", x, attrs["axes"])
    return [TensorType(tuple(d for k, d in enumerate(x.shape) if k not in drop), x.dtype)]


def _reference_squeeze(inputs, attrs):
    (x,) = inputs
    axes = attrs["axes"]
    return [np.squeeze(x, axis=None if axes is None else tuple(axes))]


def _unsqueezed_axes(x_rank: int, axes) -> list[int]:
    rank = x_rank + len(axes)
    norm = sorted(normalize_axis("unsqueeze", a, rank) for a in axes)
    if len(set(norm)) != len(norm):
        raise OpTypeError(f"unsqueeze: axes {axes} repeat a dimension")
    return norm


def _infer_unsqueeze(types, attrs):
    (x,) = types
    new = _unsqueezed_axes(x.rank, attrs["axes"])
    dims = iter(x.shape)
    return [TensorType(tuple(1 if k in new else next(dims) for k in range(x.rank + len(new))), x.dtype)]


def _reference_unsqueeze(inputs, attrs):
    (x,) = inputs
    return [np.expand_dims(x, tuple(_unsqueezed_axes(x.ndim, attrs["axes"])))]


def _compute_reshape_like(inputs, attrs, out_types):
    """squeeze, unsqueeze, flatten: the same elements in the same order."""
    return [reshape_compute(inputs[0], te_shape(out_types[0], inputs))]


def _perm(x_rank: int, perm) -> list[int]:
    norm = [normalize_axis("transpose", p, x_rank) for p in perm]
    if sorted(norm) != list(range(x_rank)):
        raise OpTypeError(f"transpose: perm {tuple(perm)} is not a permutation of {x_rank} axes")
    return norm


def _infer_transpose(types, attrs):
    (x,) = types
    return [TensorType(tuple(x.shape[p] for p in _perm(x.rank, attrs["perm"])), x.dtype)]


def _compute_transpose(inputs, attrs, out_types):
    (x,) = inputs
    perm = _perm(x.ndim, attrs["perm"])
    inverse = [perm.index(k) for k in range(x.ndim)]
    return [te.compute([x.shape[p] for p in perm], lambda *i: x[tuple(i[inverse[k]] for k in range(x.ndim))],
                       name="transpose")]


def _infer_expand(types, attrs):
    (x,) = types
    return [TensorType(broadcast_shapes("expand", x.shape, tuple(attrs["shape"])), x.dtype)]


def _reference_expand(inputs, attrs):
    (x,) = inputs
    shape = tuple(attrs["shape"])
    rank = max(x.ndim, len(shape))
    xs = (1,) * (rank - x.ndim) + x.shape
    target = (1,) * (rank - len(shape)) + shape
    out = []
    for k, (a, b) in enumerate(zip(xs, target)):
        if isinstance(b, str) and a == 1:
            raise OpTypeError(f"expand: the reference cannot size dimension {k} (symbol {b!r} from size 1)")
        out.append(a if isinstance(b, str) or b == 1 else b)
    return [np.broadcast_to(x, tuple(out)).copy()]


def _compute_expand(inputs, attrs, out_types):
    (x,) = inputs
    out_shape = te_shape(out_types[0], inputs)
    rank = len(out_shape)
    return [te.compute(out_shape, lambda *i: x[tuple(
        const(0) if as_int(d) == 1 else i[rank - x.ndim + k] for k, d in enumerate(x.shape))], name="expand")]


# -- concat, split, slice ------------------------------------------------------------------------


def _infer_concat(types, attrs):
    first = types[0]
    dtype = result_dtype("concat", *types)
    axis = normalize_axis("concat", attrs["axis"], first.rank)
    for t in types[1:]:
        if t.rank != first.rank or any(a != b for k, (a, b) in enumerate(zip(t.shape, first.shape)) if k != axis):
            raise OpTypeError(f"concat: shapes {' and '.join(str(u.shape) for u in types)} differ outside axis {axis}")
    total = dims.add(*(t.shape[axis] for t in types))
    return [TensorType(first.shape[:axis] + (total,) + first.shape[axis + 1:], dtype)]


def _compute_concat(inputs, attrs, out_types):
    axis = normalize_axis("concat", attrs["axis"], inputs[0].ndim)
    offsets = [const(0)]
    for x in inputs:
        offsets.append(offsets[-1] + x.shape[axis])
    out_shape = te_shape(out_types[0], inputs)

    def element(*i):
        pos = i[axis]
        # the last input is the default; each earlier one is chosen below its end (indices clamped
        # so that even the branches not taken stay in bounds)
        value = None
        for k in range(len(inputs) - 1, -1, -1):
            x, lo, hi = inputs[k], offsets[k], offsets[k + 1]
            if as_int(inputs[k].shape[axis]) == 0:
                continue
            local = min_(max_(pos - lo, 0), hi - lo - 1)
            load = x[i[:axis] + (local,) + i[axis + 1:]]
            value = load if value is None else te.if_then_else(pos < hi, load, value)
        return value

    return [te.compute(out_shape, element, name="concat")]


def _infer_split(types, attrs):
    (x,) = types
    axis = normalize_axis("split", attrs["axis"], x.rank)
    sizes = tuple(attrs["sizes"])
    if any(not isinstance(s, int) or s < 0 for s in sizes):
        raise OpTypeError(f"split: sizes {sizes} must be sizes >= 0")
    dim = _static("split", x.shape[axis], f"the split axis {axis}")
    if sum(sizes) != dim:
        raise OpTypeError(f"split: sizes {sizes} add up to {sum(sizes)}, not to dimension {axis} of size {dim}")
    return [TensorType(x.shape[:axis] + (s,) + x.shape[axis + 1:], x.dtype) for s in sizes]


def _reference_split(inputs, attrs):
    (x,) = inputs
    return [p.copy() for p in np.split(x, np.cumsum(attrs["sizes"])[:-1].tolist(), axis=attrs["axis"])]


def _compute_split(inputs, attrs, out_types):
    (x,) = inputs
    axis = normalize_axis("split", attrs["axis"], x.ndim)
    offsets = np.cumsum([0] + list(attrs["sizes"])).tolist()

    def piece(k: int, lo: int):
        return te.compute(te_shape(out_types[k], inputs), lambda *i: x[i[:axis] + (i[axis] + lo,) + i[axis + 1:]],
                          name=f"split{k}")

    return [piece(k, lo) for k, lo in enumerate(offsets[:-1])]


def slice_ranges(op: str, shape: tuple[Dim, ...], attrs) -> dict[int, tuple[Dim, int, Dim]]:
    """ONNX Slice: axis -> (start, step, length) after clamping, for every sliced axis. On a
    symbolic axis, a step of 1 with bounds counted from either end (`x[:, -1]`, `x[2:]`,
    `x[-4:-1]`, `x[:, :1]`): the axis is taken to be at least as long as those bounds (as
    torch.export's guards assert), so there is nothing to clamp."""
    starts, ends = tuple(attrs["starts"]), tuple(attrs["ends"])
    axes = tuple(range(len(starts))) if attrs["axes"] is None else tuple(attrs["axes"])
    steps = (1,) * len(starts) if attrs["steps"] is None else tuple(attrs["steps"])
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise OpTypeError(f"{op}: starts, ends, axes and steps have different lengths "
                          f"({len(starts)}, {len(ends)}, {len(axes)}, {len(steps)})")
    out = {}
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = normalize_axis(op, axis, len(shape))
        if axis in out:
            raise OpTypeError(f"{op}: axis {axis} is sliced twice")
        if step == 0:
            raise OpTypeError(f"{op}: step 0 on axis {axis}")
        if isinstance(shape[axis], str):
            out[axis] = _symbolic_range(op, shape[axis], axis, start, end, step)
            continue
        dim = int(shape[axis])
        if isinstance(start, str) or isinstance(end, str):
            out[axis] = _symbolic_bound(op, dim, axis, start, end, step)
            continue
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
            length = max(0, -(-(end - start) // step))
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
            length = max(0, -(-(start - end) // -step))
        out[axis] = (start, step, length)
    return out


def _symbolic_range(op: str, dim: str, axis: int, start: Dim, end: Dim, step: int) -> tuple[Dim, int, Dim]:
    """(start, 1, length) of a slice of a symbolic axis (see slice_ranges). A bound is an integer,
    counted from the end when negative, or a dimension (`x[:, :seq]` of an axis of seq + 1)."""
    to_end = isinstance(end, int) and end >= 2**62  # INT64_MAX and the like: up to the end
    from_end = [isinstance(b, int) and b < 0 for b in (start, end)]
    if step != 1 or (from_end[0] and not from_end[1] and not to_end):
        raise OpTypeError(f"{op}: axis {axis} is the symbolic dimension {dim!r}; a slice of it takes step 1 and "
                          f"bounds from one end each (got start {start}, end {end}, step {step})")
    begin = dims.add(dim, start) if from_end[0] else start
    stop = dim if to_end else dims.add(dim, end) if from_end[1] else end
    length = dims.add(stop, dims.mul(begin, -1))
    return begin, 1, max(length, 0) if isinstance(length, int) else length


def _symbolic_bound(op: str, dim: int, axis: int, start: Dim, end: Dim, step: int) -> tuple[Dim, int, Dim]:
    """(start, 1, length) of a slice of a static axis up to a symbolic bound (`position_ids[:, :seq]`
    of a table of 512 positions): the bound is taken to lie within the axis, as torch.export's
    range of the symbol asserts (its upper bound at most the axis, which the runtime checks at
    every call); a start counted from the end, an end that shrinks as a symbol grows (counted from
    the end) or a step other than 1 is refused."""
    if step != 1 or not (isinstance(start, int) and 0 <= start <= dim) or not isinstance(end, str) or any(
            c < 0 for m, c in dims.poly(end).terms if m):
        raise OpTypeError(f"{op}: axis {axis} of length {dim} sliced with a symbolic bound takes step 1, a start "
                          f"within the axis and a symbolic end that grows with its symbols (got start {start}, "
                          f"end {end}, step {step})")
    return start, 1, dims.add(end, -start)


def _infer_slice(types, attrs):
    (x,) = types
    ranges = slice_ranges("slice", x.shape, attrs)
    return [TensorType(tuple(ranges[k][2] if k in ranges else d for k, d in enumerate(x.shape)), x.dtype)]


def _reference_slice(inputs, attrs):
    (x,) = inputs
    for axis, (start, step, length) in slice_ranges("slice", x.shape, attrs).items():
        x = np.take(x, start + step * np.arange(length), axis=axis)
    return [np.array(x)]


def _compute_slice(inputs, attrs, out_types):
    (x,) = inputs
    ranges = slice_ranges("slice", tuple(as_int(d) if as_int(d) is not None else str(d) for d in x.shape), attrs)
    known = {v.name: v for d in x.shape for v in free_vars(d)}
    starts = {k: te_dim(start, known) for k, (start, _, _) in ranges.items()}
    return [te.compute(te_shape(out_types[0], inputs), lambda *i: x[tuple(
        starts[k] + i[k] * ranges[k][1] if k in ranges else i[k] for k in range(x.ndim))], name="slice")]


for _op in [
    OpDef("reshape", _infer_reshape, _reference_reshape, _compute_reshape, "injective", {"shape": REQUIRED},
          doc="The same elements in row-major order under a new shape (no -1)."),
    OpDef("flatten", _infer_flatten, _reference_flatten, _compute_reshape_like, "injective",
          {"start_dim": 1, "end_dim": -1}, doc="Merge dimensions start_dim..end_dim into one."),
    OpDef("squeeze", _infer_squeeze, _reference_squeeze, _compute_reshape_like, "injective", {"axes": None},
          doc="Remove the given dimensions of size 1 (None: every one)."),
    OpDef("unsqueeze", _infer_unsqueeze, _reference_unsqueeze, _compute_reshape_like, "injective",
          {"axes": REQUIRED}, doc="Insert dimensions of size 1 at the given positions of the output."),
    OpDef("transpose", _infer_transpose, lambda inputs, attrs: [np.transpose(inputs[0], attrs["perm"]).copy()],
          _compute_transpose, "injective", {"perm": REQUIRED}, doc="Permute the dimensions."),
    OpDef("expand", _infer_expand, _reference_expand, _compute_expand, "injective", {"shape": REQUIRED},
          doc="Broadcast to a shape (NumPy rules both ways, as ONNX Expand)."),
    OpDef("concat", _infer_concat, lambda inputs, attrs: [np.concatenate(inputs, axis=attrs["axis"])],
          _compute_concat, "injective", {"axis": REQUIRED}, num_inputs=(1, None),
          doc="Join tensors along an axis."),
    OpDef("split", _infer_split, _reference_split, _compute_split, "injective",
          {"axis": REQUIRED, "sizes": REQUIRED}, doc="Cut a tensor along an axis into pieces of the given sizes."),
    OpDef("slice", _infer_slice, _reference_slice, _compute_slice, "injective",
          {"starts": REQUIRED, "ends": REQUIRED, "axes": None, "steps": None},
          doc="ONNX Slice: start/end clamped to the dimension, negative steps walk backwards."),
]:
    register(_op)

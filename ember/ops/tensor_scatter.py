"""tensor_scatter(cache, update, write_indices?; axis=-2, mode="linear"): ONNX TensorScatter, the
key/value cache update of a decoder: the cache with, for each batch entry b (axis 0), the
update's entries along `axis` written from position write_indices[b] on (0 when left out);
"circular" wraps the positions around the cache's length (a sliding-window cache), the last row
written to a place kept where the update is longer than the cache (ONNX's reference stores them in
order). Linear, the positions index the cache's axis as ONNX's reference (NumPy) indexes it: a
negative one counts from the end, and one outside the axis, or an update longer than the cache
(symbolic lengths), raises IndexOutOfRangeError when the model runs, where the write used to be
dropped (onnxruntime raises for those, and for any negative write index as well).

One kernel (a te.extern): the cache copied to the output, a plain copy (rows in parallel, the
last axis vectorized: as fast as memcpy), then the update's rows stored at their positions. The
kernel reads the cache only at the place of the output element it writes, so the memory plan may
write the output over the cache (ember.passes.plan_memory: SAME_PLACE), as it does an elementwise
chain: no second cache-sized buffer. The copy is still made then (over itself): skipping it needs
the kernel to know it runs in place, which the plan decides after the kernels are built. Pattern
`opaque`.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..errors import IndexOutOfRangeError
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import Buffer, PrimExpr, Var, as_int, cast, checked_index, const, select
from ..tir.stmt import BufferStore, For, IfThenElse, Stmt, seq
from .common import checked_indices, normalize_axis
from .registry import OpDef, OpTypeError, register

MODES = ("linear", "circular")
# op -> the inputs it reads only at the place of the output element it computes (so the output
# may be written over them: ember.passes.plan_memory)
SAME_PLACE = {"tensor_scatter": (0,)}


def _axis(attrs, rank: int) -> int:
    axis = normalize_axis("tensor_scatter", attrs["axis"], rank)
    if axis == 0:
        raise OpTypeError("tensor_scatter: axis 0 is the batch axis; the sequence axis must come after it")
    return axis


def _infer(types: list[TensorType], attrs) -> list[TensorType]:
    cache, update = types[:2]
    if attrs["mode"] not in MODES:
        raise OpTypeError(f"tensor_scatter: mode must be one of {MODES}, got {attrs['mode']!r}")
    if cache.rank < 2 or update.rank != cache.rank or update.dtype != cache.dtype:
        raise OpTypeError(f"tensor_scatter needs a cache and an update of one rank (2 or more) and dtype, got "
                          f"{cache} and {update}")
    axis = _axis(attrs, cache.rank)
    for d, (c, u) in enumerate(zip(cache.shape, update.shape)):
        if d != axis and c != u:
            raise OpTypeError(f"tensor_scatter: the update's dimension {d} is {u}, the cache's {c}")
    if isinstance(cache.shape[axis], int) and isinstance(update.shape[axis], int) and \
            update.shape[axis] > cache.shape[axis]:
        raise OpTypeError(f"tensor_scatter: the update's {update.shape[axis]} entries along axis {axis} do not fit "
                          f"in the cache's {cache.shape[axis]}")
    if len(types) == 3 and (not dt.is_int(types[2].dtype) or types[2].shape != (cache.shape[0],)):
        raise OpTypeError(f"tensor_scatter: write_indices must be integers, one per batch entry "
                          f"({cache.shape[0]}), got {types[2]}")
    return [cache]


def _reference(inputs, attrs):
    cache, update = inputs[:2]
    axis = _axis(attrs, cache.ndim)
    # (int64 as the kernel casts them: a uint64 index of 2**63 or more wraps negative, where a Python
    # int of it overflowed NumPy's int64 arithmetic)
    starts = inputs[2].astype(np.int64) if len(inputs) == 3 else np.zeros(cache.shape[0], np.int64)
    out = cache.copy()
    length, count = cache.shape[axis], update.shape[axis]
    if attrs["mode"] == "linear" and count > length:
        raise IndexOutOfRangeError(f"tensor_scatter: the update's {count} entries along axis {axis} do not fit in "
                                   f"the cache's {length}", count - 1, length)
    for b in range(cache.shape[0]):
        at = starts[b] + np.arange(count)
        if attrs["mode"] == "circular":
            at %= length
        else:  # (every position an index of the axis)
            at = checked_indices("tensor_scatter", at, length)
        index = (b,) + (slice(None),) * (axis - 1)
        out[index + (at,)] = update[index + (np.arange(count),)]  # (the same axes first on both sides)
    return [out]


def linear_start(start: PrimExpr, count, length) -> PrimExpr:
    """The place in [0, length) of a linear update's first row, which `start` (an int64 write
    index) names: negative, from the cache's end. The window start .. start + count - 1 is checked
    at run time (the INDEX intrinsic, which raises IndexOutOfRangeError), the index it reports the
    window's last position where that is past the cache's end, else count - 1 where the update is
    longer than the cache (symbolic lengths), else the start (below -length); after a failed check
    the place is 0, and the caller's stores stay in the cache (its positions wrapped once, guarded)."""
    last = start + count - 1
    n, c = as_int(length), as_int(count)
    culprit = start if n is not None and c is not None and c <= n else select(count > length, count - 1, start)
    return checked_index(select(last >= length, last, culprit), length)


def _compute(inputs, attrs, out_types):
    cache = inputs[0]
    return te.extern([(cache.shape, cache.dtype)], inputs, lambda ins, outs: _update(ins, outs[0], attrs),
                     name="tensor_scatter")


def _update(ins: list[Buffer], out: Buffer, attrs) -> Stmt:
    """The loop-IR statement: the cache copied to the output (a plain copy, rows in parallel, the
    last axis vectorized), then the update's rows stored at their positions."""
    cache, update = ins[:2]
    starts = ins[2] if len(ins) == 3 else None
    axis = _axis(attrs, len(cache.shape))
    length = cache.shape[axis]

    def nest(shape, body):
        """Loops over every index of `shape` around body(index): one parallel loop over the rows
        (every axis but the last, flattened), the last axis vectorized inside."""
        r, j = Var("row", dt.INDEX_DTYPE), Var("j", dt.INDEX_DTYPE)
        index, rest = [j], r
        for d in reversed(shape[:-1]):
            index.append(rest % d)
            rest = rest // d
        rows = const(1)
        for d in shape[:-1]:
            rows = rows * d
        return For(r, const(0), rows, "parallel", For(j, const(0), shape[-1], "vectorized", body(index[::-1])))

    copy = nest(cache.shape, lambda i: BufferStore(out, cache[tuple(i)], tuple(i)))

    def row(i):  # i: the update's index but along the axis
        j = i[axis]
        start = const(0, j.dtype) if starts is None else cast(j.dtype, starts[i[0]])
        if attrs["mode"] == "circular":
            at = ((start + j) % length + length) % length
        else:  # a checked place, wrapped once (a negative start); past the end only when the check failed
            at = linear_start(start, update.shape[axis], length) + j
            at = select(at >= length, at - length, at)
        store = BufferStore(out, update[tuple(i)], (*i[:axis], at, *i[axis + 1:]))
        if attrs["mode"] == "circular":  # only the last `length` rows: an update longer than the cache (symbolic)
            return IfThenElse(j + length >= update.shape[axis], store)  # wraps, its later rows kept, and the rows'
            # parallel stores must not race for a place
        return IfThenElse(at < length, store)  # (past the end only after a failed check)

    return seq(copy, nest(update.shape, row))


register(OpDef(
    name="tensor_scatter",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="opaque",
    attrs={"axis": -2, "mode": "linear"},
    num_inputs=(2, 3),
    doc="ONNX TensorScatter: a cache with an update written along axis from each batch entry's write index "
        "(linear, or circular: wrapping around).",
))

"""cumsum(x; axis, exclusive=False, reverse=False): running sums along one axis.

te has no scan, so the sum is blocked: positions along the axis (in scan order: reversed for
`reverse`) fall in blocks of BLOCK; the kernel computes each block's sum, then the sum of the
blocks before each block, then each element as that plus the elements before it in its own
block. Work per element: about BLOCK + length / BLOCK additions, not the length.
Each row (all indices but the axis) is computed in parallel with its block sums.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from .common import normalize_axis
from .hints import by_rows
from .reduce import acc
from .registry import REQUIRED, OpDef, OpTypeError, register

BLOCK = 32


def _infer(types: list[TensorType], attrs) -> list[TensorType]:
    (x,) = types
    if dt.is_bool(x.dtype):
        raise OpTypeError("cumsum needs a numeric input, got bool")
    if x.rank == 0:
        raise OpTypeError("cumsum needs an input of rank 1 or more, got a scalar")
    if isinstance(attrs["axis"], bool) or not isinstance(attrs["axis"], int):
        raise OpTypeError(f"cumsum: axis must be an int, got {attrs['axis']!r}")
    normalize_axis("cumsum", attrs["axis"], x.rank)
    for k in ("exclusive", "reverse"):
        if not isinstance(attrs[k], bool):
            raise OpTypeError(f"cumsum: {k} must be a bool, got {attrs[k]!r}")
    return [x]


def _reference(inputs, attrs):
    (x,) = inputs
    axis = normalize_axis("cumsum", attrs["axis"], x.ndim)
    wide = x.astype("float64") if dt.is_float(x.dtype.name) else x
    if attrs["reverse"]:
        wide = np.flip(wide, axis)
    out = np.cumsum(wide, axis=axis, dtype=wide.dtype)
    if attrs["exclusive"]:
        out = np.concatenate([np.zeros_like(np.take(out, [0], axis)), np.take(out, range(out.shape[axis] - 1), axis)],
                             axis=axis)
    if attrs["reverse"]:
        out = np.flip(out, axis)
    return [np.ascontiguousarray(out).astype(x.dtype)]


def _compute(inputs, attrs, out_types):
    (x,) = inputs
    axis = normalize_axis("cumsum", attrs["axis"], x.ndim)
    exclusive, reverse = attrs["exclusive"], attrs["reverse"]
    length = x.shape[axis]
    blocks = (length + (BLOCK - 1)) // BLOCK

    def along(i, p):
        """i with its axis index set to p."""
        return (*i[:axis], p, *i[axis + 1:])

    def at(i, p):
        """The element at scan position p of i's row."""
        return acc(x[along(i, length - 1 - p if reverse else p)])

    j = te.reduce_axis((0, BLOCK), name="j")
    block_sum = te.compute(
        along(x.shape, blocks),
        lambda *i: te.sum(at(i, i[axis] * BLOCK + j), axis=j, where=i[axis] * BLOCK + j < length),
        name="block_sum",
    )
    c = te.reduce_axis((0, blocks), name="c")
    before = te.compute(
        along(x.shape, blocks), lambda *i: te.sum(block_sum[along(i, c)], axis=c, where=c < i[axis]), name="before",
    )
    jj = te.reduce_axis((0, BLOCK), name="jj")

    def position(i):
        """(block, offset in the block) of i's scan position."""
        p = length - 1 - i[axis] if reverse else i[axis]
        return p // BLOCK, p % BLOCK

    def in_block(*i):
        block, offset = position(i)
        return te.sum(at(i, block * BLOCK + jj), axis=jj, where=jj < offset if exclusive else jj <= offset)

    partial = te.compute(x.shape, in_block, name="partial")
    rows = [d for d in range(x.ndim) if d != axis]
    return [te.compute(
        x.shape, lambda *i: (partial[i] + before[along(i, position(i)[0])]).astype(x.dtype),
        name="out", attrs=by_rows(rows, [axis]),
    )]


register(OpDef(
    name="cumsum",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="opaque",
    attrs={"axis": REQUIRED, "exclusive": False, "reverse": False},
    doc="Running sums along axis; exclusive leaves each element out of its own sum, reverse runs from the end.",
))

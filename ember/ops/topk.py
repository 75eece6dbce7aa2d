"""topk(x; k, axis=-1, largest=True): the k largest (or smallest) elements along an axis, in
order, and their indices (int64); equal elements in the order of their indices, as ONNX and a
stable sort give.

te has no sort, so the order is counted: the rank of each element is the number of elements of
its row that come before it (larger, or equal at a smaller index), and the j-th output is the
element whose rank is j. Ranks are a permutation of the row, so exactly one element has each
rank. Work per row is n^2 + k n for a row of n: fine for the rows of classification heads,
beam and top-k sampling over a few thousand; a vocabulary of 50,000 wants a real selection.
NaN ranks above every number, +inf included, and NaNs among themselves by index: torch's topk
and NumPy's sort order (ONNX leaves it unspecified). Compared as numbers alone, NaN would rank
nowhere: two elements would share a rank, a rank would go unfilled, and its index would read
past the row.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import as_int, cast
from .common import normalize_axis
from .registry import REQUIRED, OpDef, OpTypeError, register


def _infer(types, attrs):
    (x,) = types
    if dt.is_bool(x.dtype) or x.rank == 0:
        raise OpTypeError(f"topk needs a numeric input of rank 1 or more, got {x.dtype}{list(x.shape)}")
    axis = normalize_axis("topk", attrs["axis"], x.rank)
    k, n = attrs["k"], x.shape[axis]
    if isinstance(k, bool) or not isinstance(k, int) or k < 0 or (isinstance(n, int) and k > n):
        raise OpTypeError(f"topk: k must be an int from 0 to the size {n} of axis {axis}, got {k!r}")
    shape = (*x.shape[:axis], k, *x.shape[axis + 1:])
    return [TensorType(shape, x.dtype), TensorType(shape, "int64")]


def _reference(inputs, attrs):
    (x,) = inputs
    axis = normalize_axis("topk", attrs["axis"], x.ndim)
    if not attrs["largest"]:  # (a stable ascending sort puts NaN last)
        order = np.argsort(x, axis=axis, kind="stable")
    elif dt.is_float(x.dtype.name):  # descending, NaN first: by NaN-ness, then by -x
        order = np.apply_along_axis(lambda r: np.lexsort((-r, ~np.isnan(r))), axis, x)
    else:  # descending: complemented bitwise (-MIN wraps)
        order = np.argsort(~x, axis=axis, kind="stable")
    indices = np.take(order, np.arange(attrs["k"]), axis=axis).astype("int64")
    return [np.take_along_axis(x, indices, axis), indices]


def _compute(inputs, attrs, out_types):
    (x,) = inputs
    axis = normalize_axis("topk", attrs["axis"], x.ndim)
    n = x.shape[axis]
    e = te.reduce_axis((0, n), name="e")

    def along(i, p):
        return (*i[:axis], p, *i[axis + 1:])

    def before(i):
        """Whether element e of i's row comes before element i."""
        a, b = x[along(i, e)], x[i]
        wins, same = (a > b if attrs["largest"] else a < b), a == b
        if dt.is_float(x.dtype):  # NaN above every number
            nan_wins = te.all(a != a, b == b) if attrs["largest"] else te.all(b != b, a == a)
            wins, same = te.any(wins, nan_wins), te.any(same, te.all(a != a, b != b))
        return te.any(wins, te.all(same, e < i[axis]))

    rank = te.compute(x.shape, lambda *i: te.sum(cast("int64", before(i)), axis=e), name="rank")
    f = te.reduce_axis((0, n), name="f")
    shape = along(x.shape, as_int(attrs["k"]))
    indices = te.compute(shape, lambda *i: te.sum(cast("int64", f), axis=f, where=rank[along(i, f)] == i[axis]),
                         name="indices")
    values = te.compute(shape, lambda *i: x[along(i, indices[i])], name="values")
    return [values, indices]


register(OpDef(
    name="topk",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="opaque",
    attrs={"k": REQUIRED, "axis": -1, "largest": True},
    doc="The k largest (smallest) elements along axis, in order, and their int64 indices; ties by index.",
))

"""cumsum and cumprod(x; axis, exclusive=False, reverse=False): running sums (products) along
one axis.

te has no scan, so the scan is blocked: positions along the axis (in scan order: reversed for
`reverse`) fall in blocks of BLOCK; the kernel computes each block's sum (product), then the sum
(product) of the blocks before each block, then each element as that combined with the elements
before it in its own block. Work per element: about BLOCK + length / BLOCK operations, not the
length. Each row (all indices but the axis) is computed in parallel with its block totals. An
exclusive scan starts from the identity (0, 1). A product never divides, so zeros are exact.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from .common import normalize_axis
from .hints import by_rows
from .reduction import acc
from .registry import REQUIRED, OpDef, OpTypeError, register

BLOCK = 32


# op -> (NumPy's scan, the te reducer, the identity an exclusive scan starts from)
SCANS = {"cumsum": (np.cumsum, te.sum, 0), "cumprod": (np.cumprod, te.prod, 1)}


def _infer(op: str):
    def infer(types: list[TensorType], attrs) -> list[TensorType]:
        (x,) = types
        if dt.is_bool(x.dtype):
            raise OpTypeError(f"{op} needs a numeric input, got bool")
        if x.rank == 0:
            raise OpTypeError(f"{op} needs an input of rank 1 or more, got a scalar")
        if isinstance(attrs["axis"], bool) or not isinstance(attrs["axis"], int):
            raise OpTypeError(f"{op}: axis must be an int, got {attrs['axis']!r}")
        normalize_axis(op, attrs["axis"], x.rank)
        for k in ("exclusive", "reverse"):
            if not isinstance(attrs[k], bool):
                raise OpTypeError(f"{op}: {k} must be a bool, got {attrs[k]!r}")
        return [x]

    return infer


def _reference(op: str):
    scan, _, identity = SCANS[op]

    def reference(inputs, attrs):
        (x,) = inputs
        axis = normalize_axis(op, attrs["axis"], x.ndim)
        wide = x.astype("float64") if dt.is_float(x.dtype.name) else x
        if attrs["reverse"]:
            wide = np.flip(wide, axis)
        with np.errstate(over="ignore"):  # integers wrap, as the kernel's do
            out = scan(wide, axis=axis, dtype=wide.dtype)
        if attrs["exclusive"]:
            first = np.full_like(np.take(out, [0], axis), identity)
            out = np.concatenate([first, np.take(out, range(out.shape[axis] - 1), axis)], axis=axis)
        if attrs["reverse"]:
            out = np.flip(out, axis)
        return [np.ascontiguousarray(out).astype(x.dtype)]

    return reference


def _compute(op: str):
    return lambda inputs, attrs, out_types: _scan(op, inputs, attrs)


def _scan(op: str, inputs, attrs):
    (x,) = inputs
    reducer = SCANS[op][1]
    axis = normalize_axis(op, attrs["axis"], x.ndim)
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
    block_total = te.compute(
        along(x.shape, blocks),
        lambda *i: reducer(at(i, i[axis] * BLOCK + j), axis=j, where=i[axis] * BLOCK + j < length),
        name="block_total",
    )
    c = te.reduce_axis((0, blocks), name="c")
    before = te.compute(
        along(x.shape, blocks), lambda *i: reducer(block_total[along(i, c)], axis=c, where=c < i[axis]), name="before",
    )
    jj = te.reduce_axis((0, BLOCK), name="jj")

    def position(i):
        """(block, offset in the block) of i's scan position."""
        p = length - 1 - i[axis] if reverse else i[axis]
        return p // BLOCK, p % BLOCK

    def in_block(*i):
        block, offset = position(i)
        return reducer(at(i, block * BLOCK + jj), axis=jj, where=jj < offset if exclusive else jj <= offset)

    partial = te.compute(x.shape, in_block, name="partial")
    rows = [d for d in range(x.ndim) if d != axis]
    return [te.compute(
        x.shape, lambda *i: reducer.fcombine(partial[i], before[along(i, position(i)[0])]).astype(x.dtype),
        name="out", attrs=by_rows(rows, [axis]),
    )]


for _op, _doc in [("cumsum", "Running sums"), ("cumprod", "Running products")]:
    register(OpDef(
        name=_op,
        infer=_infer(_op),
        reference=_reference(_op),
        compute=_compute(_op),
        pattern="opaque",
        attrs={"axis": REQUIRED, "exclusive": False, "reverse": False},
        doc=f"{_doc} along axis; exclusive leaves each element out of its own, reverse runs from the end.",
    ))

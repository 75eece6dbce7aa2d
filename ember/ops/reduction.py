"""The pieces reductions over axes share: axis validation (`normalize_axes`), shapes, the
accumulation dtype (`acc`: float32 for float16 and bfloat16), and the te reduction of a tensor
over some of its axes (`reduce_over`). The reduce operators (reduce.py), the scaled frame of their
statistics (scaling.py), the normalizations, cumsum and scatter build on them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .. import te
from ..graph.core import Dim
from ..tir import dtype as dt
from .common import normalize_axis
from .hints import CONTIGUOUS
from .registry import OpTypeError

# -- axes and shapes --------------------------------------------------------------------------


def normalize_axes(op: str, axes, rank: int) -> tuple[int, ...]:
    """`axes` (None: all, an int, or a sequence of ints) as sorted non-negative axes."""
    if axes is None:
        return tuple(range(rank))
    if isinstance(axes, int) and not isinstance(axes, bool):
        axes = (axes,)
    if not isinstance(axes, tuple | list) or not all(isinstance(a, int) and not isinstance(a, bool) for a in axes):
        raise OpTypeError(f"{op}: axes must be None, an int or a tuple of ints, got {axes!r}")
    if not axes:
        raise OpTypeError(f"{op}: axes is empty; give None to reduce every axis")
    out = sorted(normalize_axis(op, a, rank) for a in axes)
    if len(set(out)) != len(out):
        raise OpTypeError(f"{op}: axes {tuple(axes)} name an axis twice")
    return tuple(out)


def reduced_shape(shape: Sequence[Dim], axes: Sequence[int], keepdims: bool) -> tuple[Dim, ...]:
    return tuple(1 if d in axes else n for d, n in enumerate(shape) if keepdims or d not in axes)


def check_keepdims(op: str, attrs) -> bool:
    if not isinstance(attrs["keepdims"], bool):
        raise OpTypeError(f"{op}: keepdims must be a bool, got {attrs['keepdims']!r}")
    return attrs["keepdims"]


def acc_dtype(dtype: str) -> str:
    """The dtype sums accumulate in: float32 for float16 and bfloat16, the dtype itself otherwise."""
    return dt.compute_dtype(dtype)


def acc(e):
    """An expression in its accumulation dtype."""
    return e.astype(acc_dtype(e.dtype)) if e.dtype != acc_dtype(e.dtype) else e


# -- te ---------------------------------------------------------------------------------------

def reduce_over(x, axes: Sequence[int], keepdims: bool, reducer, name: str,
                source: Callable | None = None):
    """The te reduction of x (a te tensor, or a view of one: shape, ndim, indexing) over `axes`:
    out[i] = reducer(source(i, index into x)) over the reduced axes, source defaulting to the
    element of x. Marked CONTIGUOUS when the axes are x's trailing ones (for `factor_lanes`)."""
    ks = {a: te.reduce_axis((0, x.shape[a]), name=f"k{a}") for a in axes}
    shape = reduced_shape(x.shape, axes, keepdims)

    def element(*i):
        index = input_index(i, x.ndim, ks, keepdims)
        return reducer(source(i, index) if source else x[index], axis=[ks[a] for a in axes])

    contiguous = tuple(axes) == tuple(range(x.ndim - len(axes), x.ndim))
    return te.compute(shape, element, name=name, attrs={CONTIGUOUS: contiguous})


def input_index(out_index, rank: int, at: dict, keepdims: bool) -> tuple:
    """The index into the reduced tensor for an output index: `at[axis]` on the reduced axes."""
    spatial = iter(out_index)
    index = []
    for d in range(rank):
        if d in at:
            if keepdims:
                next(spatial)
            index.append(at[d])
        else:
            index.append(next(spatial))
    return tuple(index)


def count(x, axes: Sequence[int]):
    """The number of elements reduced over `axes` of x (an expression when a dim is symbolic)."""
    n = 1
    for a in axes:
        n = n * x.shape[a]
    return n

"""Helpers shared by the operator families: broadcasting, dimension arithmetic, dtypes, te shapes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import dims
from ..errors import IndexOutOfRangeError
from ..graph.core import Dim, TensorType
from ..tir import dtype as dt
from ..tir.expr import PrimExpr, Var, as_int, convert
from ..tir.functor import free_vars
from .registry import OpTypeError


def broadcast_shapes(op: str, *shapes: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """NumPy broadcasting of static or symbolic shapes (a symbol broadcasts only with 1 or itself)."""
    rank = max(len(s) for s in shapes)
    out: list[Dim] = []
    for d in range(rank):
        dims = {s[d - rank + len(s)] for s in shapes if d - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise OpTypeError(f"{op}: shapes {' and '.join(str(tuple(s)) for s in shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_index(out_index, in_shape: tuple[Dim, ...]):
    """The index into an input of shape in_shape for an output index (size-1 dims pinned to 0)."""
    rank = len(out_index)
    return tuple(0 if as_int(d) == 1 else out_index[rank - len(in_shape) + k] for k, d in enumerate(in_shape))


def result_dtype(op: str, *types: TensorType) -> str:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        raise OpTypeError(f"{op}: inputs have different dtypes {sorted(dtypes)}; insert a cast")
    return dtypes.pop()


def check_float(op: str, t: TensorType) -> None:
    if not dt.is_float(t.dtype):
        raise OpTypeError(f"{op} needs a floating-point input, got {t.dtype}")


def normalize_axis(op: str, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise OpTypeError(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def checked_indices(op: str, indices, size) -> np.ndarray:
    """The NumPy twin of the loop IR's INDEX intrinsic, for the references: `indices` as int64,
    negative ones counted from the end of an axis of `size` (an array that broadcasts against
    them, for one axis per last-axis entry); one outside its axis raises IndexOutOfRangeError, as
    a compiled model does, where NumPy would wrap it a second time or raise its own IndexError."""
    idx = np.asarray(indices).astype(np.int64)
    n = np.broadcast_to(np.asarray(size, np.int64), idx.shape)
    bad = (idx < -n) | (idx >= n)
    if bad.any():
        at = tuple(np.argwhere(bad)[0])
        value, axis = int(idx[at]), int(n[at])
        raise IndexOutOfRangeError(f"{op}: index {value} is out of range for an axis of size {axis} "
                                   f"(valid: {-axis} to {axis - 1})", value, axis)
    return np.where(idx < 0, idx + n, idx)


def te_shape(t: TensorType, tensors: Sequence = ()) -> tuple[PrimExpr, ...]:
    """The te shape of a type: a symbolic dimension is the size variable of that name in the shapes
    of `tensors` (the kernel's tensors it is computed from), a new one where none has it."""
    known = {v.name: v for x in tensors for d in x.shape for v in free_vars(d)}
    return tuple(te_dim(d, known) for d in t.shape)


def te_dim(d: Dim, known: dict[str, Var]) -> PrimExpr:
    """A dimension as a te expression: an expression of symbols over their size variables (taken
    from `known`, added there when new)."""
    return dims.render(d, lambda s: known.setdefault(s, Var(s)), convert)

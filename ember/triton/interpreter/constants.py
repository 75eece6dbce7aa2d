"""The compile-time arguments of the builtins, checked: constexpr ints, block shapes (powers of 2,
as Triton requires), dtypes and axes."""

from __future__ import annotations

import math

import numpy as np

from ...errors import TileError
from ..language import dtypes as tld
from ..language.dtypes import unwrap
from .values import Block

MAX_NUMEL = 1 << 20  # Triton's largest block


def const_int(value, what: str) -> int:
    """An int known when the kernel is compiled (a literal, a constexpr), not a block."""
    value = unwrap(value)
    if isinstance(value, Block):
        raise TileError(f"{what} must be a constexpr (a tl.constexpr parameter or a literal), not a block")
    if not isinstance(value, int | np.integer) or isinstance(value, bool):
        raise TileError(f"{what} must be an int, got {value!r}")
    return int(value)


def int_of(value, what: str) -> int:
    """An int of an int, a constexpr or a scalar integer block."""
    value = unwrap(value)
    return int(value) if isinstance(value, Block) else const_int(value, what)


def shape_of(shape, what: str) -> tuple[int, ...]:
    """A block shape: constexpr ints, each a power of 2 (Triton's rule)."""
    shape = unwrap(shape)
    dims = tuple(shape) if isinstance(shape, list | tuple) else (shape,)
    dims = tuple(const_int(d, f"{what}: a dimension") for d in dims)
    for d in dims:
        if d <= 0 or d & (d - 1):
            raise TileError(f"{what}: block dimensions must be powers of 2, got {list(dims)}")
    if math.prod(dims) > MAX_NUMEL:
        raise TileError(f"{what}: a block holds at most {MAX_NUMEL} elements, {list(dims)} has {math.prod(dims)}")
    return dims


def dims_of(args, what: str) -> tuple[int, ...]:
    """Varargs dims given as `f(x, 2, 3)` or `f(x, (2, 3))`."""
    if len(args) == 1 and isinstance(unwrap(args[0]), list | tuple):
        args = tuple(unwrap(args[0]))
    return tuple(const_int(a, what) for a in args)


def dtype_of(value, what: str) -> tld.dtype:
    """A dtype argument (tl.float32, ...)."""
    value = unwrap(value)
    if not isinstance(value, tld.dtype):
        raise TileError(f"{what}: expected a dtype (tl.float32, ...), got {value!r}")
    return value


def axis_of(axis, ndim: int, what: str) -> int | None:
    """A reduction axis, made non-negative (None: every axis)."""
    axis = unwrap(axis)
    if axis is None:
        return None
    axis = const_int(axis, f"{what}: axis")
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise TileError(f"{what}: axis {axis} is out of range for a block of {ndim} dimensions")
    return axis % max(ndim, 1)

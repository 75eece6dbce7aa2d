"""Builtins that make blocks and change their shapes: program ids, tl.arange and tl.full, and
tl.reshape, tl.trans, tl.broadcast_to, tl.cat and the like (a block's element function composed
with an index map; a reshape of a computed block reads it from memory)."""

from __future__ import annotations

import math

from ....tir import expr as te
from ....tir.expr import cast, const, select
from ...language import dtypes as tld
from ...language.dtypes import unwrap
from .. import ops
from .. import values as V
from ..values import Block, Scalar, TileTypeError
from .calls import Calls


class Blocks(Calls):
    """tl.program_id to tl.cat (the module doc)."""

    def b_program_id(self, axis):
        return Scalar(self.program[axis], tld.int32)

    def b_num_programs(self, axis):
        return Scalar(self.grid[axis], tld.int32)

    def b_arange(self, start, end):
        n = end - start
        if n <= 0 or n & (n - 1):
            raise TileTypeError(f"tl.arange({start}, {end}): the size is a power of two")
        return Block((n,), tld.int32, lambda idx: cast("int32", idx[0]) + start if start else cast("int32", idx[0]))

    def b_full(self, shape, value, dtype):
        shape = _shape(shape)
        v = ops.cast_to(value if V.is_runtime(value) else V.as_scalar(value), dtype) \
            if V.is_runtime(value) else Scalar(const(value, V.tir_dtype(dtype)) if not dtype.is_bool()
                                                 else const(bool(value)), dtype)
        if not shape:
            return v
        return Block(shape, dtype, lambda idx: v.expr)

    def b_zeros(self, shape, dtype):
        return self.b_full(shape, 0, dtype)

    def b_zeros_like(self, input):
        return self.b_full(input.shape, 0, input.dtype)

    def b_expand_dims(self, input, axis):
        axes = [axis] if isinstance(axis, int) else list(axis)
        rank = len(input.shape) + len(axes)
        axes = [a % rank for a in axes]
        items = [None if d in axes else slice(None) for d in range(rank)]
        return self.index(input, items)

    def b_broadcast_to(self, input, *shape):
        shape = _shape(shape[0] if len(shape) == 1 and isinstance(shape[0], tuple | list) else shape)
        if V.broadcast_shapes(input.shape, shape) != shape:
            raise TileTypeError(f"cannot broadcast {list(input.shape)} to {list(shape)}")
        return Block(shape, input.dtype, lambda idx: V.element(input, idx), base=input.base,
                     cost=getattr(input, "cost", 1), deps=V.deps_of(input))

    def b_broadcast(self, input, other):
        shape = V.broadcast_shapes(input.shape, other.shape)
        return self.b_broadcast_to(input, shape), self.b_broadcast_to(other, shape)

    def b_trans(self, input, *dims):
        if len(dims) == 1 and isinstance(dims[0], tuple | list):
            dims = tuple(dims[0])
        dims = dims or tuple(reversed(range(len(input.shape))))
        return self.b_permute(input, dims)

    def b_permute(self, input, *dims):
        if len(dims) == 1 and isinstance(dims[0], tuple | list):
            dims = tuple(dims[0])
        shape = tuple(input.shape[d] for d in dims)
        inverse = [dims.index(d) for d in range(len(dims))]
        return Block(shape, input.dtype, lambda idx: input.at(tuple(idx[inverse[d]] for d in range(len(dims)))),
                     base=input.base, cost=input.cost, deps=input.deps)

    def b_reshape(self, input, *shape, can_reorder=False):
        shape = _shape(shape[0] if len(shape) == 1 and isinstance(shape[0], tuple | list) else shape)
        if math.prod(shape) != math.prod(input.shape):
            raise TileTypeError(f"cannot reshape {list(input.shape)} to {list(shape)}")
        src = self.em.materialize(input) if input.base is None else input
        flat_src = src.shape

        def at(idx):
            flat = V.flat_index(shape, idx)
            out, rest = [], flat
            for n in reversed(flat_src):
                out.append(rest % n)
                rest = rest // n
            return src.at(tuple(reversed(out)))

        if not shape:
            return Scalar(src.at(tuple(const(0) for _ in flat_src)), input.dtype, input.base)
        return Block(shape, input.dtype, at, base=input.base, cost=src.cost + 2, deps=src.deps)

    b_view = b_reshape

    def b_ravel(self, input, can_reorder=False):
        return self.b_reshape(input, math.prod(input.shape))

    def b_cat(self, input, other, can_reorder=False):
        if input.shape[1:] != other.shape[1:]:
            raise TileTypeError(f"tl.cat of {list(input.shape)} and {list(other.shape)}: the shapes differ after "
                                f"the first dimension")
        input, other, dtype = ops.typed(input, other)
        a, b = self.em.materialize(ops.cast_to(input, dtype)), self.em.materialize(ops.cast_to(other, dtype))
        n = a.shape[0]

        def at(idx):
            first = te.binary("<", idx[0], const(n, idx[0].dtype))
            # both sides read in bounds: each index clamped into its own block
            ia = te.min_(idx[0], const(n - 1, idx[0].dtype))
            ib = te.max_(idx[0] - n, const(0, idx[0].dtype))
            return select(first, a.at((ia, *idx[1:])), b.at((ib, *idx[1:])))

        return Block((n + b.shape[0], *a.shape[1:]), dtype, at, cost=3)


def _shape(shape) -> tuple[int, ...]:
    if isinstance(shape, int):
        return (shape,)
    return tuple(unwrap(s) for s in shape)

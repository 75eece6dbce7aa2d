"""Reducing builtins: tl.sum, tl.max (with its indices), tl.argmax, tl.cumsum, tl.softmax and the
like, through the Emitter's reduce, arg_reduce and scan (`keep_dims` a reshape of the result)."""

from __future__ import annotations

import math

import numpy as np

from ....tir import expr as te
from ....tir.expr import PrimExpr, const
from ...language import dtypes as tld
from .. import ops
from .. import values as V
from ..values import Block, Scalar, TileTypeError
from .blocks import Blocks


class Reductions(Blocks):
    """tl.sum to tl.softmax (the module doc)."""

    def _axis(self, input, axis):
        if isinstance(input, Scalar):
            return input, None
        if axis is None:
            if len(input.shape) > 1:
                input = self.b_reshape(input, math.prod(input.shape))
            return input, 0
        return input, axis % len(input.shape)

    def _keep(self, out, input_shape, axis, keep_dims):
        if not keep_dims:
            return out
        shape = list(input_shape)
        shape[axis] = 1
        return self.b_reshape(out if isinstance(out, Block) else Block((1,), out.dtype, lambda idx: out.expr),
                              tuple(shape)) if shape else out

    def b_sum(self, input, axis=None, keep_dims=False, dtype=None):
        shape0 = input.shape
        input, ax = self._axis(input, axis)
        if ax is None:
            return input
        out_dtype = dtype or input.dtype
        if dtype is None and input.dtype.is_int() and V._INT_BITS[input.dtype.name] < 32:
            out_dtype = tld.int32
        zero = const(0.0 if out_dtype.is_floating() else 0, V.tir_dtype(out_dtype))
        out = self.em.reduce(input, ax, lambda a, b: a + b, zero, out_dtype)
        return self._keep(out, shape0, ax if axis is not None else 0, keep_dims)

    def b_xor_sum(self, input, axis=None, keep_dims=False):
        if not input.dtype.is_int() or input.dtype.is_bool():
            raise TileTypeError(f"tl.xor_sum needs integers, got {input.dtype.name}")
        shape0 = input.shape
        input, ax = self._axis(input, axis)
        if ax is None:
            return input
        zero = const(0, V.tir_dtype(input.dtype))
        out = self.em.reduce(input, ax, lambda a, b: te.binary("^", a, b), zero, input.dtype)
        return self._keep(out, shape0, ax if axis is not None else 0, keep_dims)

    def _extreme(self, op, input, axis, return_indices, keep_dims):
        shape0 = input.shape
        input, ax = self._axis(input, axis)
        if ax is None:
            return (input, Scalar(const(0, "int32"), tld.int32)) if return_indices else input
        t = V.tir_dtype(input.dtype)
        init = _identity(op, t)
        if return_indices:
            better = (lambda a, b: a > b) if op == "max" else (lambda a, b: a < b)
            vals, idx = self.em.arg_reduce(input, ax, better, init, tld.int32)
            return self._keep(vals, shape0, ax, keep_dims), self._keep(idx, shape0, ax, keep_dims)
        out = self.em.reduce(input, ax, lambda a, b: te.binary(op, a, b), init, input.dtype)
        return self._keep(out, shape0, ax if axis is not None else 0, keep_dims)

    def b_max(self, input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
        return self._extreme("max", input, axis, return_indices, keep_dims)

    def b_min(self, input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
        return self._extreme("min", input, axis, return_indices, keep_dims)

    def b_argmax(self, input, axis, tie_break_left=True, keep_dims=False):
        return self._extreme("max", input, axis, True, keep_dims)[1]

    def b_argmin(self, input, axis, tie_break_left=True, keep_dims=False):
        return self._extreme("min", input, axis, True, keep_dims)[1]

    def _scan(self, input, axis, reverse, combine):
        if isinstance(input, Scalar):
            return input
        dtype = input.dtype
        if dtype.is_int() and V._INT_BITS[dtype.name] < 32:
            dtype = tld.int32
        return self.em.scan(input, axis % len(input.shape), combine, dtype, reverse)

    def b_cumsum(self, input, axis=0, reverse=False):
        return self._scan(input, axis, reverse, lambda a, b: a + b)

    def b_cumprod(self, input, axis=0, reverse=False):
        return self._scan(input, axis, reverse, lambda a, b: a * b)

    def b_softmax(self, input, ieee_rounding=False):
        m = self.b_max(input, len(input.shape) - 1, keep_dims=True)
        e = self.em.materialize(ops.math("exp", ops.binary("-", input, m)))
        return ops.binary("/", e, self.b_sum(e, len(input.shape) - 1, keep_dims=True))


def _identity(op: str, t: str) -> PrimExpr:
    """The start of a "max" (t's lowest value) or "min" (its highest) reduction of type t."""
    lowest = op == "max"
    if t.startswith("float"):
        return const(float("-inf") if lowest else float("inf"), t)
    if t == "bool":
        return const(not lowest)
    info = np.iinfo(t)
    return const(int(info.min if lowest else info.max), t)

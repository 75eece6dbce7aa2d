"""How a `tl.<name>` call reaches the compiler's builtin `b_<name>`: its arguments bound with the
builtin's own signature (language/core.py), so defaults and keywords are Triton's; methods of a
run-time value (`x.to(...)`, `x.T`, `x.sum(...)`) and indexing (`x[:, None]`). The builtins
themselves are the layers above this class (the package doc)."""

from __future__ import annotations

import inspect

from ....tir.expr import PrimExpr
from ...language import core as tlcore
from ...language.dtypes import unwrap
from ..emitter import Emitter
from ..values import Block, BlockPtr, Scalar, TileTypeError


class Calls:
    """The state every builtin reads: the Emitter, the program ids and the grid, the tensors'
    spans and the status buffer of the checks, the frontend (for flush and error lines)."""

    def __init__(self, em: Emitter, program: tuple[PrimExpr, ...], grid: tuple[PrimExpr, ...], params_span,
                 status):
        self.em = em
        self.program = program  # the program ids (int32 expressions)
        self.grid = grid
        self.span = params_span  # Param -> (lo, hi) expressions (debug bounds)
        self.status = status  # the launch's status buffer: [site] of a failed check (debug, device_assert)
        self.sites: list[str] = []  # what each status code means
        self.frontend = None

    def call(self, name: str, fn, args: list, kwargs: dict):
        impl = getattr(self, f"b_{name}", None)
        if impl is None:
            raise TileTypeError(f"tl.{name} is not supported by the compiler yet")
        sig = inspect.signature(fn)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TileTypeError(f"tl.{name}{sig}: {e}") from None
        bound.apply_defaults()
        return impl(*(unwrap(a) for a in bound.args), **{k: unwrap(v) for k, v in bound.kwargs.items()})

    def method(self, v, attr: str):
        """`x.to(...)`, `x.dtype`, `x.shape`, `x.T` and the like on a run-time value."""
        if attr == "dtype":
            return v.dtype
        if attr == "shape":
            return list(v.shape) if not isinstance(v, BlockPtr) else list(v.block_shape)
        if attr == "to":
            return lambda dtype, fp_downcast_rounding=None, bitcast=False: self.b_cast(v, unwrap(dtype),
                                                                                       bitcast=bitcast)
        if attr == "T":
            return self.b_trans(v)
        if attr in tlcore.MEMBERS:
            fn = tlcore.BUILTINS[attr]
            return lambda *a, **k: self.call(attr, fn, [v, *a], k)
        raise TileTypeError(f"a {type(v).__name__.lower()} has no attribute {attr!r} in the compiler")

    def index(self, v, items: list):
        """`x[:, None]`: new dimensions of size 1."""
        if isinstance(v, Scalar):
            if any(i is not None for i in items):
                raise TileTypeError("a scalar is indexed with None only")
            shape = (1,) * len(items)
            return Block(shape, v.dtype, lambda idx: v.expr, base=v.base)
        if sum(i is not None for i in items) != len(v.shape):
            raise TileTypeError(f"indexing a block of rank {len(v.shape)} with {len(items)} items")
        shape, keep = [], []
        d = 0
        for i in items:
            if i is None:
                shape.append(1)
            else:
                shape.append(v.shape[d])
                keep.append(len(shape) - 1)
                d += 1
        return Block(tuple(shape), v.dtype, lambda idx: v.at(tuple(idx[k] for k in keep)), base=v.base, cost=v.cost,
                     deps=v.deps)

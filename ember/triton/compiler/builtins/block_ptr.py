"""Block pointers: tl.make_block_ptr and tl.advance, and a block pointer's access as the pointer
block, mask (its boundary checks) and padding that tl.load and tl.store take."""

from __future__ import annotations

from ....tir import expr as te
from ....tir.expr import cast, const
from ...language import dtypes as tld
from ...language.dtypes import unwrap
from .. import values as V
from ..values import Block, BlockPtr, TileTypeError
from .calls import Calls


class BlockPointers(Calls):
    """tl.make_block_ptr, tl.advance and their accesses (the module doc)."""

    def b_make_block_ptr(self, base, shape, strides, offsets, block_shape, order):
        if not V.is_runtime(base) or not base.dtype.is_pointer or base.shape:
            raise TileTypeError("tl.make_block_ptr takes a pointer argument as its base")
        rank = len(block_shape)
        if not (len(shape) == len(strides) == len(offsets) == rank):
            raise TileTypeError("tl.make_block_ptr: shape, strides, offsets and block_shape have one entry per "
                                "dimension")

        def expr(x):
            s = V.as_scalar(x) if not V.is_runtime(x) else x
            return cast("int64", s.expr)

        return BlockPtr(base.base, base.expr, tuple(expr(x) for x in shape), tuple(expr(x) for x in strides),
                        tuple(expr(x) for x in offsets), tuple(unwrap(b) for b in block_shape), tuple(order))

    def b_advance(self, base, offsets):
        if not isinstance(base, BlockPtr):
            raise TileTypeError("tl.advance takes a block pointer")
        new = tuple(o + cast("int64", (V.as_scalar(x) if not V.is_runtime(x) else x).expr)
                    for o, x in zip(base.offsets, offsets))
        return BlockPtr(base.base, base.offset, base.shape, base.strides, new, base.block_shape, base.order)

    def _block_ptr_access(self, p: BlockPtr, boundary_check, padding_option):
        shape = p.block_shape
        checks = tuple(boundary_check or ())

        def ptr_at(idx):
            off = p.offset
            for d in range(len(shape)):
                off = off + (p.offsets[d] + idx[d]) * p.strides[d]
            return off

        def mask_at(idx):
            out = None
            for d in checks:
                pos = p.offsets[d] + idx[d]
                c = te.binary("&&", te.binary(">=", pos, const(0)), te.binary("<", pos, p.shape[d]))
                out = c if out is None else te.binary("&&", out, c)
            return out

        pointer = Block(shape, p.dtype, ptr_at, base=p.base)
        mask = Block(shape, tld.int1, mask_at) if checks else None
        other = None
        if checks and padding_option == "nan":
            other = float("nan")
        return pointer, mask, other

"""Builtins that read and write memory: tl.load (a Deferred load where the block is read later,
emitter.Deferred), tl.store, and the atomics; in the debug mode each access checked against its
argument's span (checks.py)."""

from __future__ import annotations

from ....tir import expr as te
from ....tir.expr import BufferLoad, Call, const, select
from ....tir.stmt import BufferStore, IfThenElse, seq
from ...language import dtypes as tld
from .. import ops
from .. import values as V
from ..affine import contiguous_dim
from ..emitter import Deferred, buffer_block
from ..values import Block, BlockPtr, Scalar, TileTypeError
from .block_ptr import BlockPointers
from .checks import Checks, negated


class Memory(BlockPointers, Checks):
    """tl.load, tl.store and tl.atomic_* (the module doc)."""

    def b_load(self, pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
               eviction_policy="", volatile=False):
        if isinstance(pointer, BlockPtr):
            pointer, mask, other = self._block_ptr_access(pointer, boundary_check, padding_option)
        if not V.is_runtime(pointer) or not pointer.dtype.is_pointer:
            raise TileTypeError("tl.load of something that is not a pointer")
        base = pointer.base
        dtype = base.dtype
        t = V.tir_dtype(dtype)
        if mask is not None and not V.is_runtime(mask):
            mask = None if mask else False
        if other is not None:
            other = ops.cast_to(other, dtype) if V.is_runtime(other) else Scalar(const(other, t), dtype)
        shape = V.broadcast_shapes(*(v.shape for v in (pointer, mask, other) if V.is_runtime(v)))
        site = self._site(f"tl.load out of the bounds of argument '{base.name}' at {self.frontend.where()}") \
            if self.em.debug else None
        buf = self.em.local("ld", shape, t) if not shape or self.em.debug or mask is False else None

        def body(idx, full):
            off = V.element(pointer, idx)
            m = None if mask is None or full else self.em.mask(V.convert(V.element(mask, idx), mask.dtype, tld.int1))
            fallback = V.element(other, idx) if other is not None else const(0, t)
            value = BufferLoad(base.buffer, (off,), t)
            out = V.flat_index(shape, idx)
            inb = self._check(base, off)
            if inb is not None:
                ok = inb if m is None else te.binary("&&", m, inb)
                bad = negated(inb) if m is None else te.binary("&&", m, negated(inb))
                return seq(IfThenElse(bad, self._fail(site)), BufferStore(buf, select(ok, value, fallback), (out,)))
            value = value if m is None else select(m, value, fallback)
            return value if buf is None else BufferStore(buf, value, (out,))

        if mask is False:
            self.em.store_block(buf, other if other is not None else Scalar(const(0, t), dtype), shape)
        elif shape and not self.em.debug:
            inner = contiguous_dim(pointer) if isinstance(pointer, Block) and pointer.shape == shape else None
            d = Deferred(self.em, shape, t, body, inner)
            return Block(shape, dtype, d.at, deps=frozenset([d]))
        else:
            self.em.versioned(shape, body, self.em.lanes(t))
        if not shape:
            return Scalar(BufferLoad(buf, (const(0),), t), dtype)
        return buffer_block(buf, shape, dtype)

    def b_store(self, pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
        self.frontend.flush()
        if isinstance(pointer, BlockPtr):
            pointer, mask, _ = self._block_ptr_access(pointer, boundary_check, "")
        if not V.is_runtime(pointer) or not pointer.dtype.is_pointer:
            raise TileTypeError("tl.store to something that is not a pointer")
        if mask is not None and not V.is_runtime(mask):
            if not mask:
                return None
            mask = None
        base = pointer.base
        t = V.tir_dtype(base.dtype)
        value = ops.cast_to(value, base.dtype)
        shape = V.broadcast_shapes(*(v.shape for v in (pointer, value, mask) if V.is_runtime(v)))
        site = self._site(f"tl.store out of the bounds of argument '{base.name}' at {self.frontend.where()}") \
            if self.em.debug else None

        def body(idx, full):
            off = V.element(pointer, idx)
            s = BufferStore(base.buffer, V.element(value, idx), (off,))
            inb = self._check(base, off)
            if inb is not None:
                s = IfThenElse(inb, s, self._fail(site))
            if mask is None or full:
                return s
            return IfThenElse(self.em.mask(V.convert(V.element(mask, idx), mask.dtype, tld.int1)), s)

        self.em.versioned(shape, body, self.em.lanes(t))

    def _atomic(self, name: str, pointer, operands: list, mask):
        self.frontend.flush()
        if not V.is_runtime(pointer) or not pointer.dtype.is_pointer:
            raise TileTypeError(f"tl.{name} of something that is not a pointer")
        base = pointer.base
        t = V.tir_dtype(base.dtype)
        operands = [ops.cast_to(o, base.dtype) for o in operands]
        if mask is not None and not V.is_runtime(mask):
            mask = None if mask else False
        shape = V.broadcast_shapes(*(v.shape for v in (pointer, mask, *operands) if V.is_runtime(v)))
        out = self.em.local("old", shape, t)
        site = self._site(f"tl.{name} out of the bounds of argument '{base.name}' at {self.frontend.where()}") \
            if self.em.debug else None

        def body(idx):
            off = V.element(pointer, idx)
            call = Call(name, (BufferLoad(base.buffer, (off,), t), *(V.element(o, idx) for o in operands)),
                        V.tir_dtype(base.dtype))
            s = BufferStore(out, call, (V.flat_index(shape, idx),))
            inb = self._check(base, off)
            if inb is not None:
                s = IfThenElse(inb, s, self._fail(site))
            if mask is None:
                return s
            return IfThenElse(V.convert(V.element(mask, idx), mask.dtype, tld.int1), s)

        if mask is not False:
            self.em.emit(self.em.nest(shape, body, vector=False))
        if not shape:
            return Scalar(BufferLoad(out, (const(0),), t), base.dtype)
        return buffer_block(out, shape, base.dtype)

    def b_atomic_add(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_add", pointer, [val], mask)

    def b_atomic_max(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_max", pointer, [val], mask)

    def b_atomic_min(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_min", pointer, [val], mask)

    def b_atomic_and(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_and", pointer, [val], mask)

    def b_atomic_or(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_or", pointer, [val], mask)

    def b_atomic_xor(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_xor", pointer, [val], mask)

    def b_atomic_xchg(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_xchg", pointer, [val], mask)

    def b_atomic_cas(self, pointer, cmp, val, sem=None, scope=None):
        return self._atomic("atomic_cas", pointer, [cmp, val], None)

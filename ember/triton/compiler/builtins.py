"""The builtins of the tile language, compiled: each `tl.<name>` call becomes compile-time values
and, for memory, statements of the loop IR (through the Emitter). A call's arguments are bound
with the builtin's own signature (language/core.py), so defaults and keywords are Triton's."""

from __future__ import annotations

import inspect
import math

from ...tir import expr as te
from ...tir.expr import BufferLoad, Call, PrimExpr, cast, const, select
from ...tir.stmt import BufferStore, Evaluate, IfThenElse, seq
from ..language import core as tlcore
from ..language import dtypes as tld
from ..language.dtypes import unwrap
from . import ops
from . import values as V
from .affine import contiguous_dim
from .emitter import Deferred, Emitter, buffer_block
from .values import Block, BlockPtr, Scalar, TileTypeError


class Builtins:
    def __init__(self, em: Emitter, program: tuple[PrimExpr, ...], grid: tuple[PrimExpr, ...], params_span,
                 status):
        self.em = em
        self.program = program  # the program ids (int32 expressions)
        self.grid = grid
        self.span = params_span  # Param -> (lo, hi) expressions (debug bounds)
        self.status = status  # the launch's status buffer: [site] of a failed check (debug, device_assert)
        self.sites: list[str] = []  # what each status code means
        self.frontend = None

    # -- dispatch ---------------------------------------------------------------------------------
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

    # -- programs and blocks ------------------------------------------------------------------
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

    def b_cast(self, input, dtype, fp_downcast_rounding=None, bitcast=False):
        if bitcast:
            raise TileTypeError("bitcast is not supported by the compiler yet")
        if isinstance(dtype, str):
            dtype = tld.DTYPES[dtype]
        return ops.cast_to(input, dtype)

    # -- elementwise ---------------------------------------------------------------------------
    def b_where(self, condition, x, y):
        return ops.where(condition, x, y)

    def b_maximum(self, x, y, propagate_nan=None):
        return ops.minmax("max", x, y)

    def b_minimum(self, x, y, propagate_nan=None):
        return ops.minmax("min", x, y)

    def b_clamp(self, x, min, max, propagate_nan=None):
        return ops.minmax("min", ops.minmax("max", x, min), max)

    def b_fma(self, x, y, z):
        return ops.binary("+", ops.binary("*", x, y), z)

    def b_fdiv(self, x, y, ieee_rounding=False):
        return ops.binary("/", x, y)

    def b_div_rn(self, x, y):
        return ops.binary("/", x, y)

    def b_umulhi(self, x, y):
        """The high 32 bits of the 64-bit product of two 32-bit integers."""
        x, y, dtype = ops.typed(x, y)
        if dtype.name not in ("int32", "uint32"):
            raise TileTypeError(f"tl.umulhi needs 32-bit integers, got {dtype.name}")
        t, wide = V.tir_dtype(dtype), "int64" if dtype.name == "int32" else "uint64"
        return ops.lift(lambda a, b: cast(t, te.binary("//", cast(wide, a) * cast(wide, b), const(1 << 32, wide))),
                        ops.cast_to(x, dtype), ops.cast_to(y, dtype), dtype=dtype, cost=4)

    def b_cdiv(self, x, div):
        if not V.is_runtime(x) and not V.is_runtime(div):
            return -(-x // div)
        return ops.binary("//", ops.binary("+", x, ops.binary("-", div, 1)), div)

    def __getattr__(self, name: str):
        if name.startswith("b_") and name[2:] in ("exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt", "abs",
                                                   "sigmoid", "erf", "tanh", "sin", "cos", "floor", "ceil"):
            return lambda x: ops.math(name[2:], x)
        raise AttributeError(name)

    # -- shapes ------------------------------------------------------------------------------------
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

    # -- reductions --------------------------------------------------------------------------------
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
        init = _lowest(t) if op == "max" else _highest(t)
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

    def b_softmax(self, input, ieee_rounding=False):
        m = self.b_max(input, len(input.shape) - 1, keep_dims=True)
        e = self.em.materialize(ops.math("exp", ops.binary("-", input, m)))
        return ops.binary("/", e, self.b_sum(e, len(input.shape) - 1, keep_dims=True))

    # -- tl.dot ---------------------------------------------------------------------------------------
    def b_dot(self, input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
              out_dtype=tld.float32):
        if len(input.shape) != 2 or len(other.shape) != 2 or input.shape[1] != other.shape[0]:
            raise TileTypeError(f"tl.dot of {list(input.shape)} and {list(other.shape)}: two blocks (M, K) and (K, N)")
        m, k = input.shape
        n = other.shape[1]
        if input.dtype.is_int():
            out_dtype = tld.int32
        elif out_dtype is None or not out_dtype.is_floating() or out_dtype == tld.float16:
            out_dtype = tld.float32 if out_dtype != tld.float16 else out_dtype
        work = tld.float32 if out_dtype.is_floating() else tld.int32
        precision = input_precision_of(input_precision, allow_tf32)
        inputs = self.em.dot_inputs(input.dtype, m, n, k, precision) if input.dtype == other.dtype else None
        a = self._operand(input, inputs or work)
        b = self._operand(other, inputs or work)
        t = V.tir_dtype(work)
        if acc is not None and isinstance(acc, Block) and acc.buffer is not None and acc.dtype == work \
                and acc.buffer in self.frontend.carried and acc.shape == (m, n):
            c = acc.buffer  # the loop's accumulator: updated in place
        else:
            c = self.em.local("dot", (m, n), t)
            init = ops.cast_to(acc, work) if acc is not None else Scalar(const(0, t), work)
            self.em.store_block(c, init, (m, n))
        self.em.dot(a, b, c, m, n, k, precision)
        out = buffer_block(c, (m, n), work)
        return out if out_dtype == work else ops.cast_to(out, out_dtype)

    def _operand(self, v: Block, work):
        (d,) = v.deps if len(v.deps) == 1 else (None,)
        if d is not None and v.at == d.at and v.dtype == work:  # a load: read it in once
            d.read()
            return d.buffer
        if v.buffer is not None and v.dtype == work:
            return v.buffer
        return self.em.materialize(ops.cast_to(v, work), "op").buffer

    # -- memory ---------------------------------------------------------------------------------------
    def _check(self, base, off: PrimExpr) -> PrimExpr | None:
        """Debug mode: the condition that off is inside its argument's span (None otherwise)."""
        if not self.em.debug:
            return None
        lo, hi = self.span[base]
        return te.binary("&&", te.binary(">=", off, lo), te.binary("<", off, hi))

    def _site(self, text: str) -> PrimExpr:
        self.sites.append(text)
        return const(len(self.sites), "int64")

    def _fail(self, site) -> IfThenElse:
        """Record the failed check `site` unless one is recorded (the first one a program meets)."""
        first = te.binary("==", BufferLoad(self.status, (const(0),), "int64"), const(0))
        return IfThenElse(first, BufferStore(self.status, site, (const(0),)))

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
                bad = _not(inb) if m is None else te.binary("&&", m, _not(inb))
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

    # -- block pointers ------------------------------------------------------------------------------
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

    # -- hints, checks and debugging ----------------------------------------------------------------
    def b_multiple_of(self, input, values):
        return input

    def b_max_contiguous(self, input, values):
        return input

    def b_max_constancy(self, input, values):
        return input

    def b_debug_barrier(self):
        self.frontend.flush()
        self.em.barrier()

    def b_static_assert(self, cond, msg=""):
        if V.is_runtime(cond):
            raise TileTypeError("tl.static_assert needs a constexpr condition")
        if not cond:
            raise TileTypeError(f"static_assert failed: {msg}")

    def b_static_print(self, *values, sep=" ", end="\n", file=None, flush=False):
        print(*values, sep=sep, end=end, file=file, flush=flush)

    def b_device_assert(self, cond, msg="", mask=None):
        self.frontend.flush()
        if not V.is_runtime(cond):
            if not cond:
                raise TileTypeError(f"device_assert fails for every program: {msg}")
            return
        site = self._site(f"device_assert failed: {msg} at {self.frontend.where()}")
        shape = cond.shape

        def body(idx):
            c = V.convert(V.element(cond, idx), cond.dtype, tld.int1)
            if mask is not None and V.is_runtime(mask):
                c = te.binary("||", c, _not(V.convert(V.element(mask, idx), mask.dtype, tld.int1)))
            return IfThenElse(_not(c), self._fail(site))

        self.em.emit(self.em.nest(shape, body, vector=False))

    def b_device_print(self, prefix, *args, hex=False):
        self.frontend.flush()
        for a in args:
            if not V.is_runtime(a):
                continue
            shape = a.shape

            def body(idx, a=a):
                # one line per element: the prefix, the program id (3), the element's index, its value
                pid = [cast("int64", x) for x in self.program]
                where = [cast("int64", i) for i in idx]
                return Evaluate(Call(f"{te.PRINT} {prefix}", (*pid, *where, V.element(a, idx)), "int32"))

            self.em.emit(self.em.nest(shape, body, vector=False))


PRECISIONS = ("tf32", "tf32x3", "ieee")


def input_precision_of(input_precision, allow_tf32) -> str:
    """tl.dot's precision of float32 operands as Triton reads it: `input_precision`, else its old
    spelling `allow_tf32`, else "tf32" (Triton's default on NVIDIA GPUs)."""
    input_precision, allow_tf32 = unwrap(input_precision), unwrap(allow_tf32)
    if input_precision is None:
        return "ieee" if allow_tf32 is False else "tf32"
    if input_precision not in PRECISIONS:
        raise TileTypeError(f"tl.dot: input_precision {input_precision!r} is not one of {', '.join(PRECISIONS)}")
    return input_precision


def _not(c: PrimExpr) -> PrimExpr:
    return te.Not(c, c.dtype)


def _shape(shape) -> tuple[int, ...]:
    if isinstance(shape, int):
        return (shape,)
    return tuple(unwrap(s) for s in shape)


def _lowest(t: str) -> PrimExpr:
    if t.startswith("float"):
        return const(float("-inf"), t)
    if t == "bool":
        return const(False)
    import numpy as np

    return const(int(np.iinfo(t).min), t)


def _highest(t: str) -> PrimExpr:
    if t.startswith("float"):
        return const(float("inf"), t)
    if t == "bool":
        return const(True)
    import numpy as np

    return const(int(np.iinfo(t).max), t)


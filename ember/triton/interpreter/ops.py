"""What each builtin of the tile language does, over NumPy, for one program at a time.

`Semantics` has one method per builtin of ember.triton.language (the interpreter makes it the
active implementation while a kernel runs). Every value it returns is a Block (or a Pointer, a
BlockPointer, a tuple of them); the arguments may also be Python numbers and constexprs.
Loads, stores and atomics check every active element against the argument's reachable span
and name the argument, the program and the kernel's source line when one is outside it.
"""

from __future__ import annotations

import linecache
import math
import sys
from pathlib import Path

import numpy as np

from ...errors import TileError
from ..language import dtypes as tld
from .values import (
    Block,
    BlockPointer,
    Buffer,
    Pointer,
    as_block,
    binary,
    computation_type,
    is_low_float,
    np_dtype,
    unwrap,
)

PACKAGE = str(Path(__file__).resolve().parent.parent)  # ember/triton: frames there are not the kernel's
MAX_NUMEL = 1 << 20  # Triton's largest block
SPIN_LIMIT = 10_000  # failed atomic_cas in a row on one address that make a deadlock


def _const_int(value, what: str) -> int:
    value = unwrap(value)
    if isinstance(value, Block):
        raise TileError(f"{what} must be a constexpr (a tl.constexpr parameter or a literal), not a block")
    if not isinstance(value, int | np.integer) or isinstance(value, bool):
        raise TileError(f"{what} must be an int, got {value!r}")
    return int(value)


def _int(value, what: str) -> int:
    """An int of an int, a constexpr or a scalar integer block."""
    value = unwrap(value)
    return int(value) if isinstance(value, Block) else _const_int(value, what)


def _shape(shape, what: str) -> tuple[int, ...]:
    """A block shape: constexpr ints, each a power of 2 (Triton's rule)."""
    shape = unwrap(shape)
    dims = tuple(shape) if isinstance(shape, list | tuple) else (shape,)
    dims = tuple(_const_int(d, f"{what}: a dimension") for d in dims)
    for d in dims:
        if d <= 0 or d & (d - 1):
            raise TileError(f"{what}: block dimensions must be powers of 2, got {list(dims)}")
    if math.prod(dims) > MAX_NUMEL:
        raise TileError(f"{what}: a block holds at most {MAX_NUMEL} elements, {list(dims)} has {math.prod(dims)}")
    return dims


def _dims(args, what: str) -> tuple[int, ...]:
    """Varargs dims given as `f(x, 2, 3)` or `f(x, (2, 3))`."""
    if len(args) == 1 and isinstance(unwrap(args[0]), list | tuple):
        args = tuple(unwrap(args[0]))
    return tuple(_const_int(a, what) for a in args)


def _dtype(value, what: str) -> tld.dtype:
    value = unwrap(value)
    if not isinstance(value, tld.dtype):
        raise TileError(f"{what}: expected a dtype (tl.float32, ...), got {value!r}")
    return value


def _axis(axis, ndim: int, what: str) -> int | None:
    axis = unwrap(axis)
    if axis is None:
        return None
    axis = _const_int(axis, f"{what}: axis")
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise TileError(f"{what}: axis {axis} is out of range for a block of {ndim} dimensions")
    return axis % max(ndim, 1)


def _float_math(name: str, fn, allow_int: bool = False):
    def method(self, x):
        x = as_block(x, f"tl.{name}")
        if not x.dtype.is_floating():
            if allow_int:
                return Block(np.asarray(fn(x.value)), x.dtype)
            raise TileError(f"{self._where()}: tl.{name} needs a floating-point block, got {x.dtype.name}: "
                            f"convert it with .to(tl.float32)")
        work = x.cast(tld.float32) if is_low_float(x.dtype) else x
        return Block(np.asarray(fn(work.value)).astype(np_dtype(work.dtype)), work.dtype).cast(x.dtype)

    method.__name__ = name
    return method


_erf = np.vectorize(math.erf, otypes=["float64"])  # NumPy has no erf


def _along(values: np.ndarray, axis: int | None, keep_dims: bool, fn) -> np.ndarray:
    """fn(values, axis=, keepdims=) along `axis`, or over every element when it is None."""
    if axis is None:
        result = fn(values.reshape(-1), axis=0, keepdims=False)
        return np.reshape(result, [1] * values.ndim) if keep_dims else result
    return fn(values, axis=axis, keepdims=keep_dims)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


class Semantics:
    """The builtins, for the program `pid` of a launch over `grid` of kernel `name`."""

    def __init__(self, name: str, grid: tuple[int, int, int]):
        self.name = name
        self.grid = grid
        self.pid = (0, 0, 0)
        self.failed_cas = (None, 0)  # (the address a program's atomic_cas keeps failing on, how often)

    def start(self, pid: tuple[int, int, int]) -> None:
        """Run program `pid` next."""
        self.pid = pid
        self.failed_cas = (None, 0)

    def _where(self) -> str:
        """The kernel, the program and the source line being run (the innermost frame outside
        ember.triton)."""
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(PACKAGE):
            frame = frame.f_back
        where = f"kernel {self.name}, program {self.pid}"
        if frame is not None:
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            where += f", {frame.f_code.co_filename}:{frame.f_lineno} `{line}`"
        return where

    # --- programs and blocks --------------------------------------------------------------------------
    def program_id(self, axis):
        return Block(np.asarray(self.pid[self._grid_axis(axis)], "int32"), tld.int32)

    def num_programs(self, axis):
        return Block(np.asarray(self.grid[self._grid_axis(axis)], "int32"), tld.int32)

    def _grid_axis(self, axis) -> int:
        axis = _const_int(axis, "program axis")
        if axis not in (0, 1, 2):
            raise TileError(f"{self._where()}: the program axis is 0, 1 or 2, got {axis}")
        return axis

    def arange(self, start, end):
        start, end = _const_int(start, "tl.arange start"), _const_int(end, "tl.arange end")
        if end <= start or (end - start) & (end - start - 1):
            raise TileError(f"{self._where()}: tl.arange({start}, {end}): the range must be a power of 2")
        return Block(np.arange(start, end, dtype="int32"), tld.int32)

    def full(self, shape, value, dtype):
        dims, dtype = _shape(shape, "tl.full"), _dtype(dtype, "tl.full")
        value = as_block(value, "tl.full value").cast(dtype)
        if value.value.ndim:
            raise TileError(f"{self._where()}: tl.full needs a scalar value")
        return Block(np.full(dims, value.value, np_dtype(dtype)), dtype)

    def zeros(self, shape, dtype):
        return self.full(shape, 0, dtype)

    def zeros_like(self, input):
        input = as_block(input)
        return Block(np.zeros(input.value.shape, np_dtype(input.dtype)), input.dtype)

    def cast(self, input, dtype, fp_downcast_rounding=None, bitcast=False):
        dtype = _dtype(dtype, "cast")
        if isinstance(input, Pointer):
            return self._pointer_cast(input, dtype)
        input = as_block(input, "cast")
        if unwrap(bitcast):
            if dtype.primitive_bitwidth != input.dtype.primitive_bitwidth:
                raise TileError(f"{self._where()}: a bitcast keeps the bit width: {input.dtype.name} to {dtype.name}")
            return Block(np.asarray(input.value.view(np_dtype(dtype))), dtype)
        return input.cast(dtype)

    def _pointer_cast(self, pointer: Pointer, dtype: tld.dtype):
        if not dtype.is_pointer:
            raise TileError(f"{self._where()}: a pointer converts to a pointer type only, not {dtype.name}")
        element, buf = dtype.element_ty, pointer.buffer
        if np_dtype(element).itemsize != buf.flat.itemsize:
            raise TileError(f"{self._where()}: the interpreter converts pointers between types of one size "
                            f"only ({buf.dtype.name} to {element.name})")
        return Pointer(pointer.value, Buffer(buf.name, buf.flat.view(np_dtype(element)), buf.lo, element))

    # --- memory --------------------------------------------------------------------------------------
    def _access(self, pointer: Pointer, mask, op: str) -> tuple[np.ndarray, np.ndarray]:
        """(the flat indices, the active lanes) of an access through `pointer`, checked."""
        if not isinstance(pointer, Pointer):
            raise TileError(f"{self._where()}: tl.{op} needs a pointer (a tensor argument plus offsets), "
                            f"got {pointer!r}")
        offsets = pointer.value
        if mask is None:
            active = np.ones(offsets.shape, bool)
        else:
            mask = as_block(mask, f"tl.{op} mask")
            try:
                active = np.broadcast_to(mask.value.astype(bool), offsets.shape)
            except ValueError:
                raise TileError(f"{self._where()}: the mask of shape {list(mask.shape)} does not broadcast to the "
                                f"pointers' shape {list(offsets.shape)}") from None
        buf = pointer.buffer
        index = offsets - buf.lo
        bad = active & ((index < 0) | (index >= buf.flat.shape[0]))
        if bad.any():
            lane = np.unravel_index(int(np.flatnonzero(bad)[0]), offsets.shape) if offsets.ndim else ()
            raise TileError(f"{self._where()}: tl.{op} out of bounds of argument '{buf.name}': element offset "
                            f"{int(offsets[lane])} (at index {tuple(int(i) for i in lane)} of the block) is outside "
                            f"the argument's elements [{buf.lo}, {buf.hi}); mask the access (mask=...)")
        return np.where(active, index, 0), active

    def _writable(self, pointer: Pointer, op: str):
        if not pointer.buffer.flat.flags.writeable:
            raise TileError(f"{self._where()}: tl.{op} into argument '{pointer.buffer.name}', which is read-only")

    def load(self, pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier="",
             eviction_policy="", volatile=False):
        if isinstance(pointer, BlockPointer):
            if mask is not None or other is not None:
                raise TileError(f"{self._where()}: a block pointer's load takes boundary_check and padding_option, "
                                f"not mask and other")
            pointer, mask, other = self._block_access(pointer, boundary_check, unwrap(padding_option))
        index, active = self._access(pointer, mask, "load")
        buf = pointer.buffer
        value = buf.flat[index]
        if not active.all():
            fill = 0 if other is None else as_block(other, "tl.load other").cast(buf.dtype).value
            value = np.where(active, value, fill).astype(buf.flat.dtype)
        return Block(np.asarray(value), buf.dtype)

    def store(self, pointer, value, mask=None, boundary_check=(), cache_modifier="", eviction_policy=""):
        if isinstance(pointer, BlockPointer):
            if mask is not None:
                raise TileError(f"{self._where()}: a block pointer's store takes boundary_check, not mask")
            pointer, mask, _ = self._block_access(pointer, boundary_check, "")
        index, active = self._access(pointer, mask, "store")
        self._writable(pointer, "store")
        value = self._values(pointer, value, "store")
        pointer.buffer.flat[index[active]] = value[active]

    def _values(self, pointer: Pointer, value, op: str) -> np.ndarray:
        value = as_block(value, f"tl.{op} value").cast(pointer.buffer.dtype)
        try:
            return np.broadcast_to(value.value, pointer.value.shape)
        except ValueError:
            raise TileError(f"{self._where()}: tl.{op}: values of shape {list(value.shape)} do not broadcast to the "
                            f"pointers' shape {list(pointer.shape)}") from None

    def _block_access(self, bp: BlockPointer, boundary_check, padding: str):
        pointers, index = bp.pointers()
        checks = unwrap(boundary_check)
        checks = (checks,) if isinstance(checks, int) else tuple(unwrap(c) for c in checks or ())
        mask = None
        for d in checks:
            if not 0 <= d < len(bp.shape):
                raise TileError(f"{self._where()}: boundary_check names dimension {d} of a "
                                f"{len(bp.shape)}-dimensional block pointer")
            inside = (index[d] >= 0) & (index[d] < bp.shape[d])
            mask = inside if mask is None else mask & inside
        if padding not in ("", "zero", "nan"):
            raise TileError(f"{self._where()}: padding_option is 'zero' or 'nan', got {padding!r}")
        if padding == "nan" and not bp.dtype.element_ty.is_floating():
            raise TileError(f"{self._where()}: padding 'nan' needs a floating-point tensor")
        mask = None if mask is None else Block(np.broadcast_to(mask, bp.block_shape), tld.int1)
        return pointers, mask, (float("nan") if padding == "nan" else None)

    def make_block_ptr(self, base, shape, strides, offsets, block_shape, order):
        if not isinstance(base, Pointer) or base.value.ndim:
            raise TileError(f"{self._where()}: make_block_ptr needs a scalar pointer as its base")
        block_shape = _shape(block_shape, "make_block_ptr block_shape")
        shape, strides, offsets, order = (tuple(_int(v, f"make_block_ptr {what}") for v in unwrap(vs))
                                          for what, vs in (("shape", shape), ("strides", strides),
                                                           ("offsets", offsets), ("order", order)))
        if not len(shape) == len(strides) == len(offsets) == len(block_shape):
            raise TileError(f"{self._where()}: make_block_ptr: shape, strides, offsets and block_shape need the "
                            f"same length")
        return BlockPointer(base, shape, strides, offsets, block_shape, order)

    def advance(self, base, offsets):
        if not isinstance(base, BlockPointer):
            raise TileError(f"{self._where()}: tl.advance needs a block pointer (tl.make_block_ptr)")
        deltas = tuple(_int(o, "tl.advance offset") for o in unwrap(offsets))
        if len(deltas) != len(base.offsets):
            raise TileError(f"{self._where()}: tl.advance needs {len(base.offsets)} offsets, got {len(deltas)}")
        return base.advanced(deltas)

    def _atomic(self, op: str, pointer, val, mask, update, cmp=None):
        """Apply `update(old, new[, cmp])` element by element; the old values come back, as in Triton.
        Programs run one at a time, so every atomic is atomic."""
        index, active = self._access(pointer, mask, op)
        self._writable(pointer, op)
        lanes = np.flatnonzero(active)
        at = index.reshape(-1)[lanes]
        new = self._values(pointer, val, op).reshape(-1)[lanes]
        extra = () if cmp is None else (self._values(pointer, cmp, op).reshape(-1)[lanes],)
        flat = pointer.buffer.flat
        before = flat[at].copy()
        if np.unique(at).size == at.size:  # no two lanes on one element: all at once
            flat[at] = update(before, new, *extra)
        else:  # lane by lane, each seeing the writes of the ones before
            for k, i in enumerate(at):
                before[k] = flat[i]
                flat[i] = update(before[k], new[k], *(e[k] for e in extra))
        old = np.zeros(pointer.value.shape, flat.dtype)
        old.reshape(-1)[lanes] = before
        return Block(old, pointer.buffer.dtype)

    def atomic_add(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_add", pointer, val, mask, np.add)

    def atomic_max(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_max", pointer, val, mask, np.maximum)

    def atomic_min(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_min", pointer, val, mask, np.minimum)

    def atomic_and(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_and", pointer, val, mask, np.bitwise_and)

    def atomic_or(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_or", pointer, val, mask, np.bitwise_or)

    def atomic_xor(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_xor", pointer, val, mask, np.bitwise_xor)

    def atomic_xchg(self, pointer, val, mask=None, sem=None, scope=None):
        return self._atomic("atomic_xchg", pointer, val, mask, lambda old, new: new)

    def atomic_cas(self, pointer, cmp, val, sem=None, scope=None):
        old = self._atomic("atomic_cas", pointer, val, None, lambda old, new, c: np.where(old == c, new, old),
                           cmp=cmp)
        self._check_spin(pointer, old, cmp)
        return old

    def _check_spin(self, pointer: Pointer, old: Block, cmp) -> None:
        """A program spinning on a lock that no other program can release (programs run one at a
        time here, so one that waits waits forever) is an error, not a hang: SPIN_LIMIT failures
        in a row of one atomic_cas on one address."""
        if (old.value == as_block(cmp).cast(old.dtype).value).any():
            self.failed_cas = (None, 0)
            return
        address = (pointer.buffer.name, pointer.value.tobytes())
        count = self.failed_cas[1] + 1 if self.failed_cas[0] == address else 1
        self.failed_cas = (address, count)
        if count >= SPIN_LIMIT:
            raise TileError(f"{self._where()}: tl.atomic_cas on argument '{pointer.buffer.name}' failed {count} times "
                            f"in a row: in the interpreter programs run one at a time, so no other program can "
                            f"release what this one waits for (a lock taken and never released, or a program "
                            f"waiting for a later one)")

    # --- linear algebra and reductions ---------------------------------------------------------------
    def dot(self, input, other, acc=None, input_precision=None, allow_tf32=None, max_num_imprecise_acc=None,
            out_dtype=tld.float32):
        a, b = as_block(input, "tl.dot"), as_block(other, "tl.dot")
        if a.value.ndim not in (2, 3) or a.value.ndim != b.value.ndim:
            raise TileError(f"{self._where()}: tl.dot needs two 2-D (or two 3-D) blocks, got shapes "
                            f"{list(a.shape)} and {list(b.shape)}")
        if a.shape[-1] != b.shape[-2]:
            raise TileError(f"{self._where()}: tl.dot: the inner dimensions differ: {list(a.shape)} @ {list(b.shape)}")
        if a.dtype != b.dtype:
            raise TileError(f"{self._where()}: tl.dot needs both operands of one dtype, got {a.dtype.name} and "
                            f"{b.dtype.name}")
        if a.dtype.is_int():
            result_type = tld.int32
        elif a.dtype == tld.float64:
            result_type = tld.float64
        else:
            result_type = _dtype(out_dtype, "tl.dot out_dtype")
        if acc is not None:
            acc = as_block(acc, "tl.dot acc")
            result_type = acc.dtype
        work = "int64" if a.dtype.is_int() else ("float64" if a.dtype == tld.float64 else "float32")
        product = np.matmul(a.value.astype(work), b.value.astype(work))
        if acc is not None:
            product = product + acc.value.astype(work)
        return Block(np.asarray(product), tld.int64 if work == "int64" else tld.dtype(work)).cast(result_type)

    def _reduce(self, input, axis, keep_dims, what: str, fn, dtype: tld.dtype | None = None):
        """fn (a NumPy reduction) along `axis` (None: over every element); float16 and bfloat16 are
        reduced in float32."""
        x = as_block(input, what)
        ax = _axis(axis, x.value.ndim, what)
        work = x.cast(tld.float32) if is_low_float(x.dtype) else x
        result = _along(work.value, ax, bool(unwrap(keep_dims)), fn)
        return Block(np.asarray(result), work.dtype).cast(dtype or x.dtype)

    def sum(self, input, axis=None, keep_dims=False, dtype=None):
        x = as_block(input, "tl.sum")
        if dtype is not None:
            out = _dtype(dtype, "tl.sum dtype")
        elif x.dtype.is_bool() or (x.dtype.is_int() and x.dtype.primitive_bitwidth < 32):
            out = tld.uint32 if x.dtype.is_int_unsigned() else tld.int32
        else:
            out = x.dtype
        return self._reduce(x.cast(out), axis, keep_dims, "tl.sum", np.sum)

    def max(self, input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
        if unwrap(return_indices):
            return (self._reduce(input, axis, keep_dims, "tl.max", np.max),
                    self.argmax(input, axis, return_indices_tie_break_left, keep_dims))
        return self._reduce(input, axis, keep_dims, "tl.max", np.max)

    def min(self, input, axis=None, return_indices=False, return_indices_tie_break_left=True, keep_dims=False):
        if unwrap(return_indices):
            return (self._reduce(input, axis, keep_dims, "tl.min", np.min),
                    self.argmin(input, axis, return_indices_tie_break_left, keep_dims))
        return self._reduce(input, axis, keep_dims, "tl.min", np.min)

    def _arg(self, input, axis, tie_break_left, keep_dims, what, fn):
        """The index of the extreme along `axis` (the first one on a tie with tie_break_left, the
        last one otherwise), int32."""
        x = as_block(input, what)
        ax = _axis(axis, x.value.ndim, what)
        values = x.value.astype("float32") if is_low_float(x.dtype) else x.value
        if unwrap(tie_break_left):
            pick = fn
        else:
            def pick(v, axis, keepdims):
                return v.shape[axis] - 1 - fn(np.flip(v, axis), axis=axis, keepdims=keepdims)
        index = _along(values, ax, bool(unwrap(keep_dims)), pick)
        return Block(np.asarray(index, "int32"), tld.int32)

    def argmax(self, input, axis, tie_break_left=True, keep_dims=False):
        return self._arg(input, axis, tie_break_left, keep_dims, "tl.argmax", np.argmax)

    def argmin(self, input, axis, tie_break_left=True, keep_dims=False):
        return self._arg(input, axis, tie_break_left, keep_dims, "tl.argmin", np.argmin)

    def xor_sum(self, input, axis=None, keep_dims=False):
        x = as_block(input, "tl.xor_sum")
        if not x.dtype.is_int():
            raise TileError(f"{self._where()}: tl.xor_sum needs integers, got {x.dtype.name}")
        return self._reduce(x, axis, keep_dims, "tl.xor_sum", np.bitwise_xor.reduce)

    def _scan(self, input, axis, reverse, what, fn):
        x = as_block(input, what)
        ax = _axis(axis, x.value.ndim, what)
        values = x.value.astype("float32") if is_low_float(x.dtype) else x.value
        if unwrap(reverse):
            result = np.flip(fn(np.flip(values, ax), axis=ax), ax)
        else:
            result = fn(values, axis=ax)
        return Block(np.asarray(result).astype(values.dtype), tld.float32 if is_low_float(x.dtype)
                     else x.dtype).cast(x.dtype)

    def cumsum(self, input, axis=0, reverse=False):
        return self._scan(input, axis, reverse, "tl.cumsum", np.cumsum)

    def cumprod(self, input, axis=0, reverse=False):
        return self._scan(input, axis, reverse, "tl.cumprod", np.cumprod)

    def softmax(self, input, ieee_rounding=False):
        x = as_block(input, "tl.softmax")
        z = x - self.max(x, axis=x.value.ndim - 1, keep_dims=True)
        num = self.exp(z)
        return num / self.sum(num, axis=x.value.ndim - 1, keep_dims=True)

    # --- elementwise -------------------------------------------------------------------------------------
    def where(self, condition, x, y):
        cond = as_block(condition, "tl.where condition").cast(tld.int1)
        x_weak, y_weak = not isinstance(unwrap(x), Block), not isinstance(unwrap(y), Block)
        x, y = as_block(x, "tl.where"), as_block(y, "tl.where")
        if isinstance(x, Pointer) or isinstance(y, Pointer):
            if not (isinstance(x, Pointer) and isinstance(y, Pointer) and x.buffer is y.buffer):
                raise TileError(f"{self._where()}: tl.where between pointers needs two pointers into one argument")
            return x.moved(np.where(cond.value, x.value, y.value))
        dtype = computation_type(x.dtype, x_weak, y.dtype, y_weak)
        try:
            value = np.where(cond.value, x.cast(dtype).value, y.cast(dtype).value)
        except ValueError:
            raise TileError(f"{self._where()}: tl.where: shapes {list(cond.shape)}, {list(x.shape)} and "
                            f"{list(y.shape)} do not broadcast") from None
        return Block(np.asarray(value), dtype)

    def _extreme(self, x, y, propagate_nan, what, fn, fn_nan):
        x_weak, y_weak = not isinstance(unwrap(x), Block), not isinstance(unwrap(y), Block)
        x, y = as_block(x, what), as_block(y, what)
        dtype = computation_type(x.dtype, x_weak, y.dtype, y_weak)
        nan = "ALL" in str(unwrap(propagate_nan) or "").upper()
        return Block(np.asarray((fn_nan if nan else fn)(x.cast(dtype).value, y.cast(dtype).value)), dtype)

    def maximum(self, x, y, propagate_nan=None):
        return self._extreme(x, y, propagate_nan, "tl.maximum", np.fmax, np.maximum)

    def minimum(self, x, y, propagate_nan=None):
        return self._extreme(x, y, propagate_nan, "tl.minimum", np.fmin, np.minimum)

    def clamp(self, x, min, max, propagate_nan=None):
        return self.minimum(self.maximum(x, min, propagate_nan), max, propagate_nan)

    def fma(self, x, y, z):
        x_block = as_block(x, "tl.fma")
        dtype = (x_block * y + z).dtype
        if dtype in (tld.float32, tld.float16, tld.bfloat16):  # one rounding, as a fused multiply-add
            wide = [as_block(v, "tl.fma").cast(dtype).cast(tld.float64) for v in (x, y, z)]
            return (wide[0] * wide[1] + wide[2]).cast(dtype)
        return x_block * y + z

    def fdiv(self, x, y, ieee_rounding=False):
        return binary("truediv", x, y)

    def div_rn(self, x, y):
        return binary("truediv", x, y)

    def umulhi(self, x, y):
        x, y = as_block(x, "tl.umulhi"), as_block(y, "tl.umulhi")
        dtype = computation_type(x.dtype, False, y.dtype, False)
        if not dtype.is_int() or dtype.primitive_bitwidth != 32:
            raise TileError(f"{self._where()}: tl.umulhi needs 32-bit integers, got {dtype.name}")
        wide = "uint64" if dtype.is_int_unsigned() else "int64"
        product = x.cast(dtype).value.astype(wide) * y.cast(dtype).value.astype(wide)
        return Block(np.asarray((product >> 32).astype(np_dtype(dtype))), dtype)

    exp = _float_math("exp", np.exp)
    exp2 = _float_math("exp2", np.exp2)
    log = _float_math("log", np.log)
    log2 = _float_math("log2", np.log2)
    sqrt = _float_math("sqrt", np.sqrt)
    sqrt_rn = _float_math("sqrt_rn", np.sqrt)
    rsqrt = _float_math("rsqrt", lambda v: 1 / np.sqrt(v))
    abs = _float_math("abs", np.abs, allow_int=True)
    sigmoid = _float_math("sigmoid", _sigmoid)
    erf = _float_math("erf", _erf)
    tanh = _float_math("tanh", np.tanh)
    sin = _float_math("sin", np.sin)
    cos = _float_math("cos", np.cos)
    floor = _float_math("floor", np.floor)
    ceil = _float_math("ceil", np.ceil)

    # --- shapes ------------------------------------------------------------------------------------------
    def _reshaped(self, x: Block, value: np.ndarray) -> Block:
        return Block._like(x, value) if not isinstance(x, Pointer) else Pointer(value, x.buffer)

    def reshape(self, input, *shape, can_reorder=False):
        x = as_block(input, "tl.reshape")
        dims = _shape(_dims(shape, "tl.reshape shape") or (1,), "tl.reshape") if shape else ()
        if math.prod(dims) != x.value.size:
            raise TileError(f"{self._where()}: cannot reshape a block of shape {list(x.shape)} to {list(dims)}")
        return self._reshaped(x, x.value.reshape(dims))

    def view(self, input, *shape):
        return self.reshape(input, *shape)

    def broadcast_to(self, input, *shape):
        x = as_block(input, "tl.broadcast_to")
        dims = _shape(_dims(shape, "tl.broadcast_to shape"), "tl.broadcast_to")
        try:
            return self._reshaped(x, np.broadcast_to(x.value, dims))
        except ValueError:
            raise TileError(f"{self._where()}: cannot broadcast a block of shape {list(x.shape)} to "
                            f"{list(dims)}") from None

    def broadcast(self, input, other):
        x, y = as_block(input, "tl.broadcast"), as_block(other, "tl.broadcast")
        try:
            shape = np.broadcast_shapes(x.value.shape, y.value.shape)
        except ValueError:
            raise TileError(f"{self._where()}: shapes {list(x.shape)} and {list(y.shape)} do not broadcast") from None
        return (self._reshaped(x, np.broadcast_to(x.value, shape)), self._reshaped(y, np.broadcast_to(y.value, shape)))

    def expand_dims(self, input, axis):
        x = as_block(input, "tl.expand_dims")
        axes = unwrap(axis)
        axes = tuple(_const_int(a, "tl.expand_dims axis") for a in axes) if isinstance(axes, list | tuple) else (
            _const_int(axes, "tl.expand_dims axis"),)
        return self._reshaped(x, np.expand_dims(x.value, axes))

    def permute(self, input, *dims):
        x = as_block(input, "tl.permute")
        order = _dims(dims, "tl.permute dims")
        if sorted(order) != list(range(x.value.ndim)):
            raise TileError(f"{self._where()}: {list(order)} is not a permutation of a block's "
                            f"{x.value.ndim} dimensions")
        return self._reshaped(x, np.transpose(x.value, order))

    def trans(self, input, *dims):
        x = as_block(input, "tl.trans")
        if not dims:
            if x.value.ndim != 2:
                raise TileError(f"{self._where()}: tl.trans without dims transposes a 2-D block, got shape "
                                f"{list(x.shape)}")
            dims = (1, 0)
        return self.permute(x, *dims)

    def ravel(self, input, can_reorder=False):
        x = as_block(input, "tl.ravel")
        return self._reshaped(x, x.value.reshape(-1))

    def cat(self, input, other, can_reorder=False):
        x, y = as_block(input, "tl.cat"), as_block(other, "tl.cat")
        dtype = computation_type(x.dtype, False, y.dtype, False)
        return Block(np.concatenate([x.cast(dtype).value, y.cast(dtype).value]), dtype)

    # --- hints, checks and debugging -------------------------------------------------------------------
    def multiple_of(self, input, values):
        return input

    def max_contiguous(self, input, values):
        return input

    def max_constancy(self, input, values):
        return input

    def debug_barrier(self):
        return None

    def static_assert(self, cond, msg=""):
        if not bool(unwrap(cond)):
            raise TileError(f"{self._where()}: static_assert failed: {unwrap(msg)}")

    def static_print(self, *values, sep=" ", end="\n", file=None, flush=False):
        print(*(unwrap(v) for v in values), sep=sep, end=end, file=file, flush=flush)

    def device_assert(self, cond, msg="", mask=None):
        ok = as_block(cond, "tl.device_assert").value.astype(bool)
        if mask is not None:
            ok = ok | ~np.broadcast_to(as_block(mask).value.astype(bool), ok.shape)
        if not ok.all():
            lane = np.unravel_index(int(np.flatnonzero(~ok)[0]), ok.shape) if ok.ndim else ()
            raise TileError(f"{self._where()}: device_assert failed at index {tuple(int(i) for i in lane)}: "
                            f"{unwrap(msg)}")

    def device_print(self, prefix, *args, hex=False):
        def show(v):
            v = unwrap(v)
            if isinstance(v, Block):
                v = v.value
                if hex and v.dtype.kind in "iub":
                    return np.array2string(v, formatter={"int": lambda i: f"0x{int(i) & ((1 << 64) - 1):x}"})
            return str(v)

        print(f"pid ({self.pid[0]}, {self.pid[1]}, {self.pid[2]}) {unwrap(prefix)}"
              + " ".join(show(a) for a in args), flush=True)

    def cdiv(self, x, div):
        x, div = unwrap(x), unwrap(div)
        return (x + div - 1) // div


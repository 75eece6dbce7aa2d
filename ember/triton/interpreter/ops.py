"""What each builtin of the tile language does, over NumPy, for one program at a time.

`Semantics` has one method per builtin of ember.triton.language (the interpreter makes it the
active implementation while a kernel runs). Every value it returns is a Block (or a Pointer, a
BlockPointer, a tuple of them); the arguments may also be Python numbers and constexprs.
Loads, stores and atomics check every active element against the argument's reachable span
and name the argument, the program and the kernel's source line when one is outside it.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import TileError
from ..language import dtypes as tld
from ..language.dtypes import unwrap
from .constants import axis_of, const_int, dims_of, dtype_of, shape_of
from .memory import Memory
from .values import Block, Buffer, Pointer, as_block, binary, computation_type, is_low_float, np_dtype


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


class Semantics(Memory):
    """The builtins, for the program `pid` of a launch over `grid` of kernel `name` (memory: Memory)."""

    # --- programs and blocks --------------------------------------------------------------------------
    def program_id(self, axis):
        return Block(np.asarray(self.pid[self._grid_axis(axis)], "int32"), tld.int32)

    def num_programs(self, axis):
        return Block(np.asarray(self.grid[self._grid_axis(axis)], "int32"), tld.int32)

    def _grid_axis(self, axis) -> int:
        axis = const_int(axis, "program axis")
        if axis not in (0, 1, 2):
            raise TileError(f"{self._where()}: the program axis is 0, 1 or 2, got {axis}")
        return axis

    def arange(self, start, end):
        start, end = const_int(start, "tl.arange start"), const_int(end, "tl.arange end")
        if end <= start or (end - start) & (end - start - 1):
            raise TileError(f"{self._where()}: tl.arange({start}, {end}): the range must be a power of 2")
        return Block(np.arange(start, end, dtype="int32"), tld.int32)

    def full(self, shape, value, dtype):
        dims, dtype = shape_of(shape, "tl.full"), dtype_of(dtype, "tl.full")
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
        dtype = dtype_of(dtype, "cast")
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
            result_type = dtype_of(out_dtype, "tl.dot out_dtype")
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
        ax = axis_of(axis, x.value.ndim, what)
        work = x.cast(tld.float32) if is_low_float(x.dtype) else x
        result = _along(work.value, ax, bool(unwrap(keep_dims)), fn)
        return Block(np.asarray(result), work.dtype).cast(dtype or x.dtype)

    def sum(self, input, axis=None, keep_dims=False, dtype=None):
        x = as_block(input, "tl.sum")
        if dtype is not None:
            out = dtype_of(dtype, "tl.sum dtype")
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
        ax = axis_of(axis, x.value.ndim, what)
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
        ax = axis_of(axis, x.value.ndim, what)
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
        dims = shape_of(dims_of(shape, "tl.reshape shape") or (1,), "tl.reshape") if shape else ()
        if math.prod(dims) != x.value.size:
            raise TileError(f"{self._where()}: cannot reshape a block of shape {list(x.shape)} to {list(dims)}")
        return self._reshaped(x, x.value.reshape(dims))

    def view(self, input, *shape):
        return self.reshape(input, *shape)

    def broadcast_to(self, input, *shape):
        x = as_block(input, "tl.broadcast_to")
        dims = shape_of(dims_of(shape, "tl.broadcast_to shape"), "tl.broadcast_to")
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
        axes = tuple(const_int(a, "tl.expand_dims axis") for a in axes) if isinstance(axes, list | tuple) else (
            const_int(axes, "tl.expand_dims axis"),)
        return self._reshaped(x, np.expand_dims(x.value, axes))

    def permute(self, input, *dims):
        x = as_block(input, "tl.permute")
        order = dims_of(dims, "tl.permute dims")
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


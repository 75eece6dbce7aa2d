"""The values of an interpreted kernel: blocks (Triton's `tl.tensor`), pointers, block pointers.

A Block is an immutable NumPy array (0-d for a scalar) with its language dtype. Operators follow
Triton's typing, not NumPy's: both operands are first converted to one computation type
(`computation_type`: Triton's rules, with Python numbers typed weakly, so `x_fp16 * 2.0` stays
float16 and `offs_i32 + 1` stays int32), then NumPy computes in that type (integers wrap as in
C). `//` and `%` on integers truncate toward zero as C does (NumPy's floor), `%` on floats is C's
fmod, `/` gives floats, comparisons give int1.

A Pointer is a block of element offsets into one argument's memory (a `Buffer`): offset 0 is
the argument's first element; pointer arithmetic moves the offsets, loads and stores check them
against the argument's reachable span. A BlockPointer is `make_block_ptr`'s description of a
strided 2-D (or n-D) window.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, replace

import numpy as np

from ...errors import TileError
from ..language import core
from ..language import dtypes as tld
from ..language.dtypes import unwrap

_NUMPY: dict[str, np.dtype] = {}


def np_dtype(dtype: tld.dtype) -> np.dtype:
    """The NumPy dtype that holds values of `dtype` (pointers: int64 offsets)."""
    if dtype.is_pointer:
        return np.dtype("int64")
    found = _NUMPY.get(dtype.name)
    if found is None:
        if dtype.name == "bfloat16":
            import ml_dtypes

            found = np.dtype(ml_dtypes.bfloat16)
        else:
            found = np.dtype(dtype.numpy)
        _NUMPY[dtype.name] = found
    return found


def is_low_float(dtype: tld.dtype) -> bool:
    return dtype.name in ("float16", "bfloat16")


def _kind(dtype: tld.dtype) -> int:
    """Triton's order of kinds: bool < unsigned < signed < floating."""
    if dtype.is_bool():
        return 0
    if dtype.is_int_unsigned():
        return 1
    return 3 if dtype.is_floating() else 2


def _int_rank(dtype: tld.dtype) -> tuple[int, bool]:
    return dtype.primitive_bitwidth, dtype.is_int_unsigned()


def computation_type(a: tld.dtype, a_weak: bool, b: tld.dtype, b_weak: bool, div_or_mod: bool = False) -> tld.dtype:
    """The type both operands of a binary operator are converted to (Triton's
    computation_type_impl). A weak operand is a Python number: of a kind no higher than the
    other operand's, it takes the other's type."""
    if a_weak != b_weak:
        scalar, tensor = (a, b) if a_weak else (b, a)
        if _kind(scalar) <= _kind(tensor):
            return tld.float32 if div_or_mod and is_low_float(tensor) else tensor
    names = (a.name, b.name)
    if "float64" in names:
        return tld.float64
    if "float32" in names:
        return tld.float32
    if "float16" in names:
        return tld.float32 if div_or_mod else tld.float16
    if "bfloat16" in names:
        return tld.bfloat16 if names == ("bfloat16", "bfloat16") and not div_or_mod else tld.float32
    if div_or_mod and a.is_int_unsigned() != b.is_int_unsigned() and not (a.is_bool() or b.is_bool()):
        raise TileError(f"cannot use / // or % between {a.name} and {b.name} (one signed, one unsigned): "
                        f"cast one of them with .to()")
    (a_bits, a_unsigned), (b_bits, b_unsigned) = _int_rank(a), _int_rank(b)
    if a_unsigned == b_unsigned:
        return a if a_bits > b_bits else b
    if a_unsigned:
        return a if a_bits >= b_bits else b
    return b if b_bits >= a_bits else a


def python_dtype(value) -> tld.dtype:
    """The type of a Python number in the language (Triton's to_tensor)."""
    from ..args import scalar_dtype

    return scalar_dtype(value)


def as_block(value, what: str = "operand") -> Block:
    """A Block of a Block or a Python number."""
    value = unwrap(value)
    if isinstance(value, Block):
        return value
    if isinstance(value, bool | int | float | np.number | np.bool_):
        dtype = python_dtype(value)
        return Block(np.asarray(value, np_dtype(dtype)), dtype)
    raise TileError(f"{what}: expected a block or a number, got {type(value).__name__} {value!r}")


def _trunc_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """C's integer division (toward zero); 0 where y is 0."""
    safe = np.where(y == 0, 1, y).astype(x.dtype)
    q = np.floor_divide(x, safe)
    q = q + ((np.remainder(x, safe) != 0) & ((x < 0) != (safe < 0))).astype(x.dtype)
    return np.where(y == 0, 0, q).astype(x.dtype)


def _trunc_mod(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """C's integer remainder (the sign of x); 0 where y is 0."""
    safe = np.where(y == 0, 1, y).astype(x.dtype)
    return np.where(y == 0, 0, x - _trunc_div(x, safe) * safe).astype(x.dtype)


_ARITH = {"add": np.add, "sub": np.subtract, "mul": np.multiply}
_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
            "ne": np.not_equal}
_BITWISE = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "lshift": np.left_shift,
            "rshift": np.right_shift}


def _apply(fn, x, y, what):
    try:
        return np.asarray(fn(x, y))
    except ValueError as e:
        raise TileError(f"{what}: shapes {x.shape} and {y.shape} do not broadcast ({e})") from None


def binary(op: str, a, b) -> Block:
    """`a <op> b` with Triton's typing (a or b may be a Python number)."""
    a, b = unwrap(a), unwrap(b)
    if isinstance(a, Pointer) or isinstance(b, Pointer):
        return _pointer_binary(op, a, b)
    a_weak, b_weak = not isinstance(a, Block), not isinstance(b, Block)
    a, b = as_block(a, f"operand of {op}"), as_block(b, f"operand of {op}")
    if op == "truediv":
        dtype = computation_type(a.dtype, a_weak, b.dtype, b_weak, div_or_mod=True)
        if not dtype.is_floating():
            dtype = tld.float32
        x, y = a.cast(dtype).value, b.cast(dtype).value
        return Block(_apply(np.true_divide, x, y, "/"), dtype)
    div_or_mod = op in ("floordiv", "mod")
    dtype = computation_type(a.dtype, a_weak, b.dtype, b_weak, div_or_mod=div_or_mod)
    x, y = a.cast(dtype).value, b.cast(dtype).value
    if op in _ARITH:
        return Block(_apply(_ARITH[op], x, y, op), dtype)
    if op in _COMPARE:
        return Block(_apply(_COMPARE[op], x, y, op), tld.int1)
    if op == "floordiv":
        if dtype.is_floating():
            raise TileError(f"// needs integers, got {a.dtype.name} and {b.dtype.name}: use / (and tl.floor)")
        return Block(_apply(_trunc_div, x, y, "//"), dtype)
    if op == "mod":
        return Block(_apply(np.fmod if dtype.is_floating() else _trunc_mod, x, y, "%"), dtype)
    if op in _BITWISE:
        if dtype.is_floating():
            raise TileError(f"bitwise {op} needs integers or booleans, got {a.dtype.name} and {b.dtype.name}")
        if dtype.is_bool() and op in ("lshift", "rshift"):
            dtype = tld.int32
            x, y = x.astype("int32"), y.astype("int32")
        return Block(_apply(_BITWISE[op], x, y, op), dtype)
    raise TileError(f"operator {op} is not supported on blocks")


def _pointer_binary(op: str, a, b) -> Block:
    if op in ("add", "sub") and isinstance(a, Pointer) and not isinstance(b, Pointer):
        delta = as_block(b, f"pointer {op}")
        if not delta.dtype.is_int():
            raise TileError(f"pointer arithmetic needs integer offsets, got {delta.dtype.name}")
        d = delta.value.astype("int64")
        return a.moved(_apply(np.add if op == "add" else np.subtract, a.value, d, f"pointer {op}"))
    if op == "add" and isinstance(b, Pointer) and not isinstance(a, Pointer):
        return _pointer_binary("add", b, a)
    if op in _COMPARE and isinstance(a, Pointer) and isinstance(b, Pointer) and a.buffer is b.buffer:
        return Block(_apply(_COMPARE[op], a.value, b.value, op), tld.int1)
    if op == "sub" and isinstance(a, Pointer) and isinstance(b, Pointer) and a.buffer is b.buffer:
        return Block(_apply(np.subtract, a.value, b.value, op), tld.int64)
    raise TileError(f"operator {op} is not defined between {_describe(a)} and {_describe(b)}")


def _describe(v) -> str:
    if isinstance(v, Pointer):
        return f"a pointer into '{v.buffer.name}'"
    if isinstance(v, Block):
        return f"a {v.dtype.name} block"
    return type(v).__name__


def cast(value: np.ndarray, src: tld.dtype, dst: tld.dtype) -> np.ndarray:
    if src == dst:
        return value
    target = np_dtype(dst)
    if dst.is_bool():
        return np.asarray(value != 0)
    if src.is_floating() and dst.is_int():
        value = np.nan_to_num(value.astype("float64"), nan=0.0, posinf=0.0, neginf=0.0)
        info = np.iinfo(target)
        value = np.clip(np.trunc(value), info.min, info.max)  # C leaves these undefined; saturate
    return np.asarray(value.astype(target))


class Block:
    """A block of values (Triton's tl.tensor): a NumPy array and its language dtype."""

    __slots__ = ("value", "dtype")
    __hash__ = None

    def __init__(self, value: np.ndarray, dtype: tld.dtype):
        self.value = value
        self.dtype = dtype

    # --- what a kernel reads --------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape)

    @property
    def type(self):
        return self.dtype

    def numel(self) -> int:
        return int(self.value.size)

    @property
    def T(self) -> Block:
        return core.trans(self)

    def __repr__(self) -> str:
        return f"Block({self.dtype.name}, shape={list(self.shape)}, {self.value!r})"

    def __str__(self) -> str:
        return str(self.value)

    # --- conversions --------------------------------------------------------------------------------
    def cast(self, dtype: tld.dtype) -> Block:
        """This block's values converted to `dtype` (C's conversions)."""
        if dtype == self.dtype:
            return self
        return Block(cast(self.value, self.dtype, dtype), dtype)

    def to(self, dtype, fp_downcast_rounding=None, bitcast=False) -> Block:
        return core.cast(self, dtype, fp_downcast_rounding=fp_downcast_rounding, bitcast=bitcast)

    def _scalar(self, what: str):
        if self.value.ndim:
            raise TileError(f"a block of shape {list(self.shape)} has no single {what}: only a scalar does "
                            f"(reduce it, or use tl.where / a mask)")
        return self.value[()]

    def __bool__(self) -> bool:
        return bool(self._scalar("truth value"))

    def __index__(self) -> int:
        if not self.dtype.is_int():
            raise TileError(f"a {self.dtype.name} value is not an integer")
        return int(self._scalar("integer value"))

    __int__ = __index__

    def __float__(self) -> float:
        return float(self._scalar("float value"))

    def __iter__(self):
        raise TileError(f"a block of shape {list(self.shape)} cannot be iterated over in a kernel")

    def __len__(self) -> int:
        if not self.value.ndim:
            raise TileError("a scalar has no length")
        return int(self.value.shape[0])

    def __getitem__(self, key) -> Block:
        keys = key if isinstance(key, tuple) else (key,)
        for k in keys:
            if k is not None and k != slice(None):
                raise TileError(f"a block is indexed only with None and ':' (as in x[:, None]), got {key!r}")
        if builtins.sum(k is not None for k in keys) > self.value.ndim:
            raise TileError(f"too many ':' in {key!r} for a block of shape {list(self.shape)}")
        return type(self)._like(self, self.value[key])

    @staticmethod
    def _like(block: Block, value: np.ndarray) -> Block:
        return Block(value, block.dtype)

    # --- operators ----------------------------------------------------------------------------------
    def __add__(self, other): return binary("add", self, other)
    def __radd__(self, other): return binary("add", other, self)
    def __sub__(self, other): return binary("sub", self, other)
    def __rsub__(self, other): return binary("sub", other, self)
    def __mul__(self, other): return binary("mul", self, other)
    def __rmul__(self, other): return binary("mul", other, self)
    def __truediv__(self, other): return binary("truediv", self, other)
    def __rtruediv__(self, other): return binary("truediv", other, self)
    def __floordiv__(self, other): return binary("floordiv", self, other)
    def __rfloordiv__(self, other): return binary("floordiv", other, self)
    def __mod__(self, other): return binary("mod", self, other)
    def __rmod__(self, other): return binary("mod", other, self)
    def __and__(self, other): return binary("and", self, other)
    def __rand__(self, other): return binary("and", other, self)
    def __or__(self, other): return binary("or", self, other)
    def __ror__(self, other): return binary("or", other, self)
    def __xor__(self, other): return binary("xor", self, other)
    def __rxor__(self, other): return binary("xor", other, self)
    def __lshift__(self, other): return binary("lshift", self, other)
    def __rlshift__(self, other): return binary("lshift", other, self)
    def __rshift__(self, other): return binary("rshift", self, other)
    def __rrshift__(self, other): return binary("rshift", other, self)
    def __lt__(self, other): return binary("lt", self, other)
    def __le__(self, other): return binary("le", self, other)
    def __gt__(self, other): return binary("gt", self, other)
    def __ge__(self, other): return binary("ge", self, other)
    def __eq__(self, other): return binary("eq", self, other)
    def __ne__(self, other): return binary("ne", self, other)

    def __neg__(self):
        if self.dtype.is_bool():
            return Block(np.asarray(-self.value.astype("int32")), tld.int32)
        return Block(np.asarray(np.negative(self.value)), self.dtype)

    def __pos__(self):
        return self

    def __invert__(self):
        if self.dtype.is_floating():
            raise TileError(f"~ needs integers or booleans, got {self.dtype.name}")
        return Block(np.asarray(np.invert(self.value)), self.dtype)

    def __abs__(self):
        return core.abs(self)


def _member(name: str):
    fn = core.BUILTINS[name]

    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    method.__name__ = name
    return method


# methods of a block that are the builtins of the same name (x.sum(axis=0), x.reshape(4, 8), x.exp())
for _name in core.MEMBERS:
    setattr(Block, _name, _member(_name))


@dataclass(frozen=True, eq=False)
class Buffer:
    """The memory of one tensor argument: its reachable span as a flat array; `lo` is the offset
    of the span's first element from the argument's first element."""

    name: str
    flat: np.ndarray
    lo: int
    dtype: tld.dtype

    @property
    def hi(self) -> int:
        return self.lo + self.flat.shape[0]


class Pointer(Block):
    """A block of pointers: element offsets into one argument's buffer."""

    __slots__ = ("buffer",)

    def __init__(self, offsets: np.ndarray, buffer: Buffer):
        super().__init__(offsets, tld.pointer_type(buffer.dtype))
        self.buffer = buffer

    @staticmethod
    def _like(block: Pointer, value: np.ndarray) -> Pointer:
        return Pointer(value, block.buffer)

    def moved(self, offsets: np.ndarray) -> Pointer:
        return Pointer(np.asarray(offsets, "int64"), self.buffer)

    def __repr__(self) -> str:
        return f"Pointer('{self.buffer.name}', {self.dtype!r}, offsets={self.value!r})"


@dataclass(frozen=True)
class BlockPointer:
    """`tl.make_block_ptr`: a window of `block_shape` at `offsets` into a tensor of `shape` and
    `strides` (in elements) whose first element is at `base` (a scalar Pointer)."""

    base: Pointer
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offsets: tuple[int, ...]
    block_shape: tuple[int, ...]
    order: tuple[int, ...]

    @property
    def dtype(self) -> tld.dtype:
        return self.base.dtype

    def advanced(self, deltas: tuple[int, ...]) -> BlockPointer:
        return replace(self, offsets=tuple(o + d for o, d in zip(self.offsets, deltas)))

    def pointers(self) -> tuple[Pointer, np.ndarray]:
        """Every element's pointer, and each dimension's index block (broadcastable)."""
        ndim = len(self.block_shape)
        index, offsets = [], np.asarray(self.base.value, "int64")
        for d, (start, size, stride) in enumerate(zip(self.offsets, self.block_shape, self.strides)):
            shape = [1] * ndim
            shape[d] = size
            i = (start + np.arange(size, dtype="int64")).reshape(shape)
            index.append(i)
            offsets = offsets + i * stride
        return self.base.moved(np.broadcast_to(offsets, self.block_shape)), index

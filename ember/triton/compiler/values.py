"""The values a kernel computes with while it is compiled.

A Python value (an int, a float, a dtype, a string) is a compile-time constant (constexpr) and
stays a Python value. A run-time scalar is a `Scalar`: a loop-IR expression and its language
dtype. A block (`tl.arange(0, 64)[:, None] * stride`) is a `Block`: its shape (constexpr), its
dtype, and `at`, a function from one loop-IR index per dimension to the expression of that
element; so an elementwise chain is one expression inside its consumer's loops (fused), and a
value kept in memory (a load, a reduction, a loop-carried value) is a Block whose `at` reads a
local buffer. Pointers carry `base`, the kernel argument they point into, and compute element
offsets from its first element. A block pointer (`tl.make_block_ptr`) is a `BlockPtr`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...tir import dtype as tdt
from ...tir.expr import Buffer, PrimExpr, binary, cast, const
from ..language import dtypes as tld


class TileTypeError(Exception):
    """A value of the wrong kind in the kernel (reported with its source line by the frontend)."""


# The loop-IR type each language type is stored and computed in.
TIR_OF = {"int1": "bool", "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
          "uint8": "uint8", "float16": "float16", "float32": "float32", "float64": "float64"}
if "bfloat16" in tdt.SCALAR_DTYPES:
    TIR_OF["bfloat16"] = "bfloat16"
for _name in ("uint16", "uint32", "uint64"):
    if _name in tdt.SCALAR_DTYPES:
        TIR_OF[_name] = _name


def tir_dtype(d: tld.dtype) -> str:
    if d.is_pointer:
        return "int64"
    try:
        return TIR_OF[d.name]
    except KeyError:
        raise TileTypeError(f"{d.name} is not supported by the compiler yet (supported: "
                            f"{', '.join(TIR_OF)})") from None


@dataclass(frozen=True, eq=False)
class Param:
    """A tensor argument: the buffer of the C function, where its first element is."""

    name: str
    buffer: Buffer
    dtype: tld.dtype  # the element type
    index: int  # position among the tensor arguments (debug spans)


@dataclass(frozen=True, eq=False)
class Scalar:
    expr: PrimExpr
    dtype: tld.dtype
    base: Param | None = None  # pointers: the argument; expr is the element offset

    @property
    def shape(self) -> tuple[int, ...]:
        return ()


@dataclass(frozen=True, eq=False)
class Block:
    shape: tuple[int, ...]
    dtype: tld.dtype
    at: Callable[[tuple[PrimExpr, ...]], PrimExpr]
    base: Param | None = None
    buffer: Buffer | None = None  # set when the block is kept in this local buffer, row-major
    cost: int = 1  # expression nodes: decides when a named value is worth keeping in memory
    deps: frozenset = frozenset()  # the deferred loads (emitter.Deferred) it reads


@dataclass(frozen=True, eq=False)
class BlockPtr:
    base: Param
    offset: PrimExpr  # of the base pointer (int64)
    shape: tuple[PrimExpr, ...]
    strides: tuple[PrimExpr, ...]
    offsets: tuple[PrimExpr, ...]
    block_shape: tuple[int, ...]
    order: tuple[int, ...]

    @property
    def dtype(self):
        return tld.pointer_type(self.base.dtype)


Value = Scalar | Block | BlockPtr


def is_runtime(v) -> bool:
    return isinstance(v, Scalar | Block | BlockPtr)


def python_dtype(v) -> tld.dtype:
    """The language type of a Python constant, as Triton types it."""
    if isinstance(v, bool):
        return tld.int1
    if isinstance(v, int):
        return tld.int32 if -2**31 <= v < 2**31 else tld.int64
    if isinstance(v, float):
        return tld.float32
    raise TileTypeError(f"{v!r} ({type(v).__name__}) is not a number")


def as_scalar(v) -> Scalar:
    if isinstance(v, Scalar):
        return v
    d = python_dtype(v)
    return Scalar(const(v, tir_dtype(d)), d)


_FLOAT_RANK = {"float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}
_INT_BITS = {"int1": 1, "int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32,
             "int64": 64, "uint64": 64}


def promote(a: tld.dtype, b: tld.dtype) -> tld.dtype:
    """Triton's result type of a binary operation on two typed values."""
    if a == b:
        return a
    if a.is_floating() or b.is_floating():
        if not a.is_floating():
            return b
        if not b.is_floating():
            return a
        if {a.name, b.name} == {"float16", "bfloat16"}:
            return tld.float32
        return a if _FLOAT_RANK[a.name] >= _FLOAT_RANK[b.name] else b
    ba, bb = _INT_BITS[a.name], _INT_BITS[b.name]
    if ba != bb:
        return a if ba > bb else b
    return a if a.is_int_unsigned() else b


def literal_dtype(literal, other: tld.dtype) -> tld.dtype:
    """The type a Python number takes next to a typed value (Triton: it adopts the other's type
    when it fits in kind, a float next to integers is float32)."""
    if isinstance(literal, bool):
        return other if other.is_bool() else other
    if isinstance(literal, int):
        if other.is_bool():
            return tld.int32
        if other.is_int() and not -2**31 <= literal < 2**31 and _INT_BITS[other.name] < 64:
            return tld.int64
        return other
    if isinstance(literal, float):
        return other if other.is_floating() else tld.float32
    raise TileTypeError(f"{literal!r} is not a number")


def convert(e: PrimExpr, src: tld.dtype, dst: tld.dtype) -> PrimExpr:
    """e (of type src) as a value of type dst."""
    if src == dst:
        return e
    if dst.is_bool():
        zero = const(0, tir_dtype(src)) if not src.is_floating() else const(0.0, tir_dtype(src))
        return binary("!=", e, zero)
    return cast(tir_dtype(dst), e)


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(rank):
        sizes = {s[len(s) - rank + d] for s in shapes if len(s) - rank + d >= 0} - {1}
        if len(sizes) > 1:
            raise TileTypeError(f"shapes {' and '.join(str(list(s)) for s in shapes)} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def deps_of(*vals) -> frozenset:
    out = frozenset()
    for v in vals:
        if isinstance(v, Block):
            out |= v.deps
    return out


def element(v: Scalar | Block, idx: tuple[PrimExpr, ...]) -> PrimExpr:
    """The element of v at index idx of a (broadcast) shape of rank len(idx)."""
    if isinstance(v, Scalar):
        return v.expr
    own = idx[len(idx) - len(v.shape):]
    return v.at(tuple(const(0) if n == 1 else i for n, i in zip(v.shape, own)))


def flat_index(shape: tuple[int, ...], idx: tuple[PrimExpr, ...]) -> PrimExpr:
    off = None
    for n, i in zip(shape, idx):
        off = i if off is None else off * n + i
    return const(0) if off is None else off

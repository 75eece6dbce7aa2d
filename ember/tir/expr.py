"""Expressions of the loop IR: immutable nodes with Python operators that build new nodes.

Every node is a frozen dataclass compared by identity (`==` between expressions builds an
equality node, as in TVM; its truth value is identity, so nodes still work as dict keys).
Structural comparison is `structural_equal` / `structural_key` in `tir.structural`.

Literals adopt the dtype of the other operand: `A[i] / 3` divides a float32 by 3.0f.
Integer `//` and `%` have floor semantics and NumPy's results where C would trap: x // 0 == 0,
x % 0 == 0, MIN // -1 == MIN (it wraps); integer `/` is an error (use `//` or te.truncdiv).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from . import dtype as dt

_ids = itertools.count()


class PrimExpr:
    """Base of all scalar (or vector) expressions. Subclasses carry a `dtype` field. str()
    prints one (the printer, printer.py, attaches that)."""

    dtype: str
    __slots__ = ()

    # -- arithmetic ------------------------------------------------------------------
    def __add__(self, o):
        return binary("+", self, o)

    def __radd__(self, o):
        return binary("+", o, self)

    def __sub__(self, o):
        return binary("-", self, o)

    def __rsub__(self, o):
        return binary("-", o, self)

    def __mul__(self, o):
        return binary("*", self, o)

    def __rmul__(self, o):
        return binary("*", o, self)

    def __truediv__(self, o):
        return binary("/", self, o)

    def __rtruediv__(self, o):
        return binary("/", o, self)

    def __floordiv__(self, o):
        return binary("//", self, o)

    def __rfloordiv__(self, o):
        return binary("//", o, self)

    def __mod__(self, o):
        return binary("%", self, o)

    def __rmod__(self, o):
        return binary("%", o, self)

    def __neg__(self):
        return binary("-", const(0, self.dtype), self)

    # -- comparisons -----------------------------------------------------------------
    def __lt__(self, o):
        return binary("<", self, o)

    def __le__(self, o):
        return binary("<=", self, o)

    def __gt__(self, o):
        return binary(">", self, o)

    def __ge__(self, o):
        return binary(">=", self, o)

    def __eq__(self, o):  # type: ignore[override]
        return EqualOp(self, o)

    def __ne__(self, o):  # type: ignore[override]
        return NotEqualOp(self, o)

    def __hash__(self):
        return id(self)

    # -- logic -----------------------------------------------------------------------
    def __and__(self, o):
        return binary("&&", self, o)

    def __or__(self, o):
        return binary("||", self, o)

    def __invert__(self):
        return Not(self, self.dtype)

    def __bool__(self):
        raise TypeError(
            "a symbolic expression has no truth value; use te.if_then_else / te.all instead of "
            "`if` or `and` on expressions"
        )

    def astype(self, dtype: str) -> PrimExpr:
        return cast(dtype, self)



class EqualOp:
    """`a == b` on expressions: usable as an expression (via `as_expr`) or as a bool (identity)."""

    op = "=="

    def __init__(self, a, b):
        self.a, self.b = a, b

    def __bool__(self):
        return self.a is self.b

    def as_expr(self) -> PrimExpr:
        return binary(self.op, self.a, self.b)


class NotEqualOp(EqualOp):
    op = "!="

    def __bool__(self):
        return self.a is not self.b


@dataclass(frozen=True, eq=False, repr=False)
class Var(PrimExpr):
    """A scalar variable: a loop variable, a block iteration variable, or a symbolic size."""

    name: str
    dtype: str = dt.INDEX_DTYPE
    uid: int = field(default_factory=lambda: next(_ids), compare=False)


@dataclass(frozen=True, eq=False, repr=False)
class Const(PrimExpr):
    value: int | float | bool
    dtype: str = dt.INDEX_DTYPE


ARITH_OPS = ("+", "-", "*", "/", "//", "%", "min", "max")
COMPARE_OPS = ("==", "!=", "<", "<=", ">", ">=")
LOGIC_OPS = ("&&", "||")
BITWISE_OPS = ("&", "|", "^")  # on integers (two's complement), not on booleans: those are LOGIC_OPS


@dataclass(frozen=True, eq=False, repr=False)
class Binary(PrimExpr):
    """a OP b, for OP in ARITH_OPS, COMPARE_OPS, LOGIC_OPS and BITWISE_OPS. `//`, `%` are floor
    div/mod (on integers, by zero: 0)."""

    op: str
    a: PrimExpr
    b: PrimExpr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Not(PrimExpr):
    a: PrimExpr
    dtype: str = "bool"


@dataclass(frozen=True, eq=False, repr=False)
class Select(PrimExpr):
    """cond ? t : f, both sides evaluated (no side effects in the loop IR)."""

    cond: PrimExpr
    t: PrimExpr
    f: PrimExpr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Cast(PrimExpr):
    dtype: str
    value: PrimExpr


MATH_FUNCS = (
    "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "pow", "fabs", "floor", "ceil", "round",
    "sin", "cos", "exp2", "log2", "log1p", "expm1", "abs", "trunc", "fmod",
    "asin", "acos", "atan", "asinh", "acosh", "atanh",
)


# Intrinsics with side effects (a tile kernel's; built as Call nodes directly, scalar only): an
# atomic read-modify-write of the element its first argument loads (the other arguments are the
# operands; its value is the element's old value), and "print <text>", which prints the text
# and its arguments on one line.
# The bits of a value as another dtype of as many bits in memory (a float's bits as an integer,
# ONNX's BitCast): a Call named REINTERPRET, built by `reinterpret`; elementwise, no side effects.
REINTERPRET = "reinterpret"

ATOMIC_FUNCS = ("atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor",
                "atomic_xchg", "atomic_cas")
PRINT = "print"
# An index read at run time, checked against the size of the axis it indexes: index(i, n) is
# i + n for -n <= i < 0 and i for 0 <= i < n; any other i gives 0 (an address inside the axis)
# and records i and n in the kernel's status (ember.codegen.entry), so that the call raises
# IndexOutOfRangeError instead of reading or writing outside the tensor. Scalar only.
INDEX = "index"
# A hint that the element its argument loads is read soon: fetched into the caches, no value
# (a statement, Evaluate; the C code's __builtin_prefetch, nothing in the interpreter).
PREFETCH = "prefetch"


@dataclass(frozen=True, eq=False, repr=False)
class Call(PrimExpr):
    """A pure math intrinsic from MATH_FUNCS, applied elementwise (or an ATOMIC_FUNCS, PRINT or
    PREFETCH intrinsic, see above)."""

    name: str
    args: tuple[PrimExpr, ...]
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class BufferLoad(PrimExpr):
    buffer: Buffer
    indices: tuple[PrimExpr, ...]
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Ramp(PrimExpr):
    """The vector (base, base + stride, ..., base + (lanes-1)*stride): vectorized indices."""

    base: PrimExpr
    stride: PrimExpr
    lanes: int
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Broadcast(PrimExpr):
    value: PrimExpr
    lanes: int
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Buffer:
    """A multi-dimensional array in memory. Shapes may hold symbolic `Var`s.

    scope: "global" (a function argument or heap workspace) or "local" (a small array on the
    stack of the kernel, the cache_write target).
    """

    name: str
    shape: tuple[PrimExpr, ...]
    dtype: str = "float32"
    scope: str = "global"
    uid: int = field(default_factory=lambda: next(_ids), compare=False)

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def load(self, indices) -> BufferLoad:
        """A load; a vector index (a Ramp) loads a vector of as many lanes."""
        idx = tuple(convert(i) for i in indices)
        lanes = max((dt.lanes_of(i.dtype) for i in idx), default=1)
        return BufferLoad(self, idx, dt.with_lanes(self.dtype, lanes))

    def __getitem__(self, indices):
        if not isinstance(indices, tuple):
            indices = (indices,)
        return self.load(indices)

    def __str__(self):
        return self.name

    __repr__ = __str__


# ---------------------------------------------------------------------------------------------
# Construction helpers


def const(value, dtype: str | None = None) -> Const:
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = dt.INDEX_DTYPE
        else:
            dtype = "float32"
    dt.check(dtype)
    elem = dt.element_of(dtype)
    if elem == "bool":
        value = bool(value)
    elif dt.is_int(elem):
        value = _wrap(int(value), elem)
    else:
        value = float(value)
    return Const(value, dtype)


def _wrap(value: int, dtype: str) -> int:
    """An integer in the range of `dtype`, wrapped around like a C (and NumPy) conversion."""
    b = dt.value_bits(dtype)
    value &= (1 << b) - 1
    if not dtype.startswith("u") and value >= 1 << (b - 1):
        value -= 1 << b
    return value


def convert(value, dtype: str | None = None) -> PrimExpr:
    """Turn a Python number (or an expression) into an expression."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, EqualOp):
        return value.as_expr()
    if hasattr(value, "as_prim_expr"):  # te.Tensor of rank 0, IterVar
        return value.as_prim_expr()
    if isinstance(value, bool | int | float):
        return const(value, dtype)
    import numpy as np

    if isinstance(value, np.generic):
        return const(value.item(), dt.from_numpy(value.dtype))
    raise TypeError(f"cannot use {value!r} ({type(value).__name__}) as an expression")


def _literal_dtype(value, other: PrimExpr) -> str:
    if isinstance(value, float) and not dt.is_float(other.dtype):
        return "float32"
    if isinstance(value, bool) and not dt.is_bool(other.dtype):
        return "bool"
    return dt.element_of(other.dtype)


def unify(a, b) -> tuple[PrimExpr, PrimExpr]:
    """a and b as expressions of one dtype and lane count: a Python number takes the other's
    dtype, a narrower type is promoted, a scalar is broadcast."""
    if not isinstance(a, PrimExpr) and isinstance(b, PrimExpr | EqualOp):
        b = convert(b)
        a = convert(a, _literal_dtype(a, b))
    elif not isinstance(b, PrimExpr) and isinstance(a, PrimExpr | EqualOp):
        a = convert(a)
        b = convert(b, _literal_dtype(b, a))
    else:
        a, b = convert(a), convert(b)
    if dt.element_of(a.dtype) != dt.element_of(b.dtype):
        target = dt.element_of(dt.promote(a.dtype, b.dtype))
        if dt.element_of(a.dtype) != target:
            a = cast(dt.with_lanes(target, dt.lanes_of(a.dtype)), a)
        if dt.element_of(b.dtype) != target:
            b = cast(dt.with_lanes(target, dt.lanes_of(b.dtype)), b)
    la, lb = dt.lanes_of(a.dtype), dt.lanes_of(b.dtype)
    if la != lb:
        if la == 1:
            a = Broadcast(a, lb, dt.with_lanes(a.dtype, lb))
        elif lb == 1:
            b = Broadcast(b, la, dt.with_lanes(b.dtype, la))
        else:
            raise dt.DTypeError(f"vector lanes differ: {a.dtype} vs {b.dtype}")
    return a, b


def binary(op: str, a, b) -> PrimExpr:
    a, b = unify(a, b)
    if op == "/" and dt.is_int(a.dtype):
        raise dt.DTypeError(
            "`/` on integers is ambiguous; use `//` (floor division) or te.truncdiv"
        )
    if op in BITWISE_OPS and (not dt.is_int(a.dtype) or dt.is_bool(a.dtype)):
        raise dt.DTypeError(f"`{op}` needs integer operands, got {a.dtype} (booleans: `&&`, `||`)")
    if op in COMPARE_OPS or op in LOGIC_OPS:
        out = dt.with_lanes("bool", dt.lanes_of(a.dtype))
        if op in LOGIC_OPS and not dt.is_bool(a.dtype):
            raise dt.DTypeError(f"`{op}` needs boolean operands, got {a.dtype}")
    else:
        out = a.dtype
    return Binary(op, a, b, out)


def cast(dtype: str, value) -> PrimExpr:
    value = convert(value)
    dt.check(dtype)
    if dt.lanes_of(dtype) == 1 and dt.lanes_of(value.dtype) > 1:
        dtype = dt.with_lanes(dtype, dt.lanes_of(value.dtype))
    if value.dtype == dtype:
        return value
    if isinstance(value, Const) and dt.lanes_of(dtype) == 1:
        return const(value.value, dtype)
    return Cast(dtype, value)


def select(cond, t, f) -> PrimExpr:
    cond = convert(cond)
    t, f = unify(t, f)
    return Select(cond, t, f, t.dtype)


def call(name: str, *args) -> PrimExpr:
    if name not in MATH_FUNCS:
        raise ValueError(f"unknown intrinsic {name!r}")
    cargs = [convert(a) for a in args]
    if len(cargs) == 2:
        cargs = list(unify(cargs[0], cargs[1]))
    out = cargs[0].dtype
    integer_pow = name == "pow" and dt.is_int(out)  # exact, wrapping (torch's; float32 is exact to 2^24)
    if name != "abs" and not integer_pow and not dt.is_float(out):
        cargs = [cast(dt.with_lanes("float32", dt.lanes_of(a.dtype)), a) for a in cargs]
        out = cargs[0].dtype
    return Call(name, tuple(cargs), out)


def checked_index(i, n) -> PrimExpr:
    """The INDEX intrinsic: index i of an axis of n elements, negative counting from the end,
    checked at run time (see INDEX)."""
    return Call(INDEX, (cast("int64", i), cast("int64", n)), "int64")


def reinterpret(dtype: str, value) -> PrimExpr:
    """value's bits (as its dtype holds them in memory) read as `dtype`, of as many bits."""
    value = convert(value)
    dt.check(dtype)
    if dt.bits(dtype) != dt.bits(value.dtype):
        raise dt.DTypeError(f"reinterpret: {value.dtype} has {dt.bits(value.dtype)} bits, {dtype} {dt.bits(dtype)}")
    dtype = dt.with_lanes(dtype, dt.lanes_of(value.dtype))
    return value if dtype == value.dtype else Call(REINTERPRET, (value,), dtype)


def min_(a, b) -> PrimExpr:
    return binary("min", a, b)


def max_(a, b) -> PrimExpr:
    return binary("max", a, b)


def all_(*conds) -> PrimExpr:
    out = convert(True)
    for c in conds:
        out = binary("&&", out, c)
    return out


def is_const(e, value=None) -> bool:
    return isinstance(e, Const) and (value is None or e.value == value)


def as_int(e) -> int | None:
    """The integer value of a constant expression, or None."""
    if isinstance(e, int):
        return e
    if isinstance(e, Const) and dt.is_int(e.dtype):
        return int(e.value)
    return None

"""The tile language's operations on compile-time values: arithmetic with Triton's typing and
broadcasting, and casts. The builtins (builtins.py) and the frontend's operators use them."""

from __future__ import annotations

from ...tir import expr as te
from ...tir.expr import PrimExpr, const
from ..language import dtypes as tld
from . import values as V
from .values import Block, Scalar, TileTypeError

ARITH = {"+": "+", "-": "-", "*": "*"}
COMPARE = ("<", "<=", ">", ">=", "==", "!=")


def typed(a, b) -> tuple[Scalar | Block, Scalar | Block, tld.dtype]:
    """a and b as typed values of one type (Python numbers adopt the other's; two Python
    numbers take their own types, as Triton makes them tensors)."""
    if not V.is_runtime(a) and not V.is_runtime(b):
        a = V.as_scalar(a)
    if not V.is_runtime(a):
        a = _literal(a, b.dtype)
    if not V.is_runtime(b):
        b = _literal(b, a.dtype)
    return a, b, V.promote(a.dtype, b.dtype)


def _literal(x, other: tld.dtype) -> Scalar:
    if other.is_pointer:
        d = V.python_dtype(x)
    else:
        d = V.literal_dtype(x, other)
    t = V.tir_dtype(d)
    return Scalar(const(float(x) if d.is_floating() else x, t), d)


def lift(op, *vals, dtype: tld.dtype, cost: int = 1, base=None) -> Scalar | Block:
    """op over the elements of vals (broadcast), as a Scalar or a lazy Block of `dtype`."""
    shape = V.broadcast_shapes(*(v.shape for v in vals))
    if not shape:
        return Scalar(op(*(v.expr for v in vals)), dtype, base)
    total = cost + sum(getattr(v, "cost", 0) for v in vals)
    return Block(shape, dtype, lambda idx: op(*(V.element(v, idx) for v in vals)), base=base, cost=total,
                 deps=V.deps_of(*vals))


def cast_to(v, dtype: tld.dtype):
    if not V.is_runtime(v):
        v = _literal(v, dtype)
    if v.dtype == dtype:
        return v
    src = v.dtype
    return lift(lambda e: V.convert(e, src, dtype), v, dtype=dtype)


def binary(op: str, a, b):
    """a OP b for the arithmetic and comparison operators, with pointer arithmetic (on two
    Python values: Python's)."""
    if not V.is_runtime(a) and not V.is_runtime(b):
        return python_binary(op, a, b)
    if isinstance(a, V.BlockPtr) or isinstance(b, V.BlockPtr):
        raise TileTypeError("arithmetic on a block pointer: use tl.advance")
    pa = V.is_runtime(a) and a.dtype.is_pointer
    pb = V.is_runtime(b) and b.dtype.is_pointer
    if pa or pb:
        return _pointer_arith(op, a, b, pa, pb)
    if op in ("<<", ">>") and not V.is_runtime(b) and V.is_runtime(a) and a.dtype.is_int() \
            and not a.dtype.is_bool():
        return _bits(op, a, b)
    a, b, dtype = typed(a, b)
    if op in COMPARE:
        return lift(lambda x, y: _cmp(op, x, y), cast_to(a, dtype), cast_to(b, dtype), dtype=tld.int1)
    if op in ("&", "|", "^"):
        if dtype.is_floating():
            raise TileTypeError(f"bitwise `{op}` needs integers or booleans, got {_kind(a)} and {_kind(b)}")
        if dtype.is_bool():
            logic = {"&": "&&", "|": "||", "^": "!="}[op]
            return lift(lambda x, y: te.binary(logic, x, y), a, b, dtype=tld.int1)
        return lift(lambda x, y: te.binary(op, x, y), cast_to(a, dtype), cast_to(b, dtype), dtype=dtype)
    if op in ("/", "//", "%") and dtype.name in ("float16", "bfloat16"):
        dtype = tld.float32  # Triton divides half floats in float32
    if op == "/":
        if not dtype.is_floating():
            dtype = tld.float32
        return lift(lambda x, y: x / y, cast_to(a, dtype), cast_to(b, dtype), dtype=dtype)
    if op == "//" and dtype.is_floating():
        raise TileTypeError(f"`//` needs integers, got {_kind(a)} and {_kind(b)}: use `/` (and tl.floor)")
    if op == "%" and dtype.is_floating():
        return lift(lambda x, y: te.call("fmod", x, y), cast_to(a, dtype), cast_to(b, dtype), dtype=dtype, cost=8)
    if dtype.is_bool():
        dtype = tld.int32
    if op in ("//", "%"):
        fn = _trunc_div if op == "//" else _trunc_mod
        return lift(fn, cast_to(a, dtype), cast_to(b, dtype), dtype=dtype, cost=4)
    if op not in ARITH:
        raise TileTypeError(f"operator `{op}` is not supported by the compiler")
    return lift(lambda x, y: te.binary(ARITH[op], x, y), cast_to(a, dtype), cast_to(b, dtype), dtype=dtype)


def _signs_differ(x: PrimExpr, y: PrimExpr, r: PrimExpr) -> PrimExpr:
    """Whether C's x / y rounds other than the loop IR's floor division (r = x % y, floored):
    a remainder and operands of opposite signs."""
    zero = const(0, x.dtype)
    return te.binary("&&", te.binary("!=", r, zero), te.binary("!=", te.binary("<", x, zero),
                                                                te.binary("<", y, zero)))


def nonnegative(e: PrimExpr) -> bool:
    """Whether e is provably >= 0 from its form: the kernel's variables (program ids, grid sizes,
    the indices of blocks and the counters of loops) all are, and so is what +, *, //, %, min,
    max and select make of them and of constants >= 0. (A loop's own variable, start + k * step,
    is only where its start is.)"""
    match e:
        case te.Const(value, _):
            return value >= 0
        case te.Var():
            return True
        case te.Cast(dtype, v) if dtype in ("int32", "int64") and v.dtype in ("int32", "int64"):
            return nonnegative(v)
        case te.Binary(op, a, b, _) if op in ("+", "*", "//", "%", "min", "max"):
            return nonnegative(a) and nonnegative(b)
        case te.Select(_, t, f, _):
            return nonnegative(t) and nonnegative(f)
        case te.Broadcast(v, _, _):
            return nonnegative(v)
    return False


def _trunc_div(x: PrimExpr, y: PrimExpr) -> PrimExpr:
    """C's integer division (toward zero, as Triton's sdiv/udiv) from the loop IR's floor
    division: one more where the floor went below a negative quotient. On operands that are
    never negative (indices: `offs // C`), the two are one, and the floor keeps the index
    arithmetic that the compiler recognizes."""
    q = te.binary("//", x, y)
    if x.dtype.startswith("uint") or nonnegative(x) and nonnegative(y):
        return q
    return te.select(_signs_differ(x, y, te.binary("%", x, y)), q + const(1, x.dtype), q)


def _trunc_mod(x: PrimExpr, y: PrimExpr) -> PrimExpr:
    """C's integer remainder (the sign of x, as Triton's srem): the floored one less y where
    they differ."""
    r = te.binary("%", x, y)
    if x.dtype.startswith("uint") or nonnegative(x) and nonnegative(y):
        return r
    return te.select(_signs_differ(x, y, r), r - y, r)


def _bits(op: str, a, b):
    """Shifts by a constant, as the arithmetic they are: x << k == x * 2**k, x >> k == x // 2**k
    (floor: the arithmetic shift)."""
    if not isinstance(b, int) or isinstance(b, bool):
        raise TileTypeError(f"`{op}` by {b!r}: a constant integer")
    bits = V._INT_BITS[a.dtype.name]
    if not 0 <= b < bits:
        raise TileTypeError(f"a shift by {b} of a {a.dtype.name}")
    if op == "<<":
        return lift(lambda x: te.binary("*", x, const(1 << b, x.dtype)), a, dtype=a.dtype)
    return lift(lambda x: te.binary("//", x, const(1 << b, x.dtype)), a, dtype=a.dtype)


def python_binary(op: str, a, b):
    import operator as o

    table = {"+": o.add, "-": o.sub, "*": o.mul, "/": o.truediv, "//": o.floordiv, "%": o.mod, "&": o.and_,
             "|": o.or_, "^": o.xor, "<<": o.lshift, ">>": o.rshift, "**": o.pow, "<": o.lt, "<=": o.le,
             ">": o.gt, ">=": o.ge, "==": o.eq, "!=": o.ne}
    return table[op](a, b)


def _cmp(op: str, x: PrimExpr, y: PrimExpr) -> PrimExpr:
    if op == "==":
        return te.binary("==", x, y)
    if op == "!=":
        return te.binary("!=", x, y)
    return te.binary(op, x, y)


def _pointer_arith(op: str, a, b, pa: bool, pb: bool):
    if op in COMPARE and pa and pb:
        return lift(lambda x, y: _cmp(op, x, y), a, b, dtype=tld.int1)
    if pa and pb or op not in ("+", "-") or (pb and op == "-"):
        raise TileTypeError(f"pointer arithmetic `{op}` between {_kind(a)} and {_kind(b)}")
    ptr, off = (a, b) if pa else (b, a)
    if not V.is_runtime(off):
        if not isinstance(off, int):
            raise TileTypeError(f"a pointer plus {off!r}: offsets are integers")
        off = Scalar(const(off), tld.int64)
    if not off.dtype.is_int():
        raise TileTypeError(f"a pointer plus a {off.dtype.name} offset: offsets are integers")
    if op == "-":
        return lift(lambda p, o: p - widen(o), ptr, off, dtype=ptr.dtype, base=ptr.base)
    return lift(lambda p, o: p + widen(o), ptr, off, dtype=ptr.dtype, base=ptr.base)


def widen(e: PrimExpr) -> PrimExpr:
    """An integer offset computed in int64 (the cast pushed down to the leaves, so that an
    offset affine in the block's indices stays affine: a contiguous vector access)."""
    if e.dtype == "int64":
        return e
    match e:
        case te.Cast(_, v) if v.dtype == "int64":
            return v
        case te.Binary(op, a, b, _) if op in ("+", "-", "*"):
            return te.binary(op, widen(a), widen(b))
        case te.Const(value, _):
            return const(value, "int64")
    return te.cast("int64", e)


def _kind(v) -> str:
    return v.dtype.name if V.is_runtime(v) else type(v).__name__


def unary(op: str, a):
    if op == "-":
        return binary("-", 0, a)
    if op == "+":
        return a
    if op in ("~", "not"):
        if a.dtype.is_bool():
            return lift(lambda x: te.Not(x, x.dtype), a, dtype=tld.int1)
        if op == "not":
            return binary("==", a, 0)
        if a.dtype.is_int():
            return binary("-", binary("-", 0, a), 1)  # two's complement: ~x == -x - 1
        raise TileTypeError(f"`~` on {a.dtype.name}")
    raise TileTypeError(f"unary operator {op}")


def where(c, x, y):
    if not V.is_runtime(c):
        return x if c else y
    c = cast_to(c, tld.int1) if not c.dtype.is_bool() else c
    if V.is_runtime(x) and x.dtype.is_pointer or V.is_runtime(y) and y.dtype.is_pointer:
        raise TileTypeError("tl.where between pointers is not supported by the compiler")
    if not V.is_runtime(x) and not V.is_runtime(y):
        x = V.as_scalar(x)
    x, y, dtype = typed(x, y)
    return lift(lambda cc, xx, yy: te.select(cc, xx, yy), c, cast_to(x, dtype), cast_to(y, dtype), dtype=dtype)


def minmax(op: str, a, b):
    a, b, dtype = typed(a, b)
    return lift(lambda x, y: te.binary(op, x, y), cast_to(a, dtype), cast_to(b, dtype), dtype=dtype)


def math(name: str, x):
    """A math function of the language on a value (floats; integers are made float32)."""
    if not V.is_runtime(x):
        x = V.as_scalar(x)  # typed as Triton types a constant (an int stays an int for abs, floor, ceil)
    if name == "abs":
        if x.dtype.is_int_unsigned() or x.dtype.is_bool():
            return x
        return lift(lambda e: te.call("abs", e), x, dtype=x.dtype)
    if name in ("floor", "ceil") and not x.dtype.is_floating():
        return x
    dtype = x.dtype if x.dtype.is_floating() else tld.float32
    x = cast_to(x, dtype)
    if name in ("exp2", "log2") and dtype == tld.float32:  # through the compiler's vector exp and log
        if name == "exp2":  # 2^x = e^(x ln 2)
            return lift(lambda e: te.call("exp", e * 0.6931471805599453), x, dtype=dtype, cost=8)
        return lift(lambda e: te.call("log", e) * 1.4426950408889634, x, dtype=dtype, cost=8)
    tir_name = {"sqrt_rn": "sqrt"}.get(name, name)
    return lift(lambda e: te.call(tir_name, e), x, dtype=dtype, cost=8)

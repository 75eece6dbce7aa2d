"""Elementwise builtins: tl.cast, tl.where, tl.maximum and the math functions (ops.py's typed
arithmetic on compile-time values)."""

from __future__ import annotations

from ....tir import expr as te
from ....tir.expr import cast, const
from ...language import dtypes as tld
from .. import ops
from .. import values as V
from ..values import TileTypeError
from .calls import Calls


class Elementwise(Calls):
    """tl.cast to tl.cdiv, and tl.exp and the other math functions (`__getattr__`)."""

    def b_cast(self, input, dtype, fp_downcast_rounding=None, bitcast=False):
        if bitcast:
            raise TileTypeError("bitcast is not supported by the compiler yet")
        if isinstance(dtype, str):
            dtype = tld.DTYPES[dtype]
        return ops.cast_to(input, dtype)

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

"""float16 and bfloat16 elements in CUDA C: `__half` and `__nv_bfloat16` in memory, computed in
float32. An element is loaded as the float it holds and a stored float rounded once (to nearest
even); a cast to half precision rounds and goes on in float32; an element copied from a buffer
of its own type keeps its bits (also where a zero fill's conditions guard it); `reinterpret`
reads a value's bits through a union of the storage types.
"""

from __future__ import annotations

import math

from ..codegen.cstyle import PRIMARY
from ..tir import dtype as dt
from ..tir.expr import Buffer, BufferLoad, Cast, PrimExpr
from .vectors import zero_filled

# half-precision element types: the float they hold, and a float rounded into one
WIDEN = {"float16": "__half2float", "bfloat16": "__bfloat162float"}
NARROW = {"float16": "__float2half_rn", "bfloat16": "__float2bfloat16_rn"}
ZERO = {"float16": "__ushort_as_half((unsigned short)0)", "bfloat16": "__ushort_as_bfloat16((unsigned short)0)"}


class HalfElements:
    """The CUDA renderer's half-precision elements (a part of ember.cuda.codegen.CUDARenderer)."""

    def _stored(self, buf: Buffer, value: PrimExpr) -> str:
        """The value as an element of buf: a float stored into a half-precision buffer is rounded
        to nearest even (`__float2half_rn`), a value cast to buf's type rounded once; an element
        copied from a buffer of the same type keeps its bits, and so does one copied where
        conditions hold, zero elsewhere (a convolution's columns: its padding and its tile's; no
        round trip through a float: two conversions an element fewer)."""
        narrow = NARROW.get(buf.dtype)
        if narrow is None:
            return self._e(value)
        if isinstance(value, BufferLoad) and value.buffer.dtype == buf.dtype:
            return self._element(value.buffer, value.indices[0])
        if isinstance(value, Cast) and value.dtype == buf.dtype:  # (rounded once: the cast's rounding is the store's)
            return f"{narrow}({self._e(value.value)})"
        if (kept := self._zero_filled_element(buf, value)) is not None:
            return kept
        return f"{narrow}({self._e(value)})"

    def _zero_filled_element(self, buf: Buffer, value: PrimExpr) -> str | None:
        """`c1 && c2 ? element : 0` where value is an element of buf's type under nested
        `cond ? x : +0` (zero_filled), else None."""
        conds = []
        while (found := zero_filled(value))[0] is not None and math.copysign(1.0, value.f.value) > 0:
            conds.append(found[0])
            value = found[1]
        if not conds or not isinstance(value, BufferLoad) or value.buffer.dtype != buf.dtype:
            return None
        cond = " && ".join(f"({self._e(c)})" for c in conds)
        return f"({cond}) ? {self._element(value.buffer, value.indices[0])} : {ZERO[buf.dtype]}"

    def _cast(self, dtype: str, v: PrimExpr) -> tuple[str, int]:
        """A cast to half precision rounds and goes on in float32 (as a store and a load would)."""
        if dtype in NARROW:
            self._headers.add(self.HEADERS[dtype])
            return f"{WIDEN[dtype]}({NARROW[dtype]}({self._e(v)}))", PRIMARY
        return super()._cast(dtype, v)

    def _reinterpret(self, src: str, dst: str) -> str:
        """The helper that reads the bits of a value of `src` (as stored) as a value of `dst`:
        through a union of their storage types (CUDA's half and bfloat16 through their bits)."""
        name = f"ember_reinterpret_{src}_{dst}"
        bits = {"float16": ("__half_as_ushort(__float2half_rn(x))", "__half2float(__ushort_as_half(u.d))"),
                "bfloat16": ("__bfloat16_as_ushort(__float2bfloat16_rn(x))",
                             "__bfloat162float(__ushort_as_bfloat16(u.d))")}
        self._headers |= {self.HEADERS[d] for d in (src, dst) if d in self.HEADERS}
        storage = {d: "unsigned short" if d in bits else self.SCALAR_TYPES[d] for d in (src, dst)}
        into = bits[src][0] if src in bits else f"({storage[src]})x"
        out = bits[dst][1] if dst in bits else "u.d"
        compute = {d: self.SCALAR_TYPES[dt.compute_dtype(d)] for d in (src, dst)}
        return self._helper(name, f"static __device__ __forceinline__ {compute[dst]} {name}({compute[src]} x) {{\n"
                                  f"  union {{ {storage[src]} s; {storage[dst]} d; }} u;\n  u.s = {into};\n"
                                  f"  return {out};\n}}")

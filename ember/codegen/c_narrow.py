"""C for the storage types narrower than their arithmetic: the narrow floats (float8 and float4,
held as their bits in a byte, computed in float32) and the sub-byte integers (int4, uint4, int2,
uint2: one value per byte, computed in int8 or uint8).

- A narrow float widens to float through a table of its codes' float bits (256 entries; 16 for
  float4_e2m1fn, indexed by the low nibble): exact, and one load per value.
- It narrows from float by rounding to nearest even on the float's bits, one formula for every
  format (`ember.tir.dtype.MINIFLOATS`): the bits below the format's precision are rounded off
  (more of them where the result is subnormal), the exponent is rebased by adding the rounded
  mantissa (a carry moves to the next binade), and a code past the largest finite value
  overflows: to inf (float8_e5m2), NaN (the fn and fnuz formats, float8_e8m0fnu) or the largest
  value (float4_e2m1fn, which has neither). NaN becomes the format's NaN of the same sign (one
  NaN in the fnuz formats and float8_e8m0fnu; float4_e2m1fn has none and gives -0.0 for NaN and
  0.0 for -NaN), -0.0 becomes 0.0 in the fnuz formats, and float8_e8m0fnu (no sign, no zero)
  gives NaN for zero and negative values. These are ml_dtypes' conversions, bit for bit (the
  tests sweep every code and float16, and random float32), so kernels and the NumPy references
  agree; a float64 narrows through float, as ml_dtypes' does. Saturation, ONNX's default for
  Cast to float8, is a clip before the cast (the ONNX frontend adds it).
- A sub-byte integer is held as ml_dtypes holds it, its low bits in a byte (the high bits 0), and
  computed in int8 or uint8: a load sign-extends (int4, int2), a store keeps the low bits, and
  the value wraps to the width (two's complement) after every operation, as ml_dtypes'
  arithmetic does; a float converts through int32 first, as ml_dtypes converts.

Vectors go lane by lane through the scalar helpers (GCC vectorizes the table loads as gathers).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ..tir import dtype as dt

if TYPE_CHECKING:
    from .c_prelude import CPrelude

_QUIET_NAN = 0x7FC00000


def _float_bits(fmt: dt.Minifloat, code: int) -> int:
    """The float32 bits of a code's value; a NaN code gives a quiet NaN whose sign is the code's
    (the fnuz formats' NaN, 0x80, is negative; float8_e8m0fnu's positive)."""
    value = fmt.value(code)
    if value != value:
        negative = bool(code & fmt.sign_bit) if fmt.kind != "e8m0" else False
        return _QUIET_NAN | (negative << 31)
    return struct.unpack("<I", struct.pack("<f", value))[0]


def _table(lib: CPrelude, elem: str) -> str:
    fmt = dt.MINIFLOATS[elem]
    name = f"ember_{elem}_bits"
    count = 1 << (fmt.exponent + fmt.mantissa + (fmt.kind != "e8m0"))
    words = [f"0x{_float_bits(fmt, c):08X}u" for c in range(count)]
    rows = ",\n".join("  " + ", ".join(words[i:i + 8]) for i in range(0, count, 8))
    return lib._helper(name, lambda: f"static const uint32_t {name}[{count}] = {{\n{rows}\n}};")


def to_float(lib: CPrelude, elem: str) -> str:
    """`float ember_<elem>_to_float(uint8_t b)`: the value of code b."""
    table = _table(lib, elem)
    fmt = dt.MINIFLOATS[elem]
    index = "b & 0xF" if fmt.exponent + fmt.mantissa < 7 else "b"
    name = f"ember_{elem}_to_float"
    return lib._helper(name, lambda: (
        f"static inline float {name}(uint8_t b) {{\n"
        f"  union {{ uint32_t u; float f; }} c = {{ {table}[{index}] }};\n  return c.f;\n}}"
    ))


def from_float(lib: CPrelude, elem: str) -> str:
    """`uint8_t ember_float_to_<elem>(float f)`: f rounded to the nearest code, ties to even."""
    fmt = dt.MINIFLOATS[elem]
    name = f"ember_float_to_{elem}"
    m, emin, top = fmt.mantissa, 1 - fmt.bias, fmt.exponent + fmt.mantissa
    nan = {"fn": f"(uint8_t)(0x{fmt.max_code + 1:X} | s << {top})", "ieee": f"(uint8_t)(0x7E | s << {top})",
           "fnuz": "0x80", "e8m0": "0xFF", "finite": f"(uint8_t)(0x8 ^ s << {top})"}[fmt.kind]
    overflow = {"fn": nan, "ieee": f"(uint8_t)(0x7C | s << {top})", "fnuz": "0x80", "e8m0": "0xFF",
                "finite": f"(uint8_t)(0x{fmt.max_code:X} | s << {top})"}[fmt.kind]
    if fmt.kind == "e8m0":
        special = "  if (s || a == 0) return 0xFF;  /* no sign, no zero */\n"
        signed = "code"
    elif fmt.kind == "fnuz":
        special, signed = "", f"code | (code ? s << {top} : 0u)"  # no -0
    else:
        special, signed = "", f"code | s << {top}"
    return lib._helper(name, lambda: (
        f"static inline uint8_t {name}(float f) {{\n"
        "  union { float f; uint32_t u; } c = { f };\n"
        "  uint32_t s = c.u >> 31, a = c.u & 0x7FFFFFFFu;\n"
        f"  if (a > 0x7F800000u) return {nan};\n"
        f"{special}"
        "  int32_t e = a < 0x800000u ? -126 : (int32_t)(a >> 23) - 127;\n"
        "  uint32_t mant = (a & 0x7FFFFFu) | (a < 0x800000u ? 0u : 0x800000u);\n"
        f"  int32_t shift = {23 - m} + (e < {emin} ? {emin} - e : 0);\n"
        "  if (shift > 25) shift = 25;  /* below half the smallest subnormal: 0 */\n"
        "  uint32_t r = (mant + (1u << (shift - 1)) - 1u + ((mant >> shift) & 1u)) >> shift;\n"
        f"  uint32_t code = ((uint32_t)(e > {emin} ? e - {emin} : 0) << {m}) + r;\n"
        f"  if (code > 0x{fmt.max_code:X}u) return {overflow};\n"
        f"  return (uint8_t)({signed});\n}}"
    ))


def widen(lib: CPrelude, elem: str, lanes: int) -> str:
    """`float32xN ember_<elem>_widen_xN(<elem>xN b)`: the lanes of b as floats."""
    lane = f"{to_float(lib, elem)}(b[l])"
    return lib.lanewise(f"ember_{elem}_widen_x{lanes}", lib.vec("float32", lanes), f"{lib.vec(elem, lanes)} b",
                        lanes, lane)


def narrow(lib: CPrelude, elem: str, lanes: int) -> str:
    """`<elem>xN ember_<elem>_narrow_xN(float32xN v)`: each lane rounded to a code."""
    lane = f"{from_float(lib, elem)}(v[l])"
    return lib.lanewise(f"ember_{elem}_narrow_x{lanes}", lib.vec(elem, lanes), f"{lib.vec('float32', lanes)} v",
                        lanes, lane)


def wrap(lib: CPrelude, elem: str, lanes: int) -> str:
    """`ember_wrap_<elem>[xN](x)`: x (int8 or uint8 lanes; a scalar of any integer type) reduced to
    the values of the sub-byte integer `elem`, two's complement: a value computed in a byte, or
    the byte in memory (its low bits; ml_dtypes keeps the high bits 0)."""
    held, width = dt.SUBBYTE_INTS[elem]
    unsigned = elem.startswith("u")
    if lanes == 1:
        t = lib.types[held]
        name = f"ember_wrap_{elem}"
        body = (f"(uint8_t)(x & 0x{(1 << width) - 1:X})" if unsigned
                else f"(int8_t)((int8_t)((uint8_t)x << {8 - width}) >> {8 - width})")
        return lib._helper(name, lambda: f"static inline {t} {name}(int64_t x) {{ return {body}; }}")
    t = lib.vec(held, lanes)
    name = f"ember_wrap_{elem}x{lanes}"
    body = f"x & 0x{(1 << width) - 1:X}" if unsigned else f"(x << {8 - width}) >> {8 - width}"
    return lib._helper(name, lambda: f"static inline {t} {name}({t} x) {{ return {body}; }}")


def truncate(lib: CPrelude, elem: str, lanes: int) -> str:
    """`ember_truncate_<elem>[xN](x)`: the byte a sub-byte integer is held in, its low bits (the
    high bits 0, as ml_dtypes holds it), from its value as computed (int8 or uint8 lanes)."""
    held, width = dt.SUBBYTE_INTS[elem]
    mask = f"0x{(1 << width) - 1:X}"
    if lanes == 1:
        name = f"ember_truncate_{elem}"
        return lib._helper(name, lambda: (
            f"static inline uint8_t {name}({lib.types[held]} x) {{ return (uint8_t)(x & {mask}); }}"))
    t, u = lib.vec(held, lanes), lib.vec(elem, lanes)
    name = f"ember_truncate_{elem}x{lanes}"
    return lib._helper(name, lambda: f"static inline {u} {name}({t} x) {{ return ({u})(x & {mask}); }}")

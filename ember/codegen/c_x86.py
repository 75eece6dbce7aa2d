"""Helpers that are one x86 instruction a register where the target has the vector width, and
portable C elsewhere: GCC's vector extensions write these operations in several instructions, or
lane by lane. Each is guarded by the target's feature macros (__AVX512F__, __AVX__, __AVX2__), so
one unit compiles for any target; GCC takes the instruction's builtin where it can, to spare the
parse of immintrin.h.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tir import dtype as dt

if TYPE_CHECKING:
    from .c_prelude import CPrelude

GCC = "defined(__GNUC__) && !defined(__clang__)"  # (clang defines __GNUC__ too; its builtins differ)


def widen_int32(lib: CPrelude, elem: str, lanes: int) -> str:
    """`int32xN ember_widen_<elem>x<N>(elemxN v)`: 8- or 16-bit integer lanes as int32, by one
    vpmovzx/vpmovsx where the target has the vector width (GCC 12 widens a 16-lane
    __builtin_convertvector of bytes in 8-lane pieces and lane inserts), twice the width at a
    time elsewhere."""
    t, v, bits = lib.vec("int32", lanes), lib.vec(elem, lanes), dt.bits(elem)
    name = f"ember_widen_{elem}x{lanes}"
    portable = f"__builtin_convertvector(v, {lib.vec(elem.replace('8', '16'), lanes)})" if bits == 8 else "v"
    unit = {16: ("__AVX512F__", "_mm512"), 8: ("__AVX2__", "_mm256")}.get(lanes)
    if unit is None or lanes * bits < 128:  # (8 bytes: no vector type of the intrinsic's operand)
        return lib._helper(name, lambda: (
            f"static inline {t} {name}({v} v) {{ return __builtin_convertvector({portable}, {t}); }}"))
    feature, prefix = unit
    operand = f"__m{lanes * bits}i"
    call = f"{prefix}_cvtep{'u' if elem.startswith('u') else 'i'}{bits}_epi32(({operand})v)"
    return lib._helper(name, lambda: (
        f"#if defined({feature})\n#include <immintrin.h>\n#endif\n"
        f"static inline {t} {name}({v} v) {{\n#if defined({feature})\n  return ({t}){call};\n#else\n"
        f"  return __builtin_convertvector({portable}, {t});\n#endif\n}}"
    ))


def minmax_const(lib: CPrelude, op: str, elem: str, lanes: int) -> str:
    """`T ember_maxc_T(x, c)` (or minc) for a float vector type T: numpy.maximum(x, c) for a c
    that is not NaN, one instruction a register where the target has the width: x86's
    maxps(c, x) is c > x ? c : x, which gives x where x is NaN (ember_max_* tests for NaN
    besides: four instructions, and GCC writes a float64x16 one lane by lane). Where x equals
    c (zeros of two signs), x. GCC takes it as its builtin, the intrinsic's own body, without
    immintrin.h (whose parse is a seventh of a CNN's unit's compile: ResNet-18's 0.8 s of
    CPU a unit, 0.7 s without, the same instructions); other compilers through the intrinsic."""
    t = lib.vec(elem, lanes)
    cmp = ">" if op == "max" else "<"
    name = f"ember_{op}c_{t}"
    fallback = f"{lib.select(elem, lanes)}(c {cmp} x, c, x)"
    bits, suffix = lanes * dt.bits(elem), "ps" if elem == "float32" else "pd"
    units = [(f, w) for f, w in (("__AVX512F__", 512), ("__AVX__", 256)) if bits % w == 0]
    if not units:
        return lib._helper(name, lambda: f"static inline {t} {name}({t} x, {t} c) {{ return {fallback}; }}")

    def body(width: int) -> str:
        piece, n = lib.vec(elem, width // dt.bits(elem)), bits // width
        reg = f"__m{width}{'' if elem == 'float32' else 'd'}"
        builtin = f"__builtin_ia32_{op}{suffix}{width}"
        call = f"{builtin}_mask(b.r[i], a.r[i], b.r[i], -1, 4)" if width == 512 else f"{builtin}(b.r[i], a.r[i])"
        return (f"  union {{ {t} v; {piece} r[{n}]; }} a = {{x}}, b = {{c}};\n"
                f"  for (int i = 0; i < {n}; ++i)\n#if {GCC}\n    a.r[i] = {call};\n#else\n"
                f"    a.r[i] = ({piece})_mm{width}_{op}_{suffix}(({reg})b.r[i], ({reg})a.r[i]);\n#endif\n"
                "  return a.v;\n")

    branches = "".join(f"#{'if' if k == 0 else 'elif'} defined({f})\n{body(w)}" for k, (f, w) in enumerate(units))
    guard = " || ".join(f"defined({f})" for f, _ in units)
    return lib._helper(name, lambda: (
        f"#if ({guard}) && !({GCC})\n#include <immintrin.h>\n#endif\n"
        f"static inline {t} {name}({t} x, {t} c) {{\n{branches}#else\n  return {fallback};\n#endif\n}}"
    ))


def rint_int32(lib: CPrelude, lanes: int) -> str:
    """`ember_rint_int32x<lanes>(float32 vector x)`: (int32)rintf(x) a lane, one instruction a
    register where the target has the width (cvtps2dq rounds by the current mode, as rintf
    does) where rounding (vrndscaleps) then converting (vcvttps2dq) takes two: a requantizing
    epilogue's rint before its uint8."""
    t, i = lib.vec("float32", lanes), lib.vec("int32", lanes)
    name = f"ember_rint_{i}"
    rounded = lib.lanewise(f"ember_rint_{t}", t, f"{t} x", lanes, "rintf(x[l])")
    fallback = f"__builtin_convertvector({rounded}(x), {i})"
    units = [(f, w) for f, w in (("__AVX512F__", 512), ("__AVX__", 256)) if lanes * 32 % w == 0]

    def body(width: int) -> str:
        n = lanes * 32 // width
        return (f"  union {{ {t} v; __m{width} r[{n}]; }} a = {{x}};\n"
                f"  union {{ __m{width}i r[{n}]; {i} v; }} b;\n"
                f"  for (int k = 0; k < {n}; ++k) b.r[k] = _mm{width}_cvtps_epi32(a.r[k]);\n"
                "  return b.v;\n")

    if not units:
        return lib._helper(name, lambda: f"static inline {i} {name}({t} x) {{ return {fallback}; }}")
    branches = "".join(f"#{'if' if k == 0 else 'elif'} defined({f})\n{body(w)}" for k, (f, w) in enumerate(units))
    guard = " || ".join(f"defined({f})" for f, _ in units)
    return lib._helper(name, lambda: (
        f"#if {guard}\n#include <immintrin.h>\n#endif\n"
        f"static inline {i} {name}({t} x) {{\n{branches}#else\n  return {fallback};\n#endif\n}}"
    ))

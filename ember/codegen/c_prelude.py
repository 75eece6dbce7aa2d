"""The top of a C translation unit: includes, GCC vector typedefs and small inline helpers.

Kernels ask for a vector type or a helper by what it does (`load("float16", 8)`); the prelude
writes its definition once, the first time it is asked, so a unit carries only what its kernels
use. Helpers are `static inline` functions (GCC inlines them at -O1 and above); they hold the
operations that C has no operator for, so the kernels stay one readable expression per store:

- contiguous vector loads and stores through unaligned, may_alias vector types; float16 lanes are
  converted to float on load and back on store; bfloat16 is held as its bits (uint16_t: GCC 12
  has no bfloat16 type), widened to float by a shift and narrowed by rounding to nearest even;
  the float8 and float4 types are held as their bits in a byte and the sub-byte integers one per
  byte (`c_narrow`: their conversions, and the wrap of int4 and int2 to their width);
  booleans are bytes in memory, masks in registers;
- gathers, scatters and libm calls lane by lane (`c_vmath` writes the vector math of float32);
  the columns of a tile of registers (a transpose);
- min and max that propagate NaN like numpy.maximum, vector selects as mask blends.

Other modules write their helpers into the same prelude (`lib._helper`): `c_floordiv` floor
division and modulo with numpy's rules (an integer division by zero gives 0 and never traps),
`c_x86` the operations that are one x86 instruction where the target has it, `c_runtime` the
thread count of a call (`enter_threads`), per-thread scratch and the checked INDEX intrinsic.

A boolean vector is a *mask*: a signed integer vector of -1/0 lanes (what GCC's vector
comparisons produce), as wide as the values that were compared.

GCC vectors have a power-of-two size, so a vector of 3 lanes is stored in a type of 4: the extra
lanes hold garbage, which is harmless because memory is only ever touched lane by lane for such
types, and integer division replaces a zero divisor in any lane (garbage included) before it divides.
"""

from __future__ import annotations

from collections.abc import Callable

from ..target import Target
from ..tir import dtype as dt
from . import c_narrow
from .c_storage import STORAGE

INCLUDES = ("math.h", "stdbool.h", "stdint.h", "stdio.h", "stdlib.h")


class CPrelude:
    """Collects the typedefs and helpers of one translation unit; `text()` renders them. `align`
    is the unit's buffer alignment (its target's), which heap scratch is allocated at."""

    def __init__(self, scalar_types: dict[str, str], align: int = Target.align):
        self.types = scalar_types
        self.align = align
        self._typedefs: dict[str, str] = {}
        self._helpers: dict[str, str] = {}

    def text(self) -> str:
        parts = [f"#include <{h}>" for h in INCLUDES]
        parts += ["#ifdef _OPENMP", "#include <omp.h>", "#endif"]
        if self._typedefs:
            parts += ["", *self._typedefs.values()]
        for h in self._helpers.values():
            parts += ["", h]
        return "\n".join(parts)

    def merge(self, other: CPrelude) -> None:
        """Add the typedefs and helpers of `other` that this one lacks, in their order (a helper
        comes after those it calls, in both)."""
        for name, text in other._typedefs.items():
            self._typedefs.setdefault(name, text)
        for name, text in other._helpers.items():
            self._helpers.setdefault(name, text)

    # -- types -----------------------------------------------------------------------------
    def vec(self, elem: str, lanes: int) -> str:
        """The vector type of `lanes` values of scalar dtype `elem` ("float32x8")."""
        name = f"{elem}x{lanes}"
        if name not in self._typedefs:
            size = (1 << (lanes - 1).bit_length()) * dt.bits(elem) // 8  # padded to a power of two
            self._typedefs[name] = f"typedef {self.types[elem]} {name} __attribute__((vector_size({size})));"
        return name

    def unaligned_vec(self, elem: str, lanes: int) -> str:
        """The same vector type (of power-of-two lanes), for loads and stores at any address of
        memory of any type."""
        name = f"{self.vec(elem, lanes)}_u"
        if name not in self._typedefs:
            size = lanes * dt.bits(elem) // 8
            attributes = f"vector_size({size}), aligned(1), may_alias"
            self._typedefs[name] = f"typedef {self.types[elem]} {name} __attribute__(({attributes}));"
        return name

    def mask(self, bits: int, lanes: int) -> str:
        return self.vec(f"int{bits}", lanes)

    def value_vec(self, elem: str, lanes: int) -> str:
        """The vector type that lanes of `elem` are computed in (float16 in float, bool as a byte mask)."""
        if elem == "bool":
            return self.mask(8, lanes)
        return self.vec(dt.element_of(dt.compute_dtype(elem)), lanes)

    # -- helpers ---------------------------------------------------------------------------
    def _helper(self, name: str, make: Callable[[], str]) -> str:
        if name not in self._helpers:
            self._helpers[name] = make()  # make() may add the helpers it calls first
        return name

    def source(self, name: str, text: str) -> str:
        """Add C source written elsewhere (a tensor intrinsic's functions) once, under `name`."""
        return self._helper(name, lambda: text)

    def lanewise(self, name: str, out: str, params: str, lanes: int, lane_expr: str) -> str:
        """A helper `out name(params)` whose lane `l` is `lane_expr` (of the params, at lane l)."""
        return self._helper(name, lambda: (
            f"static inline {out} {name}({params}) {{\n  {out} r;\n"
            f"  for (int l = 0; l < {lanes}; ++l) r[l] = {lane_expr};\n  return r;\n}}"
        ))

    def bf16_to_float(self) -> str:
        """`float ember_bf16_to_float(uint16_t b)`: the float whose upper half is b."""
        name = "ember_bf16_to_float"
        return self._helper(name, lambda: (
            f"static inline float {name}(uint16_t b) {{\n"
            "  union { uint32_t u; float f; } c = { (uint32_t)b << 16 };\n  return c.f;\n}"
        ))

    def float_to_bf16(self) -> str:
        """`uint16_t ember_float_to_bf16(float f)`: f rounded to the nearest bfloat16, ties to
        even (NaN stays a quiet NaN of its sign), as ml_dtypes and PyTorch round."""
        name = "ember_float_to_bf16"
        return self._helper(name, lambda: (
            f"static inline uint16_t {name}(float f) {{\n"
            "  union { float f; uint32_t u; } c = { f };\n"
            "  if (f != f) return (uint16_t)((c.u >> 16) | 0x40);\n"
            "  return (uint16_t)((c.u + 0x7FFFu + ((c.u >> 16) & 1u)) >> 16);\n}"
        ))

    def bf16_widen(self, lanes: int) -> str:
        """`float32xN ember_bf16_widen_xN(bfloat16xN b)`: the lanes of b as floats."""
        t, b, u = self.vec("float32", lanes), self.vec("bfloat16", lanes), self.vec("uint32", lanes)
        name = f"ember_bf16_widen_x{lanes}"
        return self._helper(name, lambda: (
            f"static inline {t} {name}({b} b) {{ return ({t})(__builtin_convertvector(b, {u}) << 16); }}"
        ))

    def bf16_narrow(self, lanes: int) -> str:
        """`bfloat16xN ember_bf16_narrow_xN(float32xN v)`: each lane as ember_float_to_bf16 rounds it."""
        t, b = self.vec("float32", lanes), self.vec("bfloat16", lanes)
        u, m = self.vec("uint32", lanes), self.mask(32, lanes)
        name = f"ember_bf16_narrow_x{lanes}"
        return self._helper(name, lambda: (
            f"static inline {b} {name}({t} v) {{\n"
            f"  {u} u = ({u})v, r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x40u;\n"
            f"  {m} nan = v != v;\n"
            f"  return __builtin_convertvector(({u})((({m})r & ~nan) | (({m})q & nan)), {b});\n}}"
        ))

    # the types held as their bits (dt.BITS_FLOATS), by element type: scalar and vector
    # conversions to float and back, and the wrap of the sub-byte integers
    def to_float(self, elem: str) -> str:
        return self.bf16_to_float() if elem == "bfloat16" else c_narrow.to_float(self, elem)

    def from_float(self, elem: str) -> str:
        return self.float_to_bf16() if elem == "bfloat16" else c_narrow.from_float(self, elem)

    def widen(self, elem: str, lanes: int) -> str:
        return self.bf16_widen(lanes) if elem == "bfloat16" else c_narrow.widen(self, elem, lanes)

    def narrow(self, elem: str, lanes: int) -> str:
        return self.bf16_narrow(lanes) if elem == "bfloat16" else c_narrow.narrow(self, elem, lanes)

    def wrap(self, elem: str, lanes: int) -> str:
        return c_narrow.wrap(self, elem, lanes)

    def truncate(self, elem: str, lanes: int) -> str:
        return c_narrow.truncate(self, elem, lanes)

    def _from_memory(self, elem: str, lane: str) -> str:
        """One lane's value as computed, from its element `lane` in memory (c_storage)."""
        return STORAGE[elem].lane(self, lane)

    def _to_memory(self, elem: str, lane: str) -> str:
        """One lane's value as stored, from its computed value `lane` (c_storage)."""
        return STORAGE[elem].store(self, lane)

    def load(self, elem: str, lanes: int) -> str:
        """`T ember_load_<elem>x<lanes>(const S* p)`: lanes contiguous elements from p."""
        t, s = self.value_vec(elem, lanes), self.types[elem]
        name = f"ember_load_{elem}x{lanes}"
        if not _power_of_two(lanes):
            return self.lanewise(name, t, f"const {s}* p", lanes, self._from_memory(elem, "p[l]"))
        u = self.unaligned_vec("int8" if elem == "bool" else elem, lanes)
        body = STORAGE[elem].widen(self, lanes, f"*(const {u}*)p")
        return self._helper(name, lambda: f"static inline {t} {name}(const {s}* p) {{ return {body}; }}")

    def store(self, elem: str, lanes: int) -> str:
        """`void ember_store_<elem>x<lanes>(S* p, T v)`: the lanes of v to p, p + 1, ..."""
        t, s = self.value_vec(elem, lanes), self.types[elem]
        name = f"ember_store_{elem}x{lanes}"
        if not _power_of_two(lanes):
            lane = self._to_memory(elem, "v[l]")
            return self._helper(name, lambda: (
                f"static inline void {name}({s}* p, {t} v) {{\n"
                f"  for (int l = 0; l < {lanes}; ++l) p[l] = {lane};\n}}"
            ))
        u = self.unaligned_vec("int8" if elem == "bool" else elem, lanes)
        value = STORAGE[elem].narrow(self, lanes, "v")
        return self._helper(name, lambda: (
            f"static inline void {name}({s}* p, {t} v) {{ *({u}*)p = {value}; }}"
        ))

    def gather(self, elem: str, lanes: int) -> str:
        """`T ember_gather_<elem>x<lanes>(const S* p, int64xN i)`: p[i[0]], p[i[1]], ..."""
        t, idx = self.value_vec(elem, lanes), self.vec("int64", lanes)
        lane = self._from_memory(elem, "p[i[l]]")
        params = f"const {self.types[elem]}* p, {idx} i"
        return self.lanewise(f"ember_gather_{elem}x{lanes}", t, params, lanes, lane)

    def scatter(self, elem: str, lanes: int) -> str:
        """`void ember_scatter_<elem>x<lanes>(S* p, int64xN i, T v)`: p[i[l]] = v[l] for each lane."""
        t, idx = self.value_vec(elem, lanes), self.vec("int64", lanes)
        name = f"ember_scatter_{elem}x{lanes}"
        lane = self._to_memory(elem, "v[l]")
        return self._helper(name, lambda: (
            f"static inline void {name}({self.types[elem]}* p, {idx} i, {t} v) {{\n"
            f"  for (int l = 0; l < {lanes}; ++l) p[i[l]] = {lane};\n}}"
        ))

    def gather_bits(self, elem: str, lanes: int) -> str:
        """`<elem>xN ember_gather_bits_<elem>x<lanes>(const S* p, int64xN i)`: the elements p[i[l]]
        as they are in memory (a type held as its bits, moved without converting it)."""
        params = f"const {self.types[elem]}* p, {self.vec('int64', lanes)} i"
        return self.lanewise(f"ember_gather_bits_{elem}x{lanes}", self.vec(elem, lanes), params, lanes, "p[i[l]]")

    def scatter_bits(self, elem: str, lanes: int) -> str:
        """`void ember_scatter_bits_<elem>x<lanes>(S* p, int64xN i, <elem>xN v)`: p[i[l]] = v[l], the
        bits as they are."""
        name = f"ember_scatter_bits_{elem}x{lanes}"
        return self._helper(name, lambda: (
            f"static inline void {name}({self.types[elem]}* p, {self.vec('int64', lanes)} i, "
            f"{self.vec(elem, lanes)} v) {{\n  for (int l = 0; l < {lanes}; ++l) p[i[l]] = v[l];\n}}"
        ))

    def broadcast(self, elem: str, lanes: int) -> str:
        """`T ember_broadcast_<elem>x<lanes>(E x)`: x in every lane (a bool becomes an int32 mask)."""
        if elem == "bool":
            t, arg, x = self.mask(32, lanes), "bool x", "m"
            pre = "int32_t m = -(int32_t)x; "
        else:
            t, arg, x, pre = self.vec(elem, lanes), f"{self.types[elem]} x", "x", ""
        name = f"ember_broadcast_{elem}x{lanes}"
        lanes_init = ", ".join([x] * lanes)
        return self._helper(name, lambda: (
            f"static inline {t} {name}({arg}) {{ {pre}return ({t}){{{lanes_init}}}; }}"
        ))

    def ramp(self, elem: str, lanes: int) -> str:
        """`T ember_ramp_<elem>x<lanes>(E base, E stride)`: base, base + stride, ..."""
        t, e = self.vec(elem, lanes), self.types[elem]
        name = f"ember_ramp_{elem}x{lanes}"
        iota = ", ".join(str(i) for i in range(lanes))
        return self._helper(name, lambda: (
            f"static inline {t} {name}({e} base, {e} stride) {{ return ({t}){{{iota}}} * stride + base; }}"
        ))

    def select(self, elem: str, lanes: int) -> str:
        """`T ember_select_<elem>x<lanes>(M m, T a, T b)`: a where the mask m is set, else b."""
        t, m = self.vec(elem, lanes), self.mask(dt.bits(elem), lanes)
        name = f"ember_select_{t}"
        return self._helper(name, lambda: (
            f"static inline {t} {name}({m} m, {t} a, {t} b) {{ return ({t})((({m})a & m) | (({m})b & ~m)); }}"
        ))

    def minmax(self, op: str, elem: str, lanes: int) -> str:
        """`ember_max_<type>(a, b)` (or min): numpy.maximum's result, NaN included, scalar or vector."""
        cmp = ">" if op == "max" else "<"
        nan = dt.is_float(elem)  # a != a: a is NaN, and NaN wins
        if lanes == 1:
            t = self.types[elem]
            body = f"(a {cmp} b) | (a != a) ? a : b" if nan else f"a {cmp} b ? a : b"
        else:
            t = self.vec(elem, lanes)
            take_a = f"(a {cmp} b) | (a != a)" if nan else f"a {cmp} b"
            body = f"{self.select(elem, lanes)}({take_a}, a, b)"
        name = f"ember_{op}_{elem if lanes == 1 else t}"
        return self._helper(name, lambda: f"static inline {t} {name}({t} a, {t} b) {{ return {body}; }}")

    def column(self, elem: str, width: int, lanes: int) -> str:
        """`ember_column_<elem>x<width>x<lanes>(e, r0, ..., r<lanes-1>)`: lane e of each register
        r_k, as one vector: column e of the register tile transposed (a channel-vector tile
        written along its columns). log2(lanes) rounds of interleaving transpose the tile; GCC
        shares them between the columns a kernel takes (always_inline, so that it can)."""
        t, t_out, m = self.vec(elem, width), self.vec(elem, lanes), self.vec(f"int{dt.bits(elem)}", width)
        name = f"ember_column_{elem}x{width}x{lanes}"

        def interleave(half: int) -> str:
            return f"({m}){{{', '.join(f'{half + k}, {width + half + k}' for k in range(width // 2))}}}"

        def make() -> str:
            regs = [f"r{k}" for k in range(lanes)]
            lines = [f"static inline __attribute__((always_inline)) {t_out} {name}(int e, "
                     f"{', '.join(f'{t} {r}' for r in regs)}) {{"]
            for rnd in range((lanes - 1).bit_length()):
                out = []
                for i in range(lanes // 2):
                    a, b = regs[i], regs[i + lanes // 2]
                    out += [f"s{rnd}_{2 * i}", f"s{rnd}_{2 * i + 1}"]
                    lines.append(f"  {t} {out[-2]} = __builtin_shuffle({a}, {b}, {interleave(0)}), "
                                 f"{out[-1]} = __builtin_shuffle({a}, {b}, {interleave(width // 2)});")
                regs = out
            lines += [f"  {t} tile[{lanes}] = {{{', '.join(regs)}}};",
                      f"  {t} v = tile[e * {lanes} / {width}];",
                      f"  int o = e * {lanes} % {width};",
                      f"  return ({t_out}){{{', '.join(f'v[o + {k}]' for k in range(lanes))}}};", "}"]
            return "\n".join(lines)

        return self._helper(name, make)


def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0

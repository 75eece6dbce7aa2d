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
- floor division and modulo with numpy's rules (integers and floats; an integer division by zero
  gives 0 and never traps), min and max that propagate NaN like numpy.maximum, vector selects as
  mask blends;
- the thread count of a call (`enter_threads`): set for the call, the caller's own setting back
  when it returns (every unit has them: its kernels' launchers or a model's entry use them).

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

SIGNED_INTS = ("int8", "int16", "int32", "int64")
GCC = "defined(__GNUC__) && !defined(__clang__)"  # (clang defines __GNUC__ too; its builtins differ)

# numpy's floor division and modulo of floats (npy_divmod), in float or double.
_FLOAT_FLOORMOD = """\
static inline {T} {name}({T} a, {T} b) {{
  {T} m = fmod{f}(a, b);
  if (m == 0) return copysign{f}(0, b);
  return (b < 0) != (m < 0) ? m + b : m;
}}"""

_FLOAT_FLOORDIV = """\
static inline {T} {name}({T} a, {T} b) {{
  if (b == 0) return a / b;
  {T} m = fmod{f}(a, b), d = (a - m) / b;
  if (m != 0 && (b < 0) != (m < 0)) d -= 1;
  if (d == 0) return copysign{f}(0, a / b);
  {T} q = floor{f}(d);
  return d - q > 0.5{f} ? q + 1 : q;
}}"""

# Integer floor division and modulo with numpy's rules, branch-free: a divisor that would trap
# (0, and -1 under MIN) is replaced by 1 with a select, then the result is fixed up: x // 0 == 0,
# x % 0 == 0, MIN // -1 == MIN (it wraps), MIN % -1 == 0. C truncates, so the sign is fixed where
# the remainder and the divisor disagree. Narrow types compute in int and wrap on return, as numpy
# does. Vectors do the same lane by lane with masks (GCC's vector `/` traps on a zero lane, and
# the padding lanes of a 3-lane vector hold garbage).
_INT_FLOORDIV = """\
static inline {T} {name}({T} a, {T} b) {{
  {T} d = (b == 0) | ((a == {MIN}) & (b == -1)) ? 1 : b;
  {T} q = a / d, r = a % d;
  q = (r != 0) & ((r < 0) != (d < 0)) ? q - 1 : q;
  return b == 0 ? 0 : q;
}}"""

_INT_FLOORMOD = """\
static inline {T} {name}({T} a, {T} b) {{
  {T} d = (b == 0) | (b == -1) ? 1 : b;
  {T} r = a % d;
  return (r != 0) & ((r < 0) != (d < 0)) ? r + d : r;
}}"""

_UINT_FLOORDIV = """\
static inline {T} {name}({T} a, {T} b) {{
  {T} d = b == 0 ? 1 : b;
  return b == 0 ? 0 : a / d;
}}"""

_UINT_FLOORMOD = """\
static inline {T} {name}({T} a, {T} b) {{ return a % (b == 0 ? 1 : b); }}"""

# The same on vectors; {M} is the mask type (signed lanes as wide as T's).
_VEC_INT_FLOORDIV = """\
static inline {T} {name}({T} a, {T} b) {{
  {M} zero = b == 0, bad = zero | ((a == {MIN}) & (b == -1));
  {T} d = (b & ~bad) | (bad & 1);
  {T} q = a / d, r = a - q * d;
  return (q + ((r != 0) & ((r ^ d) < 0))) & ~zero;
}}"""

_VEC_INT_FLOORMOD = """\
static inline {T} {name}({T} a, {T} b) {{
  {M} bad = (b == 0) | (b == -1);
  {T} d = (b & ~bad) | (bad & 1);
  {T} r = a % d;
  return r + (d & ((r != 0) & ((r ^ d) < 0)));
}}"""

_VEC_UINT_FLOORDIV = """\
static inline {T} {name}({T} a, {T} b) {{
  {T} zero = ({T})(b == 0);
  return (a / (b | (zero & 1))) & ~zero;
}}"""

_VEC_UINT_FLOORMOD = """\
static inline {T} {name}({T} a, {T} b) {{ return a % (b | (({T})(b == 0) & 1)); }}"""

# A kernel's status (ember.codegen.entry): int64_t status[3], all 0 while nothing went wrong.
# Checked mode: the same result, and a division by zero stores 1 to status[0] (atomically: the
# lanes of one call may run on several OpenMP threads).
_CHECKED = """\
static inline {T} {name}({T} a, {T} b, int64_t* status) {{
  int zero = 0;
  for (int l = 0; l < {lanes}; ++l) zero |= {lane} == 0;
  if (__builtin_expect(zero, 0)) __atomic_store_n(status, 1, __ATOMIC_RELAXED);
  return {plain}(a, b);
}}"""

# The loop IR's INDEX intrinsic: an index i of an axis of n, negative counting from the end; one
# out of range gives 0 (inside the axis: nothing is read or written outside a tensor) and the
# first thread to see one stores 2 to status[0], i to status[1] and n to status[2]. That path is a
# cold function of its own, so the loop around the test keeps its registers (inlined, GCC
# computed the loop's index arithmetic twice around it).
_INDEX = """\
__attribute__((cold, noinline)) static int64_t ember_index_failed(int64_t i, int64_t n, int64_t* status) {
  int64_t none = 0;
  if (__atomic_compare_exchange_n(status, &none, 2, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    status[1] = i;
    status[2] = n;
  }
  return 0;
}

static inline int64_t ember_index(int64_t i, int64_t n, int64_t* status) {
  int64_t w = i < 0 ? i + n : i;
  return __builtin_expect((uint64_t)w < (uint64_t)n, 1) ? w : ember_index_failed(i, n, status);
}"""

# A call's OpenMP threads (a kernel's launcher, a model's entry): ember_enter_threads(n) gives the
# calling thread n threads when n > 0 and returns its setting before; ember_leave_threads, the
# cleanup of the variable that holds it, gives that setting back when the call returns, however it
# returns. The setting is the calling thread's own (torch.set_num_threads sets the same one).
_THREADS = """\
static inline int ember_enter_threads(int n) {
#ifdef _OPENMP
  if (n <= 0) return 0;
  int before = omp_get_max_threads();
  if (before != n) omp_set_num_threads(n);
  return before;
#else
  (void)n;
  return 0;
#endif
}
static inline void ember_leave_threads(const int* before) {
#ifdef _OPENMP
  if (*before > 0 && *before != omp_get_max_threads()) omp_set_num_threads(*before);
#else
  (void)before;
#endif
}"""


def enter_threads(count: str) -> str:
    """The C declaration that starts a function: the rest of the call runs on `count` (an int
    expression: 0 keeps the calling thread's setting) OpenMP threads, and the calling thread's
    setting comes back when the function returns (the helpers: `CPrelude.threads`)."""
    return (f"const int ember_threads_before __attribute__((cleanup(ember_leave_threads))) = "
            f"ember_enter_threads({count});")


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

    def widen_int32(self, elem: str, lanes: int) -> str:
        """`int32xN ember_widen_<elem>x<N>(elemxN v)`: 8- or 16-bit integer lanes as int32, by one
        vpmovzx/vpmovsx where the target has the vector width (GCC 12 widens a 16-lane
        __builtin_convertvector of bytes in 8-lane pieces and lane inserts), twice the width at a
        time elsewhere."""
        t, v, bits = self.vec("int32", lanes), self.vec(elem, lanes), dt.bits(elem)
        name = f"ember_widen_{elem}x{lanes}"
        portable = f"__builtin_convertvector(v, {self.vec(elem.replace('8', '16'), lanes)})" if bits == 8 else "v"
        unit = {16: ("__AVX512F__", "_mm512"), 8: ("__AVX2__", "_mm256")}.get(lanes)
        if unit is None or lanes * bits < 128:  # (8 bytes: no vector type of the intrinsic's operand)
            return self._helper(name, lambda: (
                f"static inline {t} {name}({v} v) {{ return __builtin_convertvector({portable}, {t}); }}"))
        feature, prefix = unit
        operand = f"__m{lanes * bits}i"
        call = f"{prefix}_cvtep{'u' if elem.startswith('u') else 'i'}{bits}_epi32(({operand})v)"
        return self._helper(name, lambda: (
            f"#if defined({feature})\n#include <immintrin.h>\n#endif\n"
            f"static inline {t} {name}({v} v) {{\n#if defined({feature})\n  return ({t}){call};\n#else\n"
            f"  return __builtin_convertvector({portable}, {t});\n#endif\n}}"
        ))

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

    def minmax_const(self, op: str, elem: str, lanes: int) -> str:
        """`T ember_maxc_T(x, c)` (or minc) for a float vector type T: numpy.maximum(x, c) for a c
        that is not NaN, one instruction a register where the target has the width: x86's
        maxps(c, x) is c > x ? c : x, which gives x where x is NaN (ember_max_* tests for NaN
        besides: four instructions, and GCC writes a float64x16 one lane by lane). Where x equals
        c (zeros of two signs), x. GCC takes it as its builtin, the intrinsic's own body, without
        immintrin.h (whose parse is a seventh of a CNN's unit's compile: ResNet-18's 0.8 s of
        CPU a unit, 0.7 s without, the same instructions); other compilers through the intrinsic."""
        t = self.vec(elem, lanes)
        cmp = ">" if op == "max" else "<"
        name = f"ember_{op}c_{t}"
        fallback = f"{self.select(elem, lanes)}(c {cmp} x, c, x)"
        bits, suffix = lanes * dt.bits(elem), "ps" if elem == "float32" else "pd"
        units = [(f, w) for f, w in (("__AVX512F__", 512), ("__AVX__", 256)) if bits % w == 0]
        if not units:
            return self._helper(name, lambda: f"static inline {t} {name}({t} x, {t} c) {{ return {fallback}; }}")

        def body(width: int) -> str:
            piece, n = self.vec(elem, width // dt.bits(elem)), bits // width
            reg = f"__m{width}{'' if elem == 'float32' else 'd'}"
            builtin = f"__builtin_ia32_{op}{suffix}{width}"
            call = f"{builtin}_mask(b.r[i], a.r[i], b.r[i], -1, 4)" if width == 512 else f"{builtin}(b.r[i], a.r[i])"
            return (f"  union {{ {t} v; {piece} r[{n}]; }} a = {{x}}, b = {{c}};\n"
                    f"  for (int i = 0; i < {n}; ++i)\n#if {GCC}\n    a.r[i] = {call};\n#else\n"
                    f"    a.r[i] = ({piece})_mm{width}_{op}_{suffix}(({reg})b.r[i], ({reg})a.r[i]);\n#endif\n"
                    "  return a.v;\n")

        branches = "".join(f"#{'if' if k == 0 else 'elif'} defined({f})\n{body(w)}" for k, (f, w) in enumerate(units))
        guard = " || ".join(f"defined({f})" for f, _ in units)
        return self._helper(name, lambda: (
            f"#if ({guard}) && !({GCC})\n#include <immintrin.h>\n#endif\n"
            f"static inline {t} {name}({t} x, {t} c) {{\n{branches}#else\n  return {fallback};\n#endif\n}}"
        ))

    def rint_int32(self, lanes: int) -> str:
        """`ember_rint_int32x<lanes>(float32 vector x)`: (int32)rintf(x) a lane, one instruction a
        register where the target has the width (cvtps2dq rounds by the current mode, as rintf
        does) where rounding (vrndscaleps) then converting (vcvttps2dq) takes two: a requantizing
        epilogue's rint before its uint8."""
        t, i = self.vec("float32", lanes), self.vec("int32", lanes)
        name = f"ember_rint_{i}"
        rounded = self.lanewise(f"ember_rint_{t}", t, f"{t} x", lanes, "rintf(x[l])")
        fallback = f"__builtin_convertvector({rounded}(x), {i})"
        units = [(f, w) for f, w in (("__AVX512F__", 512), ("__AVX__", 256)) if lanes * 32 % w == 0]

        def body(width: int) -> str:
            n = lanes * 32 // width
            return (f"  union {{ {t} v; __m{width} r[{n}]; }} a = {{x}};\n"
                    f"  union {{ __m{width}i r[{n}]; {i} v; }} b;\n"
                    f"  for (int k = 0; k < {n}; ++k) b.r[k] = _mm{width}_cvtps_epi32(a.r[k]);\n"
                    "  return b.v;\n")

        if not units:
            return self._helper(name, lambda: f"static inline {i} {name}({t} x) {{ return {fallback}; }}")
        branches = "".join(f"#{'if' if k == 0 else 'elif'} defined({f})\n{body(w)}" for k, (f, w) in enumerate(units))
        guard = " || ".join(f"defined({f})" for f, _ in units)
        return self._helper(name, lambda: (
            f"#if {guard}\n#include <immintrin.h>\n#endif\n"
            f"static inline {i} {name}({t} x) {{\n{branches}#else\n  return {fallback};\n#endif\n}}"
        ))

    def floordiv(self, op: str, elem: str, lanes: int, checked: bool = False) -> str:
        """`ember_floordiv_<type>` / `ember_floormod_<type>`: `//` and `%` with numpy's rules
        (integers: x // 0 == x % 0 == 0, MIN // -1 == MIN), scalar or vector, of any type.
        `checked` (integers only): the helper takes a third argument, `int64_t* status`, and stores
        1 to status[0] when a divisor is 0."""
        kind = "floordiv" if op == "//" else "floormod"
        t = self.types[elem] if lanes == 1 else self.vec(elem, lanes)
        name = f"ember_{kind}_{elem if lanes == 1 else t}"
        if checked and dt.is_int(elem):
            plain = self.floordiv(op, elem, lanes)
            lane = "b" if lanes == 1 else "b[l]"
            return self._helper(f"{name}_checked", lambda: _CHECKED.format(
                T=t, name=f"{name}_checked", plain=plain, lanes=lanes, lane=lane))
        if dt.is_float(elem):
            if lanes > 1:
                lane = f"{self.floordiv(op, elem, 1)}(x[l], y[l])"
                return self.lanewise(name, t, f"{t} x, {t} y", lanes, lane)
            template = _FLOAT_FLOORDIV if op == "//" else _FLOAT_FLOORMOD
        elif elem.startswith("uint"):
            templates = (_UINT_FLOORDIV, _UINT_FLOORMOD) if lanes == 1 else (_VEC_UINT_FLOORDIV, _VEC_UINT_FLOORMOD)
            template = templates[op != "//"]
        else:
            templates = (_INT_FLOORDIV, _INT_FLOORMOD) if lanes == 1 else (_VEC_INT_FLOORDIV, _VEC_INT_FLOORMOD)
            template = templates[op != "//"]
        f = "f" if elem == "float32" else ""
        minimum = f"INT{dt.bits(elem)}_MIN" if elem in SIGNED_INTS else ""
        mask = self.mask(dt.bits(elem), lanes) if lanes > 1 else ""
        return self._helper(name, lambda: template.format(T=t, name=name, f=f, MIN=minimum, M=mask))

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

    def index(self) -> str:
        """`int64_t ember_index(int64_t i, int64_t n, int64_t* status)`: the INDEX intrinsic."""
        return self._helper("ember_index", lambda: _INDEX)

    def threads(self) -> None:
        """The helpers of `enter_threads`."""
        self._helper("ember_enter_threads", lambda: _THREADS)

    def padded_bytes(self) -> str:
        """`size_t ember_padded_bytes(int64_t count, size_t size)`: bytes for aligned_alloc at the
        unit's alignment (a multiple of it)."""
        name = "ember_padded_bytes"
        return self._helper(name, lambda: (
            f"static inline size_t {name}(int64_t count, size_t size) {{\n"
            "  size_t bytes = count > 0 ? (size_t)count * size : 1;\n"
            f"  return (bytes + {self.align - 1}) / {self.align} * {self.align};  "
            "/* aligned_alloc wants a multiple of the alignment */\n}"
        ))

    def thread_scratch(self) -> str:
        """`void* ember_thread_scratch(size_t bytes)`: this thread's scratch of at least `bytes`
        at the unit's alignment, kept for the thread's life and grown when asked for more. A
        routine called per tile (a panel's dequantized or repacked codes) takes it instead of
        aligned_alloc and free per call, which returned the pages to the system above malloc's
        trim threshold and faulted them in again at every call."""
        name = "ember_thread_scratch"
        return self._helper(name, lambda: (
            f"static void* {name}(size_t bytes) {{\n"
            "  static __thread void* buf = NULL;\n"
            "  static __thread size_t cap = 0;\n"
            "  if (bytes > cap) {\n"
            "    free(buf);\n"
            f"    cap = (bytes + {self.align - 1}) / {self.align} * {self.align};\n"
            f"    buf = aligned_alloc({self.align}, cap);\n"
            "  }\n"
            "  return buf;\n}"
        ))


def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


def scalar_floordiv(op: str, elem: str, name: str, ctype: str) -> str:
    """The text of the scalar helper `name`: numpy's `//` (op "//") or `%` on `elem`, in C that
    any C-like target compiles (CUDA qualifies it as a device function)."""
    if dt.is_float(elem):
        template = _FLOAT_FLOORDIV if op == "//" else _FLOAT_FLOORMOD
    elif elem.startswith("uint"):
        template = _UINT_FLOORDIV if op == "//" else _UINT_FLOORMOD
    else:
        template = _INT_FLOORDIV if op == "//" else _INT_FLOORMOD
    minimum = f"INT{dt.bits(elem)}_MIN" if elem in SIGNED_INTS else ""
    return template.format(T=ctype, name=name, f="f" if elem == "float32" else "", MIN=minimum, M="")

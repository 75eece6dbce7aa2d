"""numpy's floor division and modulo (`//` and `%`) in C, as helpers of a unit's prelude.

Floats follow npy_divmod (fmod, then the sign fixed where the remainder and the divisor
disagree); integers are branch-free, and a divisor that would trap is replaced before dividing,
so x // 0 == x % 0 == 0 and MIN // -1 == MIN (it wraps) as in numpy. Vectors do the same lane by
lane with masks; float vectors go lane by lane through the scalar helper. A checked helper also
records a division by zero in the kernel's status. `scalar_floordiv` is the scalar text alone, for
the other C-like targets (CUDA).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tir import dtype as dt

if TYPE_CHECKING:
    from .c_prelude import CPrelude

SIGNED_INTS = ("int8", "int16", "int32", "int64")

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


def floordiv(lib: CPrelude, op: str, elem: str, lanes: int, checked: bool = False) -> str:
    """`ember_floordiv_<type>` / `ember_floormod_<type>`: `//` and `%` with numpy's rules
    (integers: x // 0 == x % 0 == 0, MIN // -1 == MIN), scalar or vector, of any type.
    `checked` (integers only): the helper takes a third argument, `int64_t* status`, and stores
    1 to status[0] when a divisor is 0."""
    kind = "floordiv" if op == "//" else "floormod"
    t = lib.types[elem] if lanes == 1 else lib.vec(elem, lanes)
    name = f"ember_{kind}_{elem if lanes == 1 else t}"
    if checked and dt.is_int(elem):
        plain = floordiv(lib, op, elem, lanes)
        lane = "b" if lanes == 1 else "b[l]"
        return lib._helper(f"{name}_checked", lambda: _CHECKED.format(
            T=t, name=f"{name}_checked", plain=plain, lanes=lanes, lane=lane))
    if dt.is_float(elem):
        if lanes > 1:
            lane = f"{floordiv(lib, op, elem, 1)}(x[l], y[l])"
            return lib.lanewise(name, t, f"{t} x, {t} y", lanes, lane)
        template = _FLOAT_FLOORDIV if op == "//" else _FLOAT_FLOORMOD
    elif elem.startswith("uint"):
        templates = (_UINT_FLOORDIV, _UINT_FLOORMOD) if lanes == 1 else (_VEC_UINT_FLOORDIV, _VEC_UINT_FLOORMOD)
        template = templates[op != "//"]
    else:
        templates = (_INT_FLOORDIV, _INT_FLOORMOD) if lanes == 1 else (_VEC_INT_FLOORDIV, _VEC_INT_FLOORMOD)
        template = templates[op != "//"]
    f = "f" if elem == "float32" else ""
    minimum = f"INT{dt.bits(elem)}_MIN" if elem in SIGNED_INTS else ""
    mask = lib.mask(dt.bits(elem), lanes) if lanes > 1 else ""
    return lib._helper(name, lambda: template.format(T=t, name=name, f=f, MIN=minimum, M=mask))


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

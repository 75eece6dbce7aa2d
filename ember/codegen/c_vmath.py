"""Vector math for generated C: exp, log, tanh, erf, sigmoid, pow, expm1 and log1p of float32 lanes (float16
computes in float32), in C with GCC vector extensions, so that a kernel's math vectorizes
instead of calling libm lane by lane.

Each function is one branch-free C template over a vector type of any width: both sides of
every case are computed and the lanes choose with mask selects. A scalar (a loop's tail, or a
kernel that is not vectorized) runs the same template on a vector of one lane, so a value never
depends on whether it fell in a vector body or in a tail: the operations are the same, in the
same order, and GCC contracts them to FMA the same way at every width (the tests check that the
bits agree; a NaN's sign and payload aside, which are whichever operand the CPU propagates).

The algorithms are the field's usual ones (range reduction, then a polynomial fitted to the
reduced range; coefficients are float32 minimax fits, rounded one at a time and the rest refitted):

- exp: x = n ln2 + r, |r| <= ln2/2, ln2 in two parts (n ln2_hi is exact for |n| <= 150);
  e^r = 1 + r + r^2 P(r), degree 4; 2^n as two factors so that results near overflow and
  subnormal results round once, correctly. Beyond [-104, 89] the result is 0 or inf: x is
  clamped to 89, and below -104 replaced by 0 (the lane's result by 0) so that no lane goes
  through subnormal arithmetic, which costs a CPU assist of ~100 cycles; so is |x| < 2^-30, whose
  e^x rounds to 1 (subnormal inputs made exp and sigmoid 2.5 times as slow, and tanh 1.5 to 2.8
  times: its e^{2|x|}; a few more of its operations meet subnormals, 1.3 times, where skipping
  them cost a tenth of tanh's time on normal inputs).
- log: x = 2^e m, m in [sqrt(1/2), sqrt(2)) (subnormal x is scaled by 2^23 first);
  log(m) = f + f^2 Q(f), f = m - 1 exact, degree 8; log(x) = e ln2 + log(m).
- tanh: of |x|, then the sign of x: |x| + |x|^3 P(x^2) below 0.625, where 1 - 2 / (e^{2|x|} + 1)
  would cancel; that formula above.
- erf: x + x P(x^2) for |x| < 0.875; above, 1 - e^{-x^2} R(|x| - 2) with the sign of x, where
  R fits erfc(x) e^{x^2} on [0.875, 4] (|x| is clamped to 4: erf(4) is 1 in float32).
- sigmoid: e = e^{-|x|}, then 1 / (1 + e) for x >= 0 and e / (1 + e) below, so that tiny and
  subnormal results keep their precision where 1 / (1 + e^{-x}) would give 0.
- expm1: as exp, 2^n (e^r - 1) + (2^n - 1), for x in [-30, 10] (-1 below, exp(x) - 1 above), and
  x itself for |x| < 2^-24. log1p: log(u) (x / (u - 1)), u = 1 + x, which corrects u's rounding.
- pow: e^{y log|x|} in double (log through atanh, exp as above, Taylor series), rounded once to
  float32; then C's rules: the sign of an odd integer y for x < 0, NaN for any other y there,
  pow(1, y) = pow(x, 0) = 1 (NaN or not), pow(-1, +-inf) = 1.

Each function is within 4 ULP of the correctly rounded result (pow within 1) on sweeps of the
float32 range (tests/codegen/test_vector_math.py; benchmarks/vector_math.py prints the table),
and keeps NaN, infinities, -0.0 and the log(0) = -inf, log(x < 0) = NaN conventions. float64
keeps libm (lane by lane).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .c_prelude import CPrelude

# the intrinsics computed here, per compute type
VECTOR_MATH = {"float32": ("exp", "log", "tanh", "erf", "sigmoid", "pow", "expm1", "log1p")}
USES = {"tanh": "exp", "erf": "exp", "sigmoid": "exp", "expm1": "exp", "log1p": "log"}  # the helper each calls

ARITY = {"pow": 2}  # the others take one argument


def _poly(var: str, coeffs: tuple[str, ...]) -> str:
    """Horner's scheme of coefficients (lowest degree first) in `var`, as a C expression."""
    code = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        code = f"{c} + {var} * ({code})"
    return code


# float32 fits, lowest degree first, of the relative error of the result: (e^r - 1 - r) / r^2 on
# |r| <= ln2/2; (log(1 + f) - f) / f^2 on [sqrt(1/2) - 1, sqrt(2) - 1]; (tanh(x) - x) / x^3 and
# erf(x) / x - 1 as polynomials in x^2 on |x| <= 0.625 and 0.875; erfc(x) e^{x^2} in x - 2 on
# [0.875, 4]. Weighted least squares reweighted toward minimax (Lawson), each coefficient rounded
# to float32 in turn and the higher ones refitted: benchmarks/vector_math_fit.py prints them.
_EXP_P = ("0x1.fffffcp-2f", "0x1.555492p-3f", "0x1.5558aep-5f", "0x1.12397cp-7f", "0x1.6a4f52p-10f")
_LOG_Q = ("-0x1.fffff8p-2f", "0x1.55555p-2f", "-0x1.000432p-2f", "0x1.99a418p-3f", "-0x1.5425c2p-3f",
          "0x1.226e36p-3f", "-0x1.0f3ffep-3f", "0x1.085f38p-3f", "-0x1.38411ep-4f")
_TANH_P = ("-0x1.555554p-2f", "0x1.11107ap-3f", "-0x1.b9f18cp-5f", "0x1.63a5b2p-6f", "-0x1.0c61c2p-7f",
           "0x1.1a3684p-9f")
_ERF_P = ("0x1.06eba8p-3f", "-0x1.81274p-2f", "0x1.ce2d5ap-4f", "-0x1.b7ff38p-6f", "0x1.542c6ap-8f",
          "-0x1.a491cp-11f", "0x1.48ed6ep-14f")
_ERFC_R = ("0x1.058672p-2f", "-0x1.b5703p-4f", "0x1.567272p-5f", "-0x1.faa1d6p-7f", "0x1.649258p-8f",
           "-0x1.dfb152p-10f", "0x1.3692e4p-11f", "-0x1.8a9f38p-13f", "0x1.d26afap-15f", "-0x1.a63c84p-17f",
           "0x1.75c1ap-18f", "-0x1.5f0274p-19f")

# pow works in double (float32 pow is then within a rounding of the exact value): Taylor series
# are enough there. e^r for |r| <= ln2/2 to degree 10; log(m) = 2 atanh(s), s = f / (2 + f),
# |s| <= 0.172, to s^15.
_EXP64_TAYLOR = tuple(repr(1 / math.factorial(k)) for k in range(2, 11))
_ATANH_SERIES = tuple(repr(1 / (2 * k + 1)) for k in range(1, 8))

# Bodies over T (the float vector), I (the int vector of its width), S (the select helper:
# S(mask, a, b)) and EXP, LOG (this width's exp and log); pow also over D, L and SD, the same for
# double. Scalar constants broadcast; (T){0} is a vector of zeros. Integer arithmetic never
# overflows (signed overflow is undefined even in vector lanes), NaN lanes included.
_BODIES = {
    "exp": f"""\
  I zero = x < -104.0f;  /* e^x rounds to 0: computed on 0 instead, so that no lane goes through
                           subnormals (a slow assist of the CPU: softmax's -inf are common) */
  I tiny = (T)((I)x & 0x7fffffff) < 0x1p-30f;  /* e^x rounds to 1 (|x| < 2^-25): computed on 0, as
                                                 subnormal x would go through subnormals too */
  x = S(x > 89.0f, (T){{0}} + 89.0f, S(zero | tiny, (T){{0}}, x));  /* NaN compares false and stays */
  T k = x * 0x1.715476p+0f + 0x1.8p23f;  /* n = round(x / ln2) in the low bits of k */
  T n = k - 0x1.8p23f;
  T r = x - n * 0x1.62e4p-1f;
  r = r - n * 0x1.7f7d1cp-20f;
  T p = 1.0f + r + r * r * ({_poly("r", _EXP_P)});
  I ni = ((I)k & 0x7fffff) - 0x400000, h = ni >> 1;  /* n = h + (n - h), both within float's range */
  T s1 = (T)(((h + 127) & 0xff) << 23), s2 = (T)(((ni - h + 127) & 0xff) << 23);
  return S(zero, (T){{0}}, p * s1 * s2);""",
    "log": f"""\
  I sub = x < 0x1p-126f;  /* subnormal (or not positive: fixed below) */
  T xs = S(sub, x * 0x1p23f, x);
  I ix = ((I)xs & 0x7fffffff) - 0x3f3504f3;  /* x = 2^e m, m in [sqrt(1/2), sqrt(2)) */
  T e = __builtin_convertvector((ix >> 23) - (sub & 23), T);
  T f = (T)((ix & 0x007fffff) + 0x3f3504f3) - 1.0f;
  T r = f + (f * f * ({_poly("f", _LOG_Q)}) + e * 0x1.7f7d1cp-20f);
  r = r + e * 0x1.62e4p-1f;
  r = S(x == INFINITY, x, r);
  r = S(x == 0.0f, (T){{0}} - INFINITY, r);  /* log(+-0) = -inf */
  return S((x < 0.0f) | (x != x), (T){{0}} + NAN, r);  /* log(x < 0) and log(NaN): NaN */""",
    "tanh": f"""\
  T a = (T)((I)x & 0x7fffffff), a2 = a * a;  /* tanh(|x|), then the sign of x (-0 included) */
  T small = a + a * a2 * ({_poly("a2", _TANH_P)});
  T large = 1.0f - 2.0f / (EXP(a + a) + 1.0f);
  return (T)((I)S(a < 0.625f, small, large) | ((I)x & ~0x7fffffff));""",
    "erf": f"""\
  T a = (T)((I)x & 0x7fffffff), x2 = x * x;
  a = S(a > 4.0f, (T){{0}} + 4.0f, a);  /* erf(4) is 1 in float32 */
  T small = x + x * ({_poly("x2", _ERF_P)});
  T t = a - 2.0f;
  T large = 1.0f - EXP(-(a * a)) * ({_poly("t", _ERFC_R)});
  large = (T)((I)large | ((I)x & ~0x7fffffff));  /* the sign of x */
  return S(a < 0.875f, small, large);""",
    "pow": f"""\
  D xd = __builtin_convertvector(x, D), a = (D)((L)xd & 0x7fffffffffffffff);
  /* log|x| in double: a = 2^e m, m in [sqrt(1/2), sqrt(2)) (a float32 is never subnormal here) */
  L ia = (L)a - 0x3fe6a09e667f3bcd;
  D e = __builtin_convertvector(ia >> 52, D);
  D f = (D)((ia & 0xfffffffffffff) + 0x3fe6a09e667f3bcd) - 1.0, s = f / (2.0 + f), s2 = s * s;
  D lg = e * 0x1.62e42fefa39efp-1 + (s + s + 2.0 * s * s2 * ({_poly("s2", _ATANH_SERIES)}));
  lg = SD(a == 0.0, (D){{0}} - INFINITY, SD(a == INFINITY, a, SD(a != a, a, lg)));
  /* e^t in double, t = y log|x| clamped to where float32 is 0 or inf beyond */
  D t = __builtin_convertvector(y, D) * lg;
  t = SD(t > 200.0, (D){{0}} + 200.0, SD(t < -200.0, (D){{0}} - 200.0, t));
  D k = t * 0x1.71547652b82fep+0 + 0x1.8p52, n = k - 0x1.8p52;
  D r = t - n * 0x1.62e42fee00000p-1;
  r = r - n * 0x1.a39ef35793c76p-33;
  D p = 1.0 + r + r * r * ({_poly("r", _EXP64_TAYLOR)});
  p = p * (D)(((((L)k & 0xfffffffffffff) - 0x8000000000000 + 1023) & 0x7ff) << 52);
  T z = __builtin_convertvector(p, T);
  /* x < 0: y an integer (every float32 from 2^24 is an even one) gives the sign of its parity */
  T ay = (T)((I)y & 0x7fffffff), yc = S(ay < 0x1p24f, y, (T){{0}});
  I yi = __builtin_convertvector(yc, I);
  I integer = __builtin_convertvector(yi, T) == yc;
  z = S(((I)x < 0) & -(yi & 1) & integer, -z, z);  /* (-inf and -0 to a non-integer: positive) */
  z = S((x < 0.0f) & (x > -INFINITY) & ~integer, (T){{0}} + NAN, z);
  /* pow(1, y) = pow(x, 0) = 1, NaN or not; pow(-1, +-inf) = 1 */
  T ax = (T)((I)x & 0x7fffffff);
  return S((x == 1.0f) | (y == 0.0f) | ((ax == 1.0f) & (ay == INFINITY)), (T){{0}} + 1.0f, z);""",
    "expm1": f"""\
  T c = S(x < -30.0f, (T){{0}} - 30.0f, S(x > 10.0f, (T){{0}} + 10.0f, x));  /* -1 and exp(x) - 1 beyond */
  T k = c * 0x1.715476p+0f + 0x1.8p23f, n = k - 0x1.8p23f;  /* as in exp, n in [-44, 15] */
  T r = c - n * 0x1.62e4p-1f;
  r = r - n * 0x1.7f7d1cp-20f;
  T q = r + r * r * ({_poly("r", _EXP_P)});  /* e^r - 1 */
  T s = (T)(((((I)k & 0x7fffff) - 0x400000 + 127) & 0xff) << 23);
  T y = S(x > 10.0f, EXP(x) - 1.0f, s * q + (s - 1.0f));
  return S((T)((I)x & 0x7fffffff) < 0x1p-24f, x, y);  /* x itself when tiny: -0 and subnormals */""",
    "log1p": """\
  T u = 1.0f + x;  /* x / (u - 1) corrects the rounding of u */
  T y = LOG(u) * (x / (u - 1.0f));
  return S((u == 1.0f) | (x == INFINITY), x, y);""",
    "sigmoid": """\
  T e = EXP(-(T)((I)x & 0x7fffffff));
  return S(x >= 0.0f, (T){0} + 1.0f, e) / (1.0f + e);""",
}


def vector_math(lib: CPrelude, name: str, elem: str, lanes: int) -> str:
    """The helper that computes intrinsic `name` (in VECTOR_MATH[elem]) of `lanes` values:
    `float32xN ember_<name>_float32xN(float32xN x)` for a vector, `float ember_<name>_float32(float x)`
    for a scalar, which runs the code of a one-lane vector."""
    if lanes > 1:
        return _vector_helper(lib, name, elem, lanes)
    one, s, t = _vector_helper(lib, name, elem, 1), lib.types[elem], lib.vec(elem, 1)
    wrapper = f"ember_{name}_{elem}"
    xs = ("x", "y")[:ARITY.get(name, 1)]
    params, args = ", ".join(f"{s} {v}" for v in xs), ", ".join(f"({t}){{{v}}}" for v in xs)
    return lib._helper(wrapper, lambda: f"static inline {s} {wrapper}({params}) {{ return {one}({args})[0]; }}")


def _vector_helper(lib: CPrelude, name: str, elem: str, lanes: int) -> str:
    """`ember_<name>_<elem>x<lanes>`, its body from _BODIES (after the helpers it calls)."""
    t = lib.vec(elem, lanes)
    helper = f"ember_{name}_{t}"

    def make() -> str:
        names = {"T": t, "I": lib.mask(32, lanes), "S": lib.select(elem, lanes)}
        if name in USES:
            names[USES[name].upper()] = _vector_helper(lib, USES[name], elem, lanes)
        if name == "pow":
            names |= {"D": lib.vec("float64", lanes), "L": lib.mask(64, lanes), "SD": lib.select("float64", lanes)}
        body = re.sub(r"\b(T|I|S|D|L|SD|EXP|LOG)\b", lambda m: names[m.group()], _BODIES[name])
        params = ", ".join(f"{t} {v}" for v in ("x", "y")[:ARITY.get(name, 1)])
        return f"static inline {t} {helper}({params}) {{\n{body}\n}}"

    return lib._helper(helper, make)

"""The C of the gemm_nbits routine (ember.tir.routines: the calling convention; ember.tir.nbits:
the packed layout): x w for M rows of x and one 32-column panel of int8 or int4 codes, the codes
dequantized in registers.

A decode step's GEMV (M < GEMM_NBITS_STREAM) streams the panel's codes once per row: each row of
codes is widened to int32 and converted to float32 in registers (int4: the low and high nibbles
of a byte are two columns) and multiplied by a broadcast x[k], into four sets of accumulators
(k mod 4) so that the FMAs' latency does not bound the stream. int8's per-channel scale
multiplies the sum once at the end (per group: each group's sum); int4 sums each group of G rows on its own and adds
scale * (sum - 8 * sum(x of the group)) (symmetric) or scale * sum + offset * sum(x of the group)
(zero points), so the dequantization costs per group, not per weight. Nothing but the codes and
the scales is read: no dequantized copy of the weight exists.

More rows (a prefill) dequantize the panel once into a (K, 32) float32 tile (the reference's
formulas, ember.tir.nbits.dequantize), which a register tile of ROWS rows x 32 columns then
reads for every block of rows: its bytes are K x 128, in L2 for a transformer's K.

Vectors are W = min(lanes, 16) float32 lanes (at least 4): the target's width, so AVX-512 where
the target has it (the compiler turns the conversions into vpmovsxbd / vpmovzxbd and vcvtdq2ps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tir.nbits import PANEL
from ..tir.routines import GEMM_NBITS_STREAM
from . import c_runtime

if TYPE_CHECKING:
    from .c_prelude import CPrelude

ROWS = 4  # rows of the prefill's register tile (x 32 columns)

_BODY = """\
static void {name}(const float* restrict x, const {code}* restrict codes, const float* restrict scales,{params}
                   float* restrict out, int64_t M, int64_t K, int64_t ncols, int64_t x_rs, int64_t o_rs,
                   int64_t s_rs) {{
  enum {{ W = {lanes}, NV = {panel} / W, G = {group}, R = {rows} }};
  const V zero = (V){{0}};
  (void)s_rs;
  if (M < {stream}) {{
    for (int64_t m = 0; m < M; ++m) {{
      const float* restrict xr = x + m * x_rs;
      V acc[NV];
      for (int t = 0; t < NV; ++t) acc[t] = zero;
{stream_body}      float row[{panel}];
      for (int t = 0; t < NV; ++t) *(U*)(row + t * W) = acc[t]{bias_add};
      for (int64_t c = 0; c < ncols; ++c) out[m * o_rs + c] = row[c];
    }}
    return;
  }}
  float* tile = {scratch}(sizeof(float) * {panel} * (size_t)K);  /* this thread's */
{dequant_body}  for (int64_t m0 = 0; m0 < M; m0 += R) {{
    int64_t nr = M - m0 < R ? M - m0 : R;
    V acc[R][NV];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < NV; ++t) acc[r][t] = zero;
    if (nr == R) {{
      for (int64_t k = 0; k < K; ++k) {{
        V b[NV];
        for (int t = 0; t < NV; ++t) b[t] = *(const V*)(tile + k * {panel} + t * W);
#pragma GCC unroll {rows}
        for (int r = 0; r < R; ++r) {{
          float a = x[(m0 + r) * x_rs + k];
          for (int t = 0; t < NV; ++t) acc[r][t] += a * b[t];
        }}
      }}
    }} else {{
      for (int64_t k = 0; k < K; ++k)
        for (int64_t r = 0; r < nr; ++r) {{
          float a = x[(m0 + r) * x_rs + k];
          for (int t = 0; t < NV; ++t) acc[r][t] += a * *(const V*)(tile + k * {panel} + t * W);
        }}
    }}
    for (int64_t r = 0; r < nr; ++r) {{
      float row[{panel}];
      for (int t = 0; t < NV; ++t) *(U*)(row + t * W) = acc[r][t]{bias_add};
      for (int64_t c = 0; c < ncols; ++c) out[(m0 + r) * o_rs + c] = row[c];
    }}
  }}
}}"""

# int8: acc = scale * sum_k x[k] q[k], four partial sums (k mod 4)
_STREAM8 = """\
      V part[4][NV];
      for (int u = 0; u < 4; ++u)
        for (int t = 0; t < NV; ++t) part[u][t] = zero;
      int64_t k = 0;
      for (; k + 4 <= K; k += 4)
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) {
          float a = xr[k + u];
          for (int t = 0; t < NV; ++t)
            part[u][t] += a * __builtin_convertvector(WIDEN(codes + (k + u) * PANEL + t * W), V);
        }
      for (; k < K; ++k)
        for (int t = 0; t < NV; ++t)
          part[0][t] += xr[k] * __builtin_convertvector(WIDEN(codes + k * PANEL + t * W), V);
      for (int t = 0; t < NV; ++t)
        acc[t] = (part[0][t] + part[1][t] + part[2][t] + part[3][t]) * *(const U*)(scales + t * W);
"""

# int8 per group (Q8_0): each group's sum in four partial sums, scaled once
_STREAM8G = """\
      for (int64_t g = 0; g < K / G; ++g) {
        const float* restrict xg = xr + g * G;
        V part[4][NV];
        for (int u = 0; u < 4; ++u)
          for (int t = 0; t < NV; ++t) part[u][t] = zero;
        const int8_t* restrict cg = codes + g * G * PANEL;
        for (int k = 0; k < G; k += 4)
#pragma GCC unroll 4
          for (int u = 0; u < 4; ++u) {
            float a = xg[k + u];
            for (int t = 0; t < NV; ++t)
              part[u][t] += a * __builtin_convertvector(WIDEN(cg + (k + u) * PANEL + t * W), V);
          }
        for (int t = 0; t < NV; ++t)
          acc[t] += (part[0][t] + part[1][t] + part[2][t] + part[3][t]) * *(const U*)(scales + g * s_rs + t * W);
      }
"""

# int4: per group, sum_k x[k] q[k] in four partial sums, then scaled (and offset) once
_STREAM4 = """\
      for (int64_t g = 0; g < K / G; ++g) {
        const float* restrict xg = xr + g * G;
        V xv = zero;
        for (int k = 0; k < G; k += W) xv += *(const U*)(xg + k);
        float xsum = 0.0f;
        for (int i = 0; i < W; ++i) xsum += xv[i];
        V part[4][NV];
        for (int u = 0; u < 4; ++u)
          for (int t = 0; t < NV; ++t) part[u][t] = zero;
        const uint8_t* restrict cg = codes + g * G * (PANEL / 2);
        for (int k = 0; k < G; k += 4)
#pragma GCC unroll 4
          for (int u = 0; u < 4; ++u) {
            float a = xg[k + u];
            for (int t = 0; t < NV / 2; ++t) {
              IV b = WIDEN(cg + (k + u) * (PANEL / 2) + t * W);
              part[u][t] += a * __builtin_convertvector(b & 15, V);
              part[u][t + NV / 2] += a * __builtin_convertvector(b >> 4, V);
            }
          }
        for (int t = 0; t < NV; ++t) {
          V sum = part[0][t] + part[1][t] + part[2][t] + part[3][t];
          V s = *(const U*)(scales + g * s_rs + t * W);
          acc[t] += {group_term};
        }
      }
"""

# WIDEN(p): W codes at p as an int32 vector, by the x86 instruction where the target has it (GCC
# turns a portable __builtin_convertvector of bytes into one byte at a time)
_WIDEN = """\
#if W_ == 16 && defined(__AVX512F__)
#include <immintrin.h>
#define WIDEN(p) ((IV)_mm512_cvt{ext}8_epi32(_mm_loadu_si128((const __m128i*)(p))))
#elif W_ == 8 && defined(__AVX2__)
#include <immintrin.h>
#define WIDEN(p) ((IV)_mm256_cvt{ext}8_epi32(_mm_loadl_epi64((const __m128i*)(p))))
#else
#define WIDEN(p) __builtin_convertvector(*(const QV*)(p), IV)
#endif
"""

_DEQUANT8 = """\
  for (int t = 0; t < NV; ++t)
    for (int64_t k = 0; k < K; ++k)
      *(V*)(tile + k * PANEL + t * W) = __builtin_convertvector(WIDEN(codes + k * PANEL + t * W), V) *
                                        *(const U*)(scales + {row_group} * s_rs + t * W);
"""

_DEQUANT4 = """\
  for (int64_t k = 0; k < K; ++k) {
    int64_t g = k / G;
    for (int t = 0; t < NV / 2; ++t) {
      IV b = WIDEN(codes + k * (PANEL / 2) + t * W);
      V lo = __builtin_convertvector(b & 15, V), hi = __builtin_convertvector(b >> 4, V);
      V s0 = *(const U*)(scales + g * s_rs + t * W), s1 = *(const U*)(scales + g * s_rs + (t + NV / 2) * W);
      *(V*)(tile + k * PANEL + t * W) = {lo};
      *(V*)(tile + k * PANEL + (t + NV / 2) * W) = {hi};
    }
  }
"""


def gemm_nbits(lib: CPrelude, bits: int, group: int, offsets: bool, bias: bool, lanes: int) -> str:
    """The name of the routine's C function for this variant, for vectors of `lanes` float32
    lanes (4 to 16 used), written into the prelude the first time."""
    w = max(4, min(16, lanes))
    name = f"ember_gemm_int{bits}{f'_g{group}' if group else ''}{'_zp' if offsets else ''}{'_bias' if bias else ''}"
    name += f"_w{w}"

    def make() -> str:
        v, u = lib.vec("float32", w), lib.unaligned_vec("float32", w)
        c = lib.unaligned_vec("int8" if bits == 8 else "uint8", w)
        i = lib.vec("int32", w)
        params = (" const float* restrict offsets," if offsets else "") + \
            (" const float* restrict bias," if bias else "")
        if bits == 8:
            stream = _STREAM8G if group else _STREAM8
            dequant = _DEQUANT8.replace("{row_group}", "(k / G)" if group else "0")
        else:
            term = "s * sum + *(const U*)(offsets + g * s_rs + t * W) * xsum" if offsets else "s * (sum - 8.0f * xsum)"
            stream = _STREAM4.replace("{group_term}", term)
            if offsets:
                o0, o1 = "*(const U*)(offsets + g * s_rs + t * W)", "*(const U*)(offsets + g * s_rs + (t + NV / 2) * W)"
                lo, hi = f"s0 * lo + {o0}", f"s1 * hi + {o1}"
            else:
                lo, hi = "s0 * (lo - 8.0f)", "s1 * (hi - 8.0f)"
            dequant = _DEQUANT4.replace("{lo}", lo).replace("{hi}", hi)
        body = _BODY.format(name=name, code="int8_t" if bits == 8 else "uint8_t", params=params, lanes=w,
                            panel=PANEL, group=group, rows=ROWS, stream=GEMM_NBITS_STREAM,
                            stream_body=stream, dequant_body=dequant, scratch=c_runtime.thread_scratch(lib),
                            bias_add=" + *(const U*)(bias + t * W)" if bias else "")
        widen = _WIDEN.replace("W_", str(w)).replace("{ext}", "epi" if bits == 8 else "epu")
        return (f"#define V {v}\n#define U {u}\n#define QV {c}\n#define IV {i}\n#define PANEL {PANEL}\n{widen}{body}\n"
                "#undef V\n#undef U\n#undef QV\n#undef IV\n#undef PANEL\n#undef WIDEN")

    return lib._helper(name, make)

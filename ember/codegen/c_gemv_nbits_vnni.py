"""The C of a decode step's GEMV of int4 or int8 weights on VNNI (gemm_nbits with act
"int8_groups", ember.tir.routines) and of the quantize_groups routine that feeds it: llama.cpp's
Q4_0 x Q8_0 and Q8_0 x Q8_0 dots.

The float32 GEMV (ember.codegen.c_gemm_nbits) widens every code to a float and FMAs it, 16
weights an instruction: at one thread that is compute-bound below the memory's bandwidth (int8,
768 x 1280 from L2, one thread of a 2-core AMD EPYC: 24-25 GB/s, under the memory's share of a
thread). Here the row x comes quantized once per call of the step, per group
(ember.tir.nbits.row_group: the weights' group; int8 per channel 32), to int8 (a scale and the
sum of the codes per group), and vpdpbusd multiplies 64 code bytes by x's bytes an instruction,
summing in int32 per group (the same GEMV 58-68 GB/s, 66-78 with groups of 128). The
codes go in as vpdpbusd's unsigned operand, x's int8 as the signed one broadcast, each 4 rows k of
the panel's 32 columns permuted into its layout (the 4 rows of a column in one 32-bit lane): int4's
64 bytes (two columns a byte) by one vpermb, a mask and a shift for the two nibbles 0..15; int8's
128 bytes by two vpermt2b, the sign bit flipped (q + 128 in 0..255). The group's sum then takes
the codes' offset (int4's 8, int8's 128) times the sum of x's codes off exactly (symmetric) or adds
the offsets times it (zero points), and x's scale times the weights' scales (int8 per channel: the
same scales every group) carries it into a float32 accumulator:

    y[c] = sum_g xs_g * (s[g, c] * (sum_k xq[k] q[k, c] - 8 sum_k xq[k]))           symmetric
    y[c] = sum_g xs_g * (s[g, c] * sum_k xq[k] q[k, c] + o[g, c] * sum_k xq[k])      zero points

Where the compiler does not target VNNI and VBMI the same integer sums are scalar C (exact, slow):
the graph pass only asks for this variant on targets with them (ember.passes.quantize_rows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tir.nbits import PANEL
from .c_gemm_nbits_vnni import VNNI_INCLUDE, abs_max, activation, epi8_indices

if TYPE_CHECKING:
    from .c_prelude import CPrelude

_QUANTIZE = """\
static void {name}(const float* restrict x, int8_t* restrict xq, float* restrict meta, int64_t M, int64_t K,
                   int64_t x_rs) {{
  enum {{ G = {group} }};
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = 0; g < K / G; ++g) {{
      const float* restrict xg = x + m * x_rs + g * G;
      int8_t* restrict qg = xq + m * K + g * G;
      float top = ember_abs_max(xg, G);  /* (NaN or an infinity in the group: its scale NaN, so is the row's output) */
      float inv = top > 0.0f && top <= 3.402823466e38f ? 127.0f / top : 0.0f;
      int32_t sum = 0;
      for (int k = 0; k < G; ++k) {{
        int32_t q = (int32_t)nearbyintf(xg[k] * inv);
        qg[k] = (int8_t)q;
        sum += q;
      }}
      meta[m * 2 * (K / G) + 2 * g] = top <= 3.402823466e38f ? (top > 0.0f ? top / 127.0f : 1.0f) : __builtin_nanf("");
      meta[m * 2 * (K / G) + 2 * g + 1] = (float)sum;
    }}
}}"""

_BODY = """\
static void {name}(const float* restrict x, const int8_t* restrict xq, const float* restrict meta,
                   const {code}* restrict codes, const float* restrict scales,{params}
                   float* restrict out, int64_t M, int64_t K, int64_t ncols, int64_t x_rs, int64_t o_rs,
                   int64_t s_rs) {{
  enum {{ G = {xgroup} }};  /* x's group: an int32 sum each, scaled once */
  (void)x;
  (void)x_rs;
  for (int64_t m = 0; m < M; ++m) {{
    const int8_t* restrict xr = xq + m * K;
    const float* restrict mr = meta + m * 2 * (K / G);
    float row[32];
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VBMI__)
{constants}    __m512 y0 = _mm512_setzero_ps(), y1 = y0;
    for (int64_t g = 0; g < K / G; ++g) {{
      const {code}* restrict cg = codes + g * G * {width};
      const int8_t* restrict xg = xr + g * G;
      /* two sets of accumulators (k mod 8 below or above 4) for the latency of vpdpbusd */
      __m512i a0 = _mm512_setzero_si512(), a1 = a0, b0 = a0, b1 = a0;
      for (int k = 0; k < G; k += 8) {{
        int32_t f0, f1;
        __builtin_memcpy(&f0, xg + k, 4);
        __builtin_memcpy(&f1, xg + k + 4, 4);
        __m512i x0 = _mm512_set1_epi32(f0), x1 = _mm512_set1_epi32(f1);
{products}      }}
      a0 = _mm512_add_epi32(a0, b0);
      a1 = _mm512_add_epi32(a1, b1);
      const float* restrict s = scales + {scale_row} * s_rs;
      __m512 xs = _mm512_set1_ps(mr[2 * g]);
{group_vnni}    }}
    _mm512_storeu_ps(row, y0);
    _mm512_storeu_ps(row + 16, y1);
#else
    for (int c = 0; c < 32; ++c) row[c] = 0.0f;
    for (int64_t g = 0; g < K / G; ++g) {{
      const float* restrict s = scales + {scale_row} * s_rs;
      int32_t xsum = (int32_t)mr[2 * g + 1];
      for (int c = 0; c < 32; ++c) {{
        int32_t acc = 0;
        for (int64_t k = g * G; k < (g + 1) * G; ++k) acc += {code_scalar} * xr[k];
{group_scalar}      }}
    }}
#endif
{write}  }}
}}"""

# 64 bytes of int4 codes (rows k .. k + 3, two columns a byte) a vpermb into vpdpbusd's layout,
# the nibbles 0..15 the unsigned operand
_CONSTANTS4 = "    const __m512i idx = _mm512_set_epi8({idx}), mask = _mm512_set1_epi8(15);\n"
_PRODUCTS4 = """\
        __m512i v = _mm512_permutexvar_epi8(idx, _mm512_loadu_si512(cg + k * 16));
        __m512i w = _mm512_permutexvar_epi8(idx, _mm512_loadu_si512(cg + k * 16 + 64));
        DPBUSD(a0, _mm512_and_si512(v, mask), x0);
        DPBUSD(a1, _mm512_and_si512(_mm512_srli_epi16(v, 4), mask), x0);
        DPBUSD(b0, _mm512_and_si512(w, mask), x1);
        DPBUSD(b1, _mm512_and_si512(_mm512_srli_epi16(w, 4), mask), x1);
"""
# 128 bytes of int8 codes (rows k .. k + 3) two vpermt2b into vpdpbusd's layout (columns 0..15 and
# 16..31), the sign bit flipped: q + 128 in 0..255 the unsigned operand
_CONSTANTS8 = """\
    const __m512i first = _mm512_set_epi8({idx_first}), second = _mm512_set_epi8({idx_second});
    const __m512i flip = _mm512_set1_epi8((char)0x80);
"""
_PRODUCTS8 = """\
        const int8_t* restrict c0 = cg + k * 32;
        __m512i p = _mm512_loadu_si512(c0), q = _mm512_loadu_si512(c0 + 64);
        __m512i r = _mm512_loadu_si512(c0 + 128), t = _mm512_loadu_si512(c0 + 192);
        DPBUSD(a0, _mm512_xor_si512(_mm512_permutex2var_epi8(p, first, q), flip), x0);
        DPBUSD(a1, _mm512_xor_si512(_mm512_permutex2var_epi8(p, second, q), flip), x0);
        DPBUSD(b0, _mm512_xor_si512(_mm512_permutex2var_epi8(r, first, t), flip), x1);
        DPBUSD(b1, _mm512_xor_si512(_mm512_permutex2var_epi8(r, second, t), flip), x1);
"""

# the group's int32 sums a0 (columns 0..15) and a1 (16..31) into y0, y1: the codes' offset (int4's
# 8, int8's flipped sign bit 128) times the sum of x's codes taken off exactly
_GROUP_SYMMETRIC = """\
      __m512i offset = _mm512_set1_epi32({offset} * (int32_t)mr[2 * g + 1]);
      y0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a0, offset)), _mm512_mul_ps(_mm512_loadu_ps(s), xs), y0);
      y1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a1, offset)), _mm512_mul_ps(_mm512_loadu_ps(s + 16), xs),
                           y1);
"""
_GROUP_OFFSETS = """\
      const float* restrict o = offsets + g * s_rs;
      __m512 xsum = _mm512_set1_ps(mr[2 * g + 1]);
      y0 = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_cvtepi32_ps(a0), _mm512_loadu_ps(s),
                                           _mm512_mul_ps(_mm512_loadu_ps(o), xsum)), xs, y0);
      y1 = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_cvtepi32_ps(a1), _mm512_loadu_ps(s + 16),
                                           _mm512_mul_ps(_mm512_loadu_ps(o + 16), xsum)), xs, y1);
"""
_SCALAR_SYMMETRIC = "        row[c] += mr[2 * g] * (s[c] * (float)(acc - {offset} * xsum));\n"
_SCALAR_OFFSETS = "        row[c] += mr[2 * g] * (s[c] * (float)acc + offsets[g * s_rs + c] * (float)xsum);\n"


# a row's columns written out (bias added); with an activation, on the panel's 32 columns first
_WRITE = "    for (int64_t c = 0; c < ncols; ++c) out[m * o_rs + c] = row[c]{bias_add};\n"
_WRITE_ACTIVATED = """\
{bias}    {activation}(row);
    for (int64_t c = 0; c < ncols; ++c) out[m * o_rs + c] = row[c];
"""


def quantize_groups(lib: CPrelude, group: int) -> str:
    """The name of the quantize_groups routine's C function for this group size, written into
    the prelude once."""
    name = f"ember_quantize_groups_g{group}"
    abs_max(lib)  # (before the function that calls it)
    return lib._helper(name, lambda: _QUANTIZE.format(name=name, group=group))


def gemv_vnni(lib: CPrelude, bits: int, group: int, xgroup: int, offsets: bool, bias: bool,
              act: str | None = None) -> str:
    """The name of gemm_nbits' C function with act int8_groups for this variant: int8 or int4
    codes per `group` of rows (int8 also 0: per channel), x quantized per `xgroup` columns (int4
    and int8 per group: the same group), the activation `act` (ember.tir.nbits' ACTIVATIONS)
    on the columns written."""
    name = f"ember_gemv_q8_int{bits}{f'_g{group}' if group else ''}{f'_x{xgroup}' if xgroup != group else ''}"
    name += f"{'_zp' if offsets else ''}{'_bias' if bias else ''}{f'_{act}' if act else ''}"

    def make() -> str:
        params = (" const float* restrict offsets," if offsets else "") + \
            (" const float* restrict bias," if bias else "")
        if bits == 8:
            # byte j of the two outputs: row j % 4 and column j / 4 (+ 16), indices into 128 bytes
            constants = _CONSTANTS8.format(idx_first=epi8_indices((j % 4) * 32 + j // 4 for j in range(64)),
                                           idx_second=epi8_indices((j % 4) * 32 + 16 + j // 4 for j in range(64)))
            products, code, width, code_scalar = _PRODUCTS8, "int8_t", PANEL, "(codes[k * 32 + c] + 128)"
        else:
            # byte j of a permuted 64: row j % 4 of the four, byte j / 4 of the row (columns j / 4, j / 4 + 16)
            constants = _CONSTANTS4.format(idx=epi8_indices((j % 4) * 16 + j // 4 for j in range(64)))
            products, code, width = _PRODUCTS4, "uint8_t", PANEL // 2
            code_scalar = "((codes[k * 16 + c % 16] >> (c / 16 * 4)) & 15)"
        offset = str(128 if bits == 8 else 8)
        if act:
            add = "    for (int c = 0; c < 32; ++c) row[c] += bias[c];\n" if bias else ""
            write = _WRITE_ACTIVATED.format(bias=add, activation=activation(lib, act))
        else:
            write = _WRITE.format(bias_add=" + bias[c]" if bias else "")
        return VNNI_INCLUDE + _BODY.format(
            name=name, code=code, params=params, xgroup=xgroup, constants=constants, width=width,
            products=products, code_scalar=code_scalar, scale_row="g" if group else "0",
            group_vnni=_GROUP_OFFSETS if offsets else _GROUP_SYMMETRIC.replace("{offset}", offset),
            group_scalar=_SCALAR_OFFSETS if offsets else _SCALAR_SYMMETRIC.replace("{offset}", offset),
            write=write)

    return lib._helper(name, make)


assert PANEL == 32  # the permutation and the two accumulators are written for 32 columns

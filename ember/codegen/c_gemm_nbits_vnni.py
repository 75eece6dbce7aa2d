"""The C of gemm_nbits' int8 products (the routine with act "int8", ember.tir.routines) and of the
quantize_rows routine that feeds them: a prefill's rows quantized once to uint8, each panel's codes
multiplied by them on VNNI's vpdpbusd (64 byte products a vector instruction, four times the
float32 FMA's), where the float32 path (ember.codegen.c_gemm_nbits) dequantizes every code.

A call repacks its panel once into a (K / 4, 32, 4) int8 tile in the thread's scratch, the layout
vpdpbusd reads (four consecutive k of a column in one 32-bit lane: one vpermt2b per 64 bytes where
the target has VBMI; int4's nibbles unpacked, minus 8 when symmetric), and sums each group's
column codes (times 128: xq's offset). A register tile of R rows x 32 columns accumulates
sum_k xq[m, k] q[k, c] in int32 over a group, takes the offset's 128 colsum off exactly, and adds
it times the group's scales into float32; at the end y = s_m * that sum (+ offset_g[c] * the float32
sum of x over group g, with zero points) (+ bias). Fewer than GEMM_NBITS_STREAM rows take the
float32 routine on x.

Packed codes (act "int8_rows": ember.tir.nbits.pack_vnni, ember.passes.quantize_rows packs
constant ones at compile time) come with those sums, and int8's are that tile already: a call reads
them in place, which saves the repack and the sums (a tenth of a 64-row call on an AMD EPYC Zen 4
class core: 466 against 416 GOP/s for 64 x 3072 x 768, one thread); int4's nibbles are the tile's
two halves of each 64 bytes, unpacked by a mask and a shift (no permutation, no sums). A call of
act "int8_rows" is the whole product in one parallel region of its own: the panel function on
each (block of 64 rows, panel) of a thread's share, by blocks, each thread quantizing each of its
blocks (quantize_rows' function) into its scratch as the block's products begin, and by panels
too where the blocks are fewer than the threads (ember.tir.nbits_split: then the threads quantize
even shares of every row into the calling thread's scratch before a barrier); a residual
is added as a panel's rows are written, and glu "silu" computes the gate's and the up
projection's panels into the scratch and writes silu(gate) * up (c_vmath's sigmoid). Every M is
computed from the int8 rows (no float32 twin).

Where the compiler does not target VNNI the same integer sums are scalar C (exact, slow): the
graph pass only asks for this variant on targets with VNNI (ember.passes.quantize_rows).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..tir.gelu import SQRT_2_OVER_PI
from ..tir.nbits import PANEL
from ..tir.nbits_split import ROWS_BLOCK
from ..tir.routines import GEMM_NBITS_STREAM
from ..tir.work import PARALLEL_MIN_WORK
from . import c_runtime
from .c_gemm_nbits import gemm_nbits
from .c_vmath import vector_math

if TYPE_CHECKING:
    from .c_prelude import CPrelude

ROWS = 8  # rows of the register tile: 16 int32 accumulators of 16 lanes

_ABS_MAX = """\
static inline float ember_abs_max(const float* restrict x, int64_t n) {
  uint32_t bits = 0;  /* max |x| as the bits of |x| (ordered as the values are), which vectorizes */
  for (int64_t k = 0; k < n; ++k) {
    uint32_t b;
    __builtin_memcpy(&b, x + k, 4);
    b &= 0x7fffffffu;
    bits = b > bits ? b : bits;
  }
  float top;
  __builtin_memcpy(&top, &bits, 4);
  return top;
}"""

_QUANTIZE = """\
static void ember_quantize_rows(const float* restrict x, uint8_t* restrict xq, float* restrict meta, int64_t M,
                                int64_t K, int64_t x_rs) {
  for (int64_t m = 0; m < M; ++m) {
    const float* restrict xr = x + m * x_rs;
    float* restrict mr = meta + m * (1 + K / 32);
    float top = ember_abs_max(xr, K);  /* (NaN or an infinity in the row: its scale NaN, so is its output) */
    float inv = top > 0.0f && top <= 3.402823466e38f ? 127.0f / top : 0.0f;
    mr[0] = top <= 3.402823466e38f ? (top > 0.0f ? top / 127.0f : 1.0f) : __builtin_nanf("");
    for (int64_t k = 0; k < K; ++k) xq[m * K + k] = (uint8_t)((int32_t)nearbyintf(xr[k] * inv) + 128);
#if defined(__AVX512F__)  /* in vectors: a chain of 32 scalar adds per block was most of the routine */
    for (int64_t b = 0; b < K / 32; ++b)
      mr[1 + b] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_loadu_ps(xr + b * 32), _mm512_loadu_ps(xr + b * 32 + 16)));
#else
    for (int64_t b = 0; b < K / 32; ++b) {
      float sum = 0.0f;
      for (int k = 0; k < 32; ++k) sum += xr[b * 32 + k];
      mr[1 + b] = sum;
    }
#endif
  }
}"""

# the panel's codes as vpdpbusd reads them: tile[(k / 4) * 128 + c * 4 + k % 4] = q[k, c]
# (int4: the code minus 8 when symmetric)
_REPACK = {8: """\
#if defined(__AVX512VBMI__)
  {
    __m512i first = _mm512_set_epi8({idx_first}), second = _mm512_set_epi8({idx_second});
    for (int64_t k = 0; k < K; k += 4) {
      __m512i a = _mm512_loadu_si512(codes + k * 32), b = _mm512_loadu_si512(codes + k * 32 + 64);
      _mm512_store_si512(tile + k * 32, _mm512_permutex2var_epi8(a, first, b));
      _mm512_store_si512(tile + k * 32 + 64, _mm512_permutex2var_epi8(a, second, b));
    }
  }
#else
  for (int64_t k = 0; k < K; ++k)
    for (int c = 0; c < 32; ++c) tile[(k / 4) * 128 + c * 4 + k % 4] = codes[k * 32 + c];
#endif
""", 4: """\
#if defined(__AVX512VBMI__)
  {
    __m512i idx = _mm512_set_epi8({idx4}), mask = _mm512_set1_epi8(15), eight = _mm512_set1_epi8({minus});
    for (int64_t k = 0; k < K; k += 4) {
      __m512i v = _mm512_loadu_si512(codes + k * 16);
      __m512i lo = _mm512_sub_epi8(_mm512_and_si512(v, mask), eight);
      __m512i hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), mask), eight);
      _mm512_store_si512(tile + k * 32, _mm512_permutexvar_epi8(idx, lo));
      _mm512_store_si512(tile + k * 32 + 64, _mm512_permutexvar_epi8(idx, hi));
    }
  }
#else
  for (int64_t k = 0; k < K; ++k)
    for (int c = 0; c < 16; ++c) {
      tile[(k / 4) * 128 + c * 4 + k % 4] = (int8_t)((codes[k * 16 + c] & 15) - {minus});
      tile[(k / 4) * 128 + (c + 16) * 4 + k % 4] = (int8_t)((codes[k * 16 + c] >> 4) - {minus});
    }
#endif
"""}

# R rows' int32 sums over one group: vpdpbusd where the target has it (the accumulators named
# one by one: GCC moves an array of them between registers at every step), else scalar
_GROUP = """\
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
      __m512i {zeros};
      for (int64_t k = g0; k < g0 + GK; k += 4) {
        __m512i b0 = _mm512_loadu_si512(tile + k * 32), b1 = _mm512_loadu_si512(tile + k * 32 + 64), a;
        int32_t four;
{steps}      }
      __m512i acc[R][2] = {{acc}};
      for (int r = 0; r < R; ++r)
        for (int t = 0; t < 2; ++t) {
          __m512 f = _mm512_loadu_ps(yf[r] + 16 * t);
          __m512i exact = _mm512_sub_epi32(acc[r][t], _mm512_loadu_si512(cg + 16 * t));
          f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), _mm512_loadu_ps(s + 16 * t), f);
          _mm512_storeu_ps(yf[r] + 16 * t, f);
        }
#else
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < 32; ++c) {
          int32_t sum = 0;
          for (int64_t k = g0; k < g0 + GK; ++k) sum += (int32_t)xr[r * K + k] * tile[(k / 4) * 128 + c * 4 + k % 4];
          yf[r][c] += (float)(sum - cg[c]) * s[c];
        }
#endif
"""
_STEP = """\
        __builtin_memcpy(&four, xr + {r} * K + k, 4);
        a = _mm512_set1_epi32(four);
        DPBUSD(c{r}_0, a, b0);
        DPBUSD(c{r}_1, a, b1);
"""


def _group() -> str:
    """_GROUP with its ROWS x 2 accumulators written out."""
    names = [f"c{r}_{t}" for r in range(ROWS) for t in range(2)]
    return (_GROUP.replace("{zeros}", ", ".join(f"{n} = _mm512_setzero_si512()" for n in names))
            .replace("{steps}", "".join(_STEP.replace("{r}", str(r)) for r in range(ROWS)))
            .replace("{{acc}}", "{" + ", ".join(f"{{c{r}_0, c{r}_1}}" for r in range(ROWS)) + "}"))


_BODY = """\
static void {name}(const float* restrict x, const uint8_t* restrict xq, const float* restrict meta,
                   const {code}* restrict codes, const float* restrict scales,{params}
                   float* restrict out, int64_t M, int64_t K, int64_t ncols, int64_t x_rs, int64_t o_rs,
                   int64_t s_rs{work}) {{
  enum {{ R = {rows}, G = {group} }};
  const int64_t GK = G ? G : K, ms = 1 + K / 32;
{setup}  for (int64_t m0 = 0; m0 < M; m0 += R) {{
    int64_t nr = M - m0 < R ? M - m0 : R;
    const uint8_t* restrict xr = xq + m0 * K;
    if (nr < R) {{  /* the last rows, zeros after them */
      __builtin_memset(pad, 0, (size_t)R * K);
      __builtin_memcpy(pad, xr, (size_t)nr * K);
      xr = pad;
    }}
    float yf[R][32], zf[R][32];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 32; ++c) yf[r][c] = zf[r][c] = 0.0f;
    for (int64_t g0 = 0; g0 < K; g0 += GK) {{
      const float* restrict s = scales + (G ? g0 / G : 0) * s_rs;
      const int32_t* restrict cg = comp + (g0 / GK) * 32;
{group_body}{offsets_body}    }}
    for (int64_t r = 0; r < nr; ++r) {{
      float sx = meta[(m0 + r) * ms];
{write}    }}
  }}
}}"""

# the panel repacked per call into the thread's scratch (codes in ember.tir.nbits' panels), or read
# as they are (packed at compile time: ember.tir.nbits.pack_vnni, every M on the int8 products)
_REPACKED = """\
  if (M < {stream}) {{
    {fallback}(x, codes, scales,{args} out, M, K, ncols, x_rs, o_rs, s_rs);
    return;
  }}
  /* this thread's scratch: the repacked panel, 128 x the column sums per group, the last rows */
  int8_t* restrict tile = {scratch}((size_t)K * 32 + sizeof(int32_t) * 32 * (size_t)(K / GK) + (size_t)R * K);
  int32_t* restrict comp = (int32_t*)(tile + K * 32);
  uint8_t* restrict pad = (uint8_t*)(comp + 32 * (K / GK));
{repack}  for (int64_t g0 = 0; g0 < K; g0 += GK)  /* 128 times each group's column sums: xq's offset */
{colsum}"""
_PACKED = {8: """\
  (void)x; (void)x_rs;
  const int8_t* restrict tile = codes;
  const int32_t* restrict comp = (const int32_t*)(codes + K * 32);
  uint8_t* restrict pad = (uint8_t*)work;  /* the last rows */
""", 4: """\
  (void)x; (void)x_rs;
  /* the nibbles as the int8 layout (a mask and a shift apart), then the last rows */
  int8_t* restrict tile = work;
  const int32_t* restrict comp = (const int32_t*)(codes + K * 16);
  uint8_t* restrict pad = (uint8_t*)(tile + K * 32);
#if defined(__AVX512BW__)
  {
    __m512i mask = _mm512_set1_epi8(15), minus = _mm512_set1_epi8({minus});
    for (int64_t k = 0; k < K; k += 4) {
      __m512i v = _mm512_loadu_si512(codes + k * 16);
      _mm512_store_si512(tile + k * 32, _mm512_sub_epi8(_mm512_and_si512(v, mask), minus));
      _mm512_store_si512(tile + k * 32 + 64, _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), mask), minus));
    }
  }
#else
  for (int64_t i = 0; i < K * 16; ++i) {
    tile[(i / 64) * 128 + i % 64] = (int8_t)((codes[i] & 15) - {minus});
    tile[(i / 64) * 128 + 64 + i % 64] = (int8_t)((codes[i] >> 4) - {minus});
  }
#endif
"""}

# act "int8_rows": each row quantized once (quantize_rows' formulas), then each thread's blocks of
# rows multiplied by its panels of packed codes (the function above, per panel), the residual (if
# any) added as each panel's rows are written; the shares are ember.tir.nbits_split's
# (rows_threads, rows_task, rows_quantized)
_ROWS = """\
static void {name}(const float* restrict x, const {code}* restrict codes, const float* restrict scales,{params}
                   float* restrict out, int64_t M, int64_t K_, int64_t N, int64_t x_rs, int64_t o_rs, int64_t s_rs,
                   int64_t p_rs) {{
  enum {{ R = {rows}, B = {block}, K = {k} }};  /* K in the text: the threads' region would read it from the
                                           struct OpenMP passes it, where GCC propagates no constant */
  (void)K_;
  const int64_t ms = 1 + K / 32, blocks = (M + B - 1) / B, P = {panels};
  const int T = {team}(M * K * {cols} / 16 / {least}, blocks * P), whole = blocks >= T;
  /* a thread's own scratch: {tile}the last rows' padding{glu_note}, and with whole blocks a
     thread the block's rows quantized, their scales and sums (in whole 64 bytes, as the rows of
     every block are shared where the threads split blocks) */
  const size_t local = whole ? ((size_t)B * K + sizeof(float) * (size_t)(B * ms) + 63) / 64 * 64 : 0;
  const size_t own = {tile_bytes}(size_t)R * K{glu_bytes} + local;
  const size_t shared = whole ? 0 : ((size_t)M * K + sizeof(float) * (size_t)(M * ms) + 63) / 64 * 64;
  int8_t* restrict first = {scratch}(shared + own);  /* the calling thread's: the first of the team */
  #pragma omp parallel num_threads(T) if(T > 1)
  {{
#ifdef _OPENMP
    const int t = T > 1 ? omp_get_thread_num() : 0;
#else
    const int t = 0;
#endif
    int8_t* restrict work = t == 0 ? first + shared : (int8_t*){scratch}(own);
    uint8_t* restrict xq = (uint8_t*)(whole ? work + own - local : first);
    float* restrict meta = (float*)(xq + (whole ? B : M) * K);
    int64_t b0 = blocks * t / T, b1 = blocks * (t + 1) / T, p0 = 0, p1 = P;
    if (!whole) {{  /* the block's threads split its panels; each quantizes a share of the rows */
      int64_t lead = (b0 * T + blocks - 1) / blocks, share = ((b0 + 1) * T + blocks - 1) / blocks - lead;
      b1 = b0 + 1;
      p0 = P * (t - lead) / share;
      p1 = P * (t - lead + 1) / share;
      {quantize}(x + M * t / T * x_rs, xq + M * t / T * K, meta + M * t / T * ms, M * (t + 1) / T - M * t / T, K,
                 x_rs);
      #pragma omp barrier
    }}
    for (int64_t m0 = b0 * B; m0 < b1 * B && m0 < M; m0 += B) {{
      const int64_t rows = M - m0 < B ? M - m0 : B;
      const uint8_t* rq = whole ? xq : xq + m0 * K;  /* the block's rows quantized */
      const float* rm = whole ? meta : meta + m0 * ms;
      if (whole)  /* every panel of whole blocks: each block quantized as its products begin */
        {quantize}(x + m0 * x_rs, xq, meta, rows, K, x_rs);
{loop}    }}
  }}
}}"""
_PANELS = """\
      for (int64_t p = p0; p < p1; ++p)
        {panel}(x, rq, rm, codes + p * p_rs, scales + p * 32,{args} out + m0 * o_rs + p * 32, rows,
                K, N - p * 32 < 32 ? N - p * 32 : 32, x_rs, o_rs, s_rs, work);
"""
# glu "silu" (N the output's columns, a multiple of 32): the gate's panel p and the up
# projection's panel p + N / 32 into two blocks of the thread's scratch, out = silu(gate) * up
_GLU = """\
      float* restrict gate = (float*)(work + {tile_bytes}(size_t)R * K);
      float* restrict up = gate + B * 32;
      for (int64_t p = p0; p < p1; ++p) {{
        const int64_t q = p + N / 32;
        {panel}(x, rq, rm, codes + p * p_rs, scales + p * 32,{args} gate, rows, K, 32, x_rs, 32,
                s_rs, work);
        {panel}(x, rq, rm, codes + q * p_rs, scales + q * 32,{args_up} up, rows, K, 32, x_rs, 32,
                s_rs, work);
        for (int64_t i = 0; i < rows * 32; i += 16) {{
          {vec} g, u;
          __builtin_memcpy(&g, gate + i, 64);
          __builtin_memcpy(&u, up + i, 64);
          g = g * {sigmoid}(g) * u;
          __builtin_memcpy(out + (m0 + i / 32) * o_rs + p * 32 + i % 32, &g, 64);
        }}
      }}
"""

_COLSUM = """\
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  {
    __m512i c0 = _mm512_setzero_si512(), c1 = c0, ones = _mm512_set1_epi8(1);
    for (int64_t k = g0; k < g0 + GK; k += 4) {
      __m512i b0 = _mm512_load_si512(tile + k * 32), b1 = _mm512_load_si512(tile + k * 32 + 64);
      DPBUSD(c0, ones, b0);
      DPBUSD(c1, ones, b1);
    }
    _mm512_store_si512(comp + (g0 / GK) * 32, _mm512_slli_epi32(c0, 7));
    _mm512_store_si512(comp + (g0 / GK) * 32 + 16, _mm512_slli_epi32(c1, 7));
  }
#else
  for (int c = 0; c < 32; ++c) {
    int32_t sum = 0;
    for (int64_t k = g0; k < g0 + GK; ++k) sum += tile[(k / 4) * 128 + c * 4 + k % 4];
    comp[(g0 / GK) * 32 + c] = 128 * sum;
  }
#endif
"""

# acc += a (u8) . b (s8) in 32-bit lanes: the instruction by inline assembly, since GCC copies the
# accumulator of the intrinsic to another register and back around every vpdpbusd
VNNI_INCLUDE = """\
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#ifndef DPBUSD
#define DPBUSD(acc, a, b) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b))
#endif
"""

# zero points: offset_g[c] * the float32 sum of x over the group (meta's sums of 32 columns)
_OFFSETS = """\
      const float* restrict o = offsets + (g0 / G) * s_rs;
      for (int64_t r = 0; r < nr; ++r) {
        float xs = 0.0f;
        for (int64_t b = g0 / 32; b < (g0 + G) / 32; ++b) xs += meta[(m0 + r) * ms + 1 + b];
        for (int c = 0; c < 32; ++c) zf[r][c] += o[c] * xs;
      }
"""


# a row's columns written out; with an activation the panel's 32 columns into a row first, the
# activation on its two vectors
_WRITE = """\
      for (int64_t c = 0; c < ncols; ++c) out[(m0 + r) * o_rs + c] = sx * yf[r][c] + zf[r][c]{bias_add}{residual_add};
"""
_WRITE_ACTIVATED = """\
      float row[32];
      for (int c = 0; c < 32; ++c) row[c] = sx * yf[r][c] + zf[r][c]{bias_add};
      {activation}(row);
      for (int64_t c = 0; c < ncols; ++c) out[(m0 + r) * o_rs + c] = row[c];
"""

# the activations of a product's epilogue (ember.tir.nbits' ACTIVATIONS) on a vector v:
# GELU's tanh form is v * sigmoid(2 u), u = sqrt(2 / pi) (v + 0.044715 v^3), as 0.5 (1 + tanh u) = sigmoid(2 u)
_ACTIVATIONS = {
    "gelu_tanh": ("sigmoid", f"v * {{f}}(v * ({2 * SQRT_2_OVER_PI!r}f + {2 * SQRT_2_OVER_PI * 0.044715!r}f * v * v))"),
    "gelu": ("erf", f"0.5f * v * (1.0f + {{f}}(v * {1 / math.sqrt(2)!r}f))"),
}


def activation(lib: CPrelude, name: str) -> str:
    """The name of the C function that applies activation `name` in place to a panel's row of 32
    float32 columns, written into the prelude once."""
    helper = f"ember_{name}_row32"
    math_name, formula = _ACTIVATIONS[name]

    def make() -> str:
        vec, f = lib.vec("float32", 16), vector_math(lib, math_name, "float32", 16)
        return (f"static inline void {helper}(float* restrict row) {{\n"
                f"  for (int i = 0; i < 32; i += 16) {{\n"
                f"    {vec} v;\n    __builtin_memcpy(&v, row + i, 64);\n"
                f"    v = {formula.format(f=f)};\n"
                f"    __builtin_memcpy(row + i, &v, 64);\n  }}\n}}")

    return lib._helper(helper, make)


def epi8_indices(values) -> str:
    """_mm512_set_epi8's arguments (byte 63 first) for byte j = values[j]."""
    return ", ".join(str(v) for v in reversed(list(values)))


def abs_max(lib: CPrelude) -> str:
    """The name of the C function of max |x| over n floats (compared as their bits, which GCC
    vectorizes), written into the prelude once: the row and group quantizations' scale."""
    return lib._helper("ember_abs_max", lambda: _ABS_MAX)


def quantize_rows(lib: CPrelude) -> str:
    """The name of the quantize_rows routine's C function, written into the prelude once."""
    abs_max(lib)  # (before the function that calls it)
    return lib._helper("ember_quantize_rows", lambda: VNNI_INCLUDE + _QUANTIZE)


def _params(offsets: bool, bias: bool, residual: bool = False, at: str = "") -> tuple[str, str]:
    """The C parameters after the scales (offsets, bias, residual) of a variant, and its arguments
    passing them on (each + `at`: a panel's first column)."""
    names = [n for n, on in (("offsets", offsets), ("bias", bias), ("residual", residual)) if on]
    return "".join(f" const float* restrict {n}," for n in names), "".join(f" {n}{at}," for n in names)


def _function(lib: CPrelude, name: str, bits: int, group: int, offsets: bool, bias: bool, setup: str,
              residual: bool = False, work: bool = False, act: str | None = None) -> str:
    """_BODY for one variant: the products of a panel after `setup` (the tile, its column sums, the
    padding of the last rows), then the activation `act` (no residual with one)."""
    params, _ = _params(offsets, bias, residual)
    bias_add = " + bias[c]" if bias else ""
    write = _WRITE_ACTIVATED.format(bias_add=bias_add, activation=activation(lib, act)) if act else \
        _WRITE.format(bias_add=bias_add, residual_add=" + residual[(m0 + r) * o_rs + c]" if residual else "")
    return VNNI_INCLUDE + _BODY.format(
        name=name, code="int8_t" if bits == 8 else "uint8_t", params=params, rows=ROWS, group=group, setup=setup,
        work=", int8_t* restrict work" if work else "", group_body=_group(),
        offsets_body=_OFFSETS if offsets else "", write=write)


def gemm_nbits_int8(lib: CPrelude, bits: int, group: int, offsets: bool, bias: bool, lanes: int) -> str:
    """The name of gemm_nbits' C function with int8 products of rows quantized by quantize_rows
    (act int8), its codes repacked per call (its float32 twin, for a few rows, written first)."""
    fallback = gemm_nbits(lib, bits, group, offsets, bias, lanes)
    name = fallback.replace("ember_gemm_", "ember_gemm_q8_")

    def make() -> str:
        # byte j of the two outputs: row j % 4 and column j / 4 (+ 16), as indices into the rows
        # k .. k + 3 (int8: 128 bytes over two vectors; int4: one vector of nibbles)
        lo8 = epi8_indices((j % 4) * 32 + j // 4 for j in range(64))
        hi8 = epi8_indices((j % 4) * 32 + 16 + j // 4 for j in range(64))
        repack = _REPACK[bits].replace("{idx_first}", lo8).replace("{idx_second}", hi8)
        repack = repack.replace("{idx4}", epi8_indices((j % 4) * 16 + j // 4 for j in range(64)))
        repack = repack.replace("{minus}", "0" if offsets else "8")
        setup = _REPACKED.format(stream=GEMM_NBITS_STREAM, fallback=fallback, args=_params(offsets, bias)[1],
                                 scratch=c_runtime.thread_scratch(lib), repack=repack, colsum=_COLSUM)
        return _function(lib, name, bits, group, offsets, bias, setup)

    return lib._helper(name, make)


def gemm_nbits_rows(lib: CPrelude, bits: int, group: int, offsets: bool, bias: bool, residual: bool, k: int,
                    glu: str | None = None, act: str | None = None) -> str:
    """The name of gemm_nbits' C function of act int8_rows for this variant and K = k (a constant
    of its text): the rows quantized block by block, each multiplied by the panels of its packed
    codes (pack_vnni); with glu "silu", silu of the first half of the columns times the second;
    with an activation `act` (ember.tir.nbits' ACTIVATIONS), that of every column."""
    name = f"ember_gemm_q8_int{bits}{f'_g{group}' if group else ''}{'_zp' if offsets else ''}_rows_k{k}"
    name += ("_bias" if bias else "") + ("_residual" if residual else "") + (f"_{act}" if act else "")
    name += f"_{glu}" if glu else ""

    def make() -> str:
        panel_name = name.removesuffix(f"_{glu}") + "_panel"
        panel = lib._helper(panel_name, lambda: _function(
            lib, panel_name, bits, group, offsets, bias, _PACKED[bits].replace("{minus}", "0" if offsets else "8"),
            residual, work=True, act=act))
        params, _ = _params(offsets, bias, residual)
        args = _params(offsets, bias, at=" + p * 32")[1] + (" residual + m0 * o_rs + p * 32," if residual else "")
        tile = "(size_t)K * 32 + " if bits == 4 else ""
        if glu:
            loop = _GLU.format(panel=panel, args=args, args_up=_params(offsets, bias, at=" + q * 32")[1],
                               tile_bytes=tile, vec=lib.vec("float32", 16),
                               sigmoid=vector_math(lib, "sigmoid", "float32", 16))
        else:
            loop = _PANELS.format(panel=panel, args=args)
        return _ROWS.format(name=name, code="int8_t" if bits == 8 else "uint8_t", params=params, rows=ROWS, k=k,
                            block=ROWS_BLOCK, panels="N / 32" if glu else "(N + 31) / 32",
                            cols="2 * N" if glu else "(N + 31) / 32 * 32", team=c_runtime.team(lib),
                            least=PARALLEL_MIN_WORK,
                            tile="the panel's unpacked codes, " if bits == 4 else "", tile_bytes=tile,
                            glu_note=", a block's panel of the gate and of the up projection" if glu else "",
                            glu_bytes=" + sizeof(float) * 64 * B" if glu else "", scratch=c_runtime.thread_scratch(lib),
                            quantize=quantize_rows(lib), loop=loop)

    return lib._helper(name, make)


assert PANEL == 32  # the tile's layout and the repack's indices are written for 32 columns

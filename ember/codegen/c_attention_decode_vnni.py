"""The scores and p v of the decode attention over an int8 cache (ember.codegen.c_attention_decode)
on VNNI: integer products summed in int32, where the float path widens each code to a float first
(a vpmovsxbd and a vcvtdq2ps per 16 codes, shared by the group's heads, then an FMA per head): at
one thread that was compute-bound, LLaMA's 12 query heads over 4 key/value heads reading their
1024 int8 positions at a third of the memory's bandwidth. The scores take vpdpbusd, 64 products
of a key's codes and a query's bytes an instruction.

The query of each head is quantized once per call into two bytes a value (llama.cpp quantizes it
to one, Q8, for its Q8 x Q8 dot): X = round(q / step), |X| <= 32639, step = max |q| / 32639, X =
256 hi + lo, hi and lo signed bytes. The keys' codes c are made unsigned (c + 128, vpdpbusd's
unsigned operand) and the sums corrected exactly:

    q . k = step * key scale * (256 sum (c + 128) hi + sum (c + 128) lo - 128 sum X)

in int32 (a 128-value head: at most 2^30), so that a score's only rounding beyond the float path's
is X's, a 2^-16 of the head's largest query value: the attention agrees with float32 scores to
about 1e-5 (tests/ops/test_attention_decode.py), where one byte (Q8) would add an error as large
as the int8 cache's own.

W = 16 keys at a time, in 4 groups of 4 keys: a group's rows, 64 bytes each, interleaved by dwords
(8 unpacks), so that lane 4L + i of vector m holds key i's dword 4L + m; the query's vectors, laid
out once per call, hold its dword 4L + m in lanes 4L..4L + 3, so that each of the 4 vectors takes one
vpdpbusd a head for hi and one for lo, and the 4 groups' sums (each key's over dwords 4L..4L + 3 of
every 16) are added across the 128-bit blocks at the end (6 block shuffles a head): no horizontal
sum per key. (A whole 16 x 16 transpose took twice the shuffles, and the query's dwords broadcast
one a vpdpbusd: GCC 12 folds no broadcast into it. LLaMA's scores of 4 heads over 1024 positions,
in L2, one thread of a Zen 4 EPYC: 30 us the float path, 20 the transpose, 19 this.)

p v on vpdpwssd: the block's weights p of each head, the values' row scales folded in, in 15 bits
of the block's largest (P = round(32767 p / max p), exact to 2^-16 of the largest weight, as the
query's two bytes are), two keys at a time: each value row's codes widened to 16 bits and the two
rows interleaved by words, so that one vpdpwssd adds P_j v_j + P_j+1 v_j+1 into 16 values' int32
sums (a block of KEYS keys: within 2^31 up to 512), the group's heads sharing each widening; the sums
go into the float output once a block, times max p / 32767. (The same 4 calls' p v: 17 us the
float path, 11 this.) A block's odd last key takes the float path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .c_gemm_nbits_vnni import VNNI_INCLUDE

if TYPE_CHECKING:
    from .c_prelude import CPrelude

STEPS = 32639  # X's largest magnitude: hi = (X + 128) >> 8 stays within a signed byte
P_STEPS = 32767  # the largest weight of a block in p v's 15 bits
FEATURES = "defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)"

_QUANTIZE = f"""\
/* a query row x (E floats, E a multiple of 64) as X = round(x / step) in two bytes, X = 256 hi + lo,
   each packed four to an int32 as vpdpbusd reads them, into the vectors scores_q16 multiplies by:
   for each 64 values c, hi's then lo's 4 vectors m, lane 4L + i of vector m holding dword 4L + m
   (2E int32 in all); *c = 128 sum X (the correction of the keys' +128), *f = step */
static inline void ember_query_q16(const float* restrict x, int64_t E, int32_t* restrict w, int32_t* restrict c,
                                   float* restrict f) {{
  float top = 0.0f;
  for (int64_t e = 0; e < E; ++e) top = !(fabsf(x[e]) <= top) ? fabsf(x[e]) : top;  /* (NaN: kept) */
  float inv = top > 0.0f && top < INFINITY ? {STEPS}.0f / top : 0.0f;
  int32_t sum = 0;
  for (int64_t e = 0; e < E; e += 4) {{
    uint32_t hi = 0, lo = 0;
    for (int i = 0; i < 4; ++i) {{
      int32_t X = (int32_t)nearbyintf(x[e + i] * inv);
      X = X > {STEPS} ? {STEPS} : X < -{STEPS} ? -{STEPS} : X;
      int32_t h = (X + 128) >> 8;
      hi |= (uint32_t)(uint8_t)h << 8 * i;
      lo |= (uint32_t)(uint8_t)(X - 256 * h) << 8 * i;
      sum += X;
    }}
    int64_t d = e / 4, c = d / 16, L = d % 16 / 4, m = d % 4;  /* into scores_q16's vectors (hi m, lo m of chunk c) */
    for (int i = 0; i < 4; ++i) {{
      w[(c * 8 + m) * 16 + 4 * L + i] = (int32_t)hi;
      w[(c * 8 + 4 + m) * 16 + 4 * L + i] = (int32_t)lo;
    }}
  }}
  *c = 128 * sum;
  *f = top / {STEPS}.0f;  /* (a NaN or infinite query: NaN scores, as the float path gives) */
}}"""

_SCORES = """\
/* the scores of the group's G heads for the first keys of the block, 16 at a time (module doc of
   ember.codegen.c_attention_decode_vnni); returns how many (the rest: the float path) */
static inline int64_t {name}_scores_q16(const int32_t* restrict qw, const int32_t* restrict qc,
                                        const float* restrict qf, const int8_t* restrict k, const int8_t* restrict v,
                                        int64_t nk, int64_t k_rs, int64_t v_rs, float* restrict s) {{
  int64_t j = 0;
#if {features}
  int64_t kb = {E} + {scale_bytes}, vb = {Ev} + {scale_bytes};
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  for (; j + 16 <= nk; j += 16) {{
    __m512i x[{G}][4];  /* head g, keys 4a..4a + 3: lane 4L + i, key 4a + i's sum over dwords 4L..4L + 3 of each 16 */
    V ks;
    for (int i = 0; i < 16; ++i) {{
      const int8_t* kr = k + (j + i) * k_rs;
{prefetch}      ks[i] = {row_scale}(kr + {E});
    }}
    for (int a = 0; a < 4; ++a) {{
      __m512i hi[{G}], lo[{G}];
      for (int g = 0; g < {G}; ++g) hi[g] = lo[g] = _mm512_setzero_si512();
      for (int c = 0; c < {E} / 64; ++c) {{
        const int8_t* kr = k + (j + 4 * a) * k_rs + 64 * c;
        __m512i r0 = _mm512_xor_si512(_mm512_loadu_si512(kr), flip);
        __m512i r1 = _mm512_xor_si512(_mm512_loadu_si512(kr + k_rs), flip);
        __m512i r2 = _mm512_xor_si512(_mm512_loadu_si512(kr + 2 * k_rs), flip);
        __m512i r3 = _mm512_xor_si512(_mm512_loadu_si512(kr + 3 * k_rs), flip);
        __m512i a0 = _mm512_unpacklo_epi32(r0, r1), a1 = _mm512_unpackhi_epi32(r0, r1);
        __m512i a2 = _mm512_unpacklo_epi32(r2, r3), a3 = _mm512_unpackhi_epi32(r2, r3);
        /* b[m] lane 4L + i: key 4a + i's dword 4L + m */
        __m512i b[4] = {{_mm512_unpacklo_epi64(a0, a2), _mm512_unpackhi_epi64(a0, a2), _mm512_unpacklo_epi64(a1, a3),
                        _mm512_unpackhi_epi64(a1, a3)}};
        for (int g = 0; g < {G}; ++g) {{
          const int32_t* qg = qw + (g * {E} / 64 + c) * 128;
          for (int m = 0; m < 4; ++m) {{
            hi[g] = _mm512_dpbusd_epi32(hi[g], b[m], _mm512_loadu_si512(qg + 16 * m));
            lo[g] = _mm512_dpbusd_epi32(lo[g], b[m], _mm512_loadu_si512(qg + 16 * (4 + m)));
          }}
        }}
      }}
      for (int g = 0; g < {G}; ++g) x[g][a] = _mm512_add_epi32(_mm512_slli_epi32(hi[g], 8), lo[g]);
    }}
    for (int g = 0; g < {G}; ++g) {{  /* the 4 sums of each key added: 128-bit blocks transposed */
      __m512i y01 = _mm512_add_epi32(_mm512_shuffle_i32x4(x[g][0], x[g][1], 0x44),
                                     _mm512_shuffle_i32x4(x[g][0], x[g][1], 0xEE));
      __m512i y23 = _mm512_add_epi32(_mm512_shuffle_i32x4(x[g][2], x[g][3], 0x44),
                                     _mm512_shuffle_i32x4(x[g][2], x[g][3], 0xEE));
      __m512i z = _mm512_add_epi32(_mm512_shuffle_i32x4(y01, y23, 0x88), _mm512_shuffle_i32x4(y01, y23, 0xDD));
      z = _mm512_sub_epi32(z, _mm512_set1_epi32(qc[g]));
      *(V*)(s + g * BK + j) = (V)_mm512_cvtepi32_ps(z) * (qf[g] * ks);
    }}
  }}
#else
  (void)qw; (void)qc; (void)qf; (void)k; (void)v; (void)nk; (void)k_rs; (void)v_rs; (void)s;
#endif
  return j;
}}
"""


_PV = """\
/* o_g += p_g v over the block's first keys, two at a time (module doc of
   ember.codegen.c_attention_decode_vnni); returns how many (the rest: the float path) */
static inline int64_t {name}_pv_q15(const float* restrict p, const int8_t* restrict v, int64_t nk, int64_t v_rs,
                                    int64_t evp, float* restrict o) {{
  int64_t n2 = nk / 2 * 2;
#if {features}
  if (n2 == 0) return 0;
  int16_t w[{G}][BK] __attribute__((aligned(64)));
  float sv[BK] __attribute__((aligned(64))), unit[{G}];
  int64_t nv = (n2 + 15) / 16 * 16;  /* (p is whole vectors of the block's keys, 0 past them) */
  for (int64_t j = 0; j < nv; ++j) sv[j] = j < n2 ? {row_scale}(v + j * v_rs + {Ev}) : 0.0f;
  for (int g = 0; g < {G}; ++g) {{  /* the values' scales folded into p, then p in 15 bits of the block's largest */
    V top = (V){{0}}, poison = (V){{0}};  /* (a NaN or infinite weight: NaN, as the float path gives) */
    for (int64_t j = 0; j < nv; j += 16) {{
      V x = *(const V*)(p + g * BK + j) * *(const V*)(sv + j);
      top = SEL(x > top, x, top);
      poison += x * 0.0f;
    }}
    float t = _mm512_reduce_max_ps((__m512)top), inv = t > 0.0f && t < INFINITY ? {p_steps}.0f / t : 0.0f;
    for (int64_t j = 0; j < nv; j += 16) {{
      V x = *(const V*)(p + g * BK + j) * *(const V*)(sv + j) * inv;
      _mm256_store_si256((__m256i*)&w[g][j], _mm512_cvtepi32_epi16(_mm512_cvtps_epi32((__m512)x)));
    }}
    unit[g] = t / {p_steps}.0f + _mm512_reduce_add_ps((__m512)poison);
  }}
  for (int c = 0; c < {Ev} / 64; ++c) {{
    /* acc[g][m] lane 4L + i: value 32 (m / 2) + 8L + 4 (m % 2) + i */
    __m512i acc[{G}][4];
    for (int g = 0; g < {G}; ++g)
      for (int m = 0; m < 4; ++m) acc[g][m] = _mm512_setzero_si512();
    for (int64_t j = 0; j < n2; j += 2) {{
      const int8_t *a = v + j * v_rs + 64 * c, *b = a + v_rs;
      __m512i a0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)a));
      __m512i a1 = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(a + 32)));
      __m512i b0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)b));
      __m512i b1 = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(b + 32)));
      __m512i x[4] = {{_mm512_unpacklo_epi16(a0, b0), _mm512_unpackhi_epi16(a0, b0), _mm512_unpacklo_epi16(a1, b1),
                      _mm512_unpackhi_epi16(a1, b1)}};
      for (int g = 0; g < {G}; ++g) {{
        int32_t pair;
        __builtin_memcpy(&pair, &w[g][j], 4);
        __m512i pp = _mm512_set1_epi32(pair);
        for (int m = 0; m < 4; ++m) acc[g][m] = _mm512_dpwssd_epi32(acc[g][m], x[m], pp);
      }}
    }}
    for (int g = 0; g < {G}; ++g) {{  /* back in the values' order: 128-bit blocks interleaved */
      float* og = o + g * evp + 64 * c;
      V u = (V){{0}} + unit[g];
      for (int half = 0; half < 2; ++half) {{
        __m512i lo = _mm512_shuffle_i32x4(acc[g][2 * half], acc[g][2 * half + 1], 0x44);
        __m512i hi = _mm512_shuffle_i32x4(acc[g][2 * half], acc[g][2 * half + 1], 0xEE);
        *(V*)(og + 32 * half) += (V)_mm512_cvtepi32_ps(_mm512_shuffle_i32x4(lo, lo, 0xD8)) * u;
        *(V*)(og + 32 * half + 16) += (V)_mm512_cvtepi32_ps(_mm512_shuffle_i32x4(hi, hi, 0xD8)) * u;
      }}
    }}
  }}
  return n2;
#else
  (void)p; (void)v; (void)v_rs; (void)evp; (void)o; (void)n2;
  return 0;
#endif
}}
"""


def takes(kv: str, lanes: int, dim: int) -> bool:
    """Whether a variant's scores (dim: the keys' E) or p v (the values' Ev) take this path: an
    int8 cache, 16-lane vectors, and heads of 64 or 128 values (whole rows of 64 bytes; a
    128-value head's sums stay within int32)."""
    return kv == "int8" and lanes == 16 and dim in (64, 128)


def quantize_query(lib: CPrelude) -> str:
    """The name of the C function quantizing a query row into two bytes a value (module doc)."""
    return lib._helper("ember_query_q16", lambda: _QUANTIZE)


def scores(lib: CPrelude, name: str, dims: tuple[int, int, int], row_scale: str, prefetch: str,
           scale_bytes: int) -> str:
    """The C of `<name>_scores_q16` for dims (E, Ev, G), inside the variant's macros (V, BK, AHEAD);
    `row_scale` reads a row's scale, `prefetch` is the C prefetching key j + i's rows AHEAD on."""
    e_dim, ev_dim, groups = dims
    lib._helper("ember_vnni_include", lambda: VNNI_INCLUDE)
    return _SCORES.format(name=name, features=FEATURES, E=e_dim, Ev=ev_dim, G=groups, prefetch=prefetch,
                          row_scale=row_scale, scale_bytes=scale_bytes)


def pv(lib: CPrelude, name: str, dims: tuple[int, int, int], row_scale: str) -> str:
    """The C of `<name>_pv_q15` for dims (E, Ev, G), inside the variant's macros (V, BK)."""
    _e_dim, ev_dim, groups = dims
    lib._helper("ember_vnni_include", lambda: VNNI_INCLUDE)
    return _PV.format(name=name, features=FEATURES, Ev=ev_dim, G=groups, row_scale=row_scale, p_steps=P_STEPS)

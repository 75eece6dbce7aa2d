"""The C of the attention routine (ember.tir.routines: the calling convention): one call computes
the output rows of one block of R = ATTENTION_ROWS queries (whole vectors of W lanes) of one
(batch, head), flash-attention style.

The scores of a block of BK keys are computed transposed, keys x queries (s[j][i]), in a register
tile of MR keys x R / W vectors of queries (GEMM's micro-kernel: loads of the transposed, scaled
q, MR broadcasts of k read in place, MR R / W FMAs per step of e), so that k needs no packing
and the softmax of W queries is vector arithmetic down the keys: the mask, the block's maximum,
the running maximum, exp and the running sum per query, and the factor exp(old max - new max)
that rescales the output accumulator when the maximum grew. The scores are in base-2 units (log2 e
folded into q's scale), so that each exp is 2^x of an x <= 0, half the work of the general exp.
Without a mask array, the maximum is taken as the tiles of scores are stored. Then the output
accumulator += p v in a register tile of OR queries x up to 4 vectors (broadcasts of p, loads of
rows of v). At the end each row is divided by its sum (0 / 0 = NaN for a row whose keys
were all masked out, as in PyTorch). Only one block of scores is alive: scratch of
O(R x (BK + E + Ev)) per call, nothing of size L x S.

Vectors are W float32 lanes, the target's (the routine's `lanes`: 16 for AVX-512, 8 for AVX2;
at least 4, a power of two dividing R). Only whole vectors inside
the caller's arrays are loaded: the last keys of a block are copied, and the tails of the rows
of v and the mask go lane by lane.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tir.routines import ATTENTION_ROWS
from . import c_runtime

if TYPE_CHECKING:
    from .c_prelude import CPrelude

KEYS = 128  # keys per block (BK): the scores of a block of rows stay in L1
SCORE_ROWS = 8  # rows of the scores' register tile (x 2 vectors)
OUT_ROWS = 4  # rows of the output's register tile (x up to 4 vectors)

_BODY = """\
static void {name}(const float* restrict q, const float* restrict k, const float* restrict v,{mask_param}{new_param}
                   float* restrict out, int64_t q0, int64_t nq, int64_t S, int64_t E, int64_t Ev, int64_t q_rs,
                   int64_t k_rs, int64_t v_rs, int64_t o_rs, int64_t m_rs, int64_t m_cs, float scale) {{
  enum {{ R = {rows}, BK = {keys}, MR = {mr}, OR = {or_}, W = {lanes}, NV = R / W }};
  _Static_assert(R % W == 0 && R % OR == 0, "a block of queries is whole vectors and register tiles");
  (void)m_rs; (void)m_cs;
  scale *= 1.44269504088896341f;  /* scores in base-2 units (log2 e folded into q): p = 2^(s - max) */
  const V ninf = (V){{0}} - INFINITY, zero = (V){{0}};
  const M iota = (M){{{iota}}};
  int64_t evp = (Ev + W - 1) / W * W, kbp = (MR * E + W - 1) / W * W;
  float* scratch = {scratch}(sizeof(float) * (size_t)(E * R + (BK + MR) * R + R * evp + kbp + 3 * R));
  float *qt = scratch, *s = qt + E * R, *o = s + (BK + MR) * R, *kb = o + R * evp, *m = kb + kbp, *l = m + R;
  float* alpha = l + R;
  /* q transposed (qt[e][i]) and scaled; the queries past nq are zero. W x W blocks go through
     registers (four rounds of swapping off-diagonal blocks of 8, 4, 2 and 1 lanes), the rest of
     the dimensions lane by lane */
  int64_t ew = E / W * W;
  for (int64_t i0 = 0; i0 < R; i0 += W)
    for (int64_t e0 = 0; e0 < ew; e0 += W) {{
      V b[W];
      for (int i = 0; i < W; ++i)
        b[i] = i0 + i < nq ? (V)(*(const U*)(q + (q0 + i0 + i) * q_rs + e0)) * scale : zero;
{transpose}      for (int e = 0; e < W; ++e) *(V*)(qt + (e0 + e) * R + i0) = b[e];
    }}
  for (int64_t e = ew; e < E; ++e)
    for (int64_t i = 0; i < R; ++i) qt[e * R + i] = i < nq ? q[(q0 + i) * q_rs + e] * scale : 0.0f;
  for (int64_t i = 0; i < R; ++i) {{
    m[i] = -INFINITY;
    l[i] = 0.0f;
    for (int64_t c = 0; c < evp; ++c) o[i * evp + c] = 0.0f;
  }}
  int64_t kend = {kend};
  for (int64_t j0 = 0; j0 < kend; j0 += BK) {{
    int64_t nk = kend - j0 < BK ? kend - j0 : BK;
    /* scores, transposed: s[j][i] = k[j0 + j] . q[i], MR keys x R queries in registers */
    V tmax[NV];  /* the block's maximum per query, kept as the tiles are stored (no mask array) */
    for (int t = 0; t < NV; ++t) tmax[t] = ninf;
    (void)tmax;
    for (int64_t jg = 0; jg < nk; jg += MR) {{
      const float* kr = k + (j0 + jg) * k_rs;
      int64_t krs = k_rs;
      if (jg + MR > nk{last_group}) {{  /* the last keys, copied (never a row past the caller's array) */
        for (int64_t r = 0; r < MR; ++r)
          for (int64_t e = 0; e < E; ++e) kb[r * E + e] = jg + r < nk ? {key_row}[e] : 0.0f;
        kr = kb;
        krs = E;
      }}
      V acc[MR][NV];
      for (int r = 0; r < MR; ++r)
        for (int t = 0; t < NV; ++t) acc[r][t] = zero;
      for (int64_t e = 0; e < E; ++e) {{
        V a[NV];
        for (int t = 0; t < NV; ++t) a[t] = *(const V*)(qt + e * R + t * W);
#pragma GCC unroll {mr}
        for (int r = 0; r < MR; ++r) {{
          float b = kr[r * krs + e];
          for (int t = 0; t < NV; ++t) acc[r][t] += b * a[t];
        }}
      }}
{tile_store}    }}
    /* online softmax, W queries at a time: mask, running max and sum per query */
    for (int h = 0; h < NV; ++h) {{
      int64_t i0 = q0 + h * W;
{mask_pass}      V mold = *(V*)(m + h * W);
      V mnew = SEL(vmax > mold, vmax, mold);
      V msafe = SEL(mnew == ninf, zero, mnew);  /* every key so far masked out: p = 0 */
      V sum = zero;
      for (int64_t j = 0; j < nk; ++j) {{
        V p = {exp2}(*(V*)(s + j * R + h * W) - msafe);
        *(V*)(s + j * R + h * W) = p;
        sum += p;
      }}
      V a = {exp2}(mold - msafe);
      *(V*)(l + h * W) = *(V*)(l + h * W) * a + sum;
      *(V*)(m + h * W) = mnew;
      *(V*)(alpha + h * W) = a;
    }}
    for (int64_t i = 0; i < nq; ++i)
      if (alpha[i] != 1.0f)
        for (int64_t c = 0; c < evp; c += W) *(V*)(o + i * evp + c) *= alpha[i];
    /* o += p v: an OR x 4W register tile, then OR x W tiles, then a partial vector */
    for (int64_t rg = 0; rg < nq; rg += OR) {{
      int64_t c = 0;
      for (; c + 4 * W <= Ev; c += 4 * W) {{
        V acc[OR][4];
        for (int r = 0; r < OR; ++r)
          for (int t = 0; t < 4; ++t) acc[r][t] = *(V*)(o + (rg + r) * evp + c + t * W);
        for (int64_t j = 0; j < nk; ++j) {{
          const float* vr = {value_row} + c;
          V b0 = *(const U*)vr, b1 = *(const U*)(vr + W), b2 = *(const U*)(vr + 2 * W), b3 = *(const U*)(vr + 3 * W);
#pragma GCC unroll {or_}
          for (int r = 0; r < OR; ++r) {{
            float p = s[j * R + rg + r];
            acc[r][0] += p * b0;
            acc[r][1] += p * b1;
            acc[r][2] += p * b2;
            acc[r][3] += p * b3;
          }}
        }}
        for (int r = 0; r < OR; ++r)
          for (int t = 0; t < 4; ++t) *(V*)(o + (rg + r) * evp + c + t * W) = acc[r][t];
      }}
      for (; c < Ev; c += W) {{
        int64_t width = Ev - c < W ? Ev - c : W;
        V acc[OR];
        for (int r = 0; r < OR; ++r) acc[r] = *(V*)(o + (rg + r) * evp + c);
        for (int64_t j = 0; j < nk; ++j) {{
          const float* vr = {value_row} + c;
          V b = zero;
          if (width == W) b = *(const U*)vr;
          else for (int64_t t = 0; t < width; ++t) b[t] = vr[t];
#pragma GCC unroll {or_}
          for (int r = 0; r < OR; ++r) acc[r] += s[j * R + rg + r] * b;
        }}
        for (int r = 0; r < OR; ++r) *(V*)(o + (rg + r) * evp + c) = acc[r];
      }}
    }}
  }}
  for (int64_t i = 0; i < nq; ++i) {{
    float inv = l[i] == 0.0f ? 0.0f : 1.0f / l[i];  /* every key masked out: 0, as torch gives */
    for (int64_t c = 0; c < Ev; ++c) out[(q0 + i) * o_rs + c] = o[i * evp + c] * inv;
  }}
}}"""

# A tile of scores stored as it is (a mask array is applied in a pass of its own, _MASK_PASS)
_TILE_STORE = """\
      for (int r = 0; r < MR; ++r)
        for (int t = 0; t < NV; ++t) *(V*)(s + (jg + r) * R + t * W) = acc[r][t];
"""
# ... or, without a mask array, causal-masked and folded into the block's maximum per query as it
# is stored (the keys past nk, zero rows of the copied tail, stay out of it). The lanes of queries
# past nq hold scores of zero rows of q: finite, and never written out.
_TILE_STORE_MAX = """\
      for (int r = 0; r < MR; ++r)
        for (int t = 0; t < NV; ++t) {{
          V x = acc[r][t];
{causal}          *(V*)(s + (jg + r) * R + t * W) = x;
          if (jg + r < nk) tmax[t] = SEL(x > tmax[t], x, tmax[t]);
        }}
"""
_TILE_CAUSAL = """\
          x = SEL((int32_t)(j0 + jg + r) <= iota + (int32_t)(q0 + t * W), x, ninf);
"""
_MAX_OF_TILES = "      V vmax = tmax[h];\n"
_MASK_PASS = """\
      M rows = iota + (int32_t)(h * W) < (int32_t)nq;
      V vmax = ninf;
      for (int64_t j = 0; j < nk; ++j) {{
        V x = *(V*)(s + j * R + h * W);
        M keep = rows;
{masking}        x = SEL(keep, x, ninf);
        *(V*)(s + j * R + h * W) = x;
        vmax = SEL(x > vmax, x, vmax);
      }}
"""


# 2^f on [-1/2, 1/2] as 1 + f P(f), P of degree 5 (least squares on Chebyshev nodes, relative
# error weighted): within 1.2 ulp in float32
_EXP2_COEFFS = (0.6931471824645996, 0.24022647738456726, 0.05550329014658928, 0.009618373587727547,
                0.0013399848248809576, 0.00015370704932138324)


def _exp2_nonpositive(lib: CPrelude, v: str, m: str) -> str:
    """The helper computing 2^x of a score minus its running maximum (x <= 0, -inf for a masked
    score; NaN stays NaN), within 2 ulp, 0 below 2^-126: about fifteen vector operations where the
    general exp (c_vmath, every float input, overflow and subnormal results) takes about thirty,
    which made the softmax a fifth of the routine's time. x is rounded to n + f with |f| <= 1/2 by
    adding 1.5 * 2^23, whose low bits then hold n; shifted into the exponent field they give 2^n."""
    name = f"ember_exp2_nonpositive_{v}"
    horner = "c[5]"
    for c in reversed(range(5)):
        horner = f"({horner}) * f + c[{c}]"

    def make() -> str:
        coeffs = ", ".join(f"{c!r}f" for c in _EXP2_COEFFS)
        return (f"static inline {v} {name}({v} x) {{\n"
                f"  static const float c[6] = {{{coeffs}}};\n"
                f"  {m} under = x < -126.0f;\n"
                f"  {v} xc = ({v})((({m})x & ~under) | (({m})(({v}){{0}} - 126.0f) & under));\n"
                f"  {v} t = xc + 12582912.0f, f = xc - (t - 12582912.0f);\n"
                f"  {v} p = 1.0f + f * ({horner});\n"
                f"  {v} r = p * ({v})((({m})t << 23) + 0x3F800000);\n"
                f"  return ({v})(({m})r & ~under);\n}}")

    return lib._helper(name, make)


def _transpose(lanes: int) -> str:
    """C that transposes the lanes x lanes block b[0..lanes) of vectors in registers: for each block
    size h = lanes / 2, ..., 1, rows i and i + h (i & h == 0) swap the off-diagonal h x h blocks."""
    lines = []
    h = lanes // 2
    while h:
        for i in range(lanes):
            if i & h:
                continue
            lo = ", ".join(str(c if not c & h else lanes + c - h) for c in range(lanes))
            hi = ", ".join(str(c + h if not c & h else lanes + c) for c in range(lanes))
            lines.append(f"      {{ V x = b[{i}], y = b[{i + h}]; b[{i}] = __builtin_shuffle(x, y, (M){{{lo}}}); "
                         f"b[{i + h}] = __builtin_shuffle(x, y, (M){{{hi}}}); }}\n")
        h //= 2
    return "".join(lines)


# the mask of key j for W queries (lanes past nq read nothing): `keep` (int32 lanes, -1 kept), the scores `x`
_CAUSAL = "        keep &= (int32_t)(j0 + j) <= iota + (int32_t)i0;\n"
_MASKS = {
    "none": "",
    "bool": """\
        {
          const uint8_t* mj = mask + i0 * m_rs + (j0 + j) * m_cs;
          M mb = (M){0} + (m_rs == 0 ? (int32_t)mj[0] : 0);
          if (m_rs != 0)
            for (int t = 0; t < W; ++t) mb[t] = h * W + t < nq ? mj[t * m_rs] : 1;
          keep &= mb != 0;
        }
""",
    "additive": """\
        {
          const float* mj = mask + i0 * m_rs + (j0 + j) * m_cs;
          V add = zero + (m_rs == 0 ? mj[0] : 0.0f);
          if (m_rs != 0)
            for (int t = 0; t < W; ++t) add[t] = h * W + t < nq ? mj[t * m_rs] : 0.0f;
          x += add * 1.44269504088896341f;  /* in base-2 units, as the scores */
        }
""",
}


def attention(lib: CPrelude, mask: str, causal: bool, lanes: int, appended: bool = False) -> str:
    """The name of the routine's C function for this variant (`ember_attention_<mask>[_causal]`),
    for vectors of `lanes` float32 lanes (one width per unit: its target's), its scratch the
    thread's (`lib.thread_scratch`, at the target's alignment), written into the prelude the first time."""
    name = f"ember_attention_{mask}{'_causal' if causal else ''}{'_appended' if appended else ''}"

    def make() -> str:
        v, u, m = lib.vec("float32", lanes), lib.unaligned_vec("float32", lanes), lib.mask(32, lanes)
        masking = (_CAUSAL if causal else "") + _MASKS[mask]
        if mask == "none":  # masked and maximized as the tiles are stored: no pass of its own
            tile_store, mask_pass = _TILE_STORE_MAX.format(causal=_TILE_CAUSAL if causal else ""), _MAX_OF_TILES
        else:
            tile_store, mask_pass = _TILE_STORE, _MASK_PASS.format(masking=masking)
        mask_param = {"none": "", "bool": " const uint8_t* restrict mask,",
                      "additive": " const float* restrict mask,"}[mask]
        body = _BODY.format(
            name=name, mask_param=mask_param, rows=ATTENTION_ROWS, keys=KEYS,
            mr=SCORE_ROWS, or_=OUT_ROWS, lanes=lanes, iota=", ".join(map(str, range(lanes))),
            kend="q0 + nq < S ? q0 + nq : S" if causal else "S", tile_store=tile_store, mask_pass=mask_pass,
            transpose=_transpose(lanes), scratch=c_runtime.thread_scratch(lib),
            new_param=" const float* restrict k_new, const float* restrict v_new," if appended else "",
            last_group=" || j0 + jg + MR >= S" if appended else "",
            key_row="(j0 + jg + r == S - 1 ? k_new : kr + r * k_rs)" if appended else "(kr + r * k_rs)",
            value_row="(j0 + j == S - 1 ? v_new : v + (j0 + j) * v_rs)" if appended else "(v + (j0 + j) * v_rs)",
            exp2=_exp2_nonpositive(lib, v, m))
        return (f"#define V {v}\n#define U {u}\n#define M {m}\n"
                f"#define SEL(k, a, b) ((V)(((M)(a) & (k)) | ((M)(b) & ~(k))))\n{body}\n"
                "#undef V\n#undef U\n#undef M\n#undef SEL")

    return lib._helper(name, make)

"""The C of the attention routine (ember.tir.routines: the calling convention): one call computes
the output rows of one block of R = ATTENTION_ROWS queries (whole vectors of W lanes) of one
(batch, head), flash-attention style.

The scores of a block of BK keys are computed transposed, keys x queries (s[j][i]), in a register
tile of MR keys x R / W vectors of queries (GEMM's micro-kernel: loads of the transposed, scaled
q, MR broadcasts of k read in place, MR R / W FMAs per step of e), so that k needs no packing
and the softmax of W queries is vector arithmetic down the keys: the mask, the block's maximum,
the running maximum, exp (c_vmath's vector exp) and the running sum per query, and the factor
exp(old max - new max) that rescales the output accumulator when the maximum grew. Then the
output accumulator += p v in a register tile of OR queries x up to 4 vectors (broadcasts of p,
loads of rows of v). At the end each row is divided by its sum (0 / 0 = NaN for a row whose keys
were all masked out, as in PyTorch). Only one block of scores is alive: scratch of
O(R x (BK + E + Ev)) per call, nothing of size L x S.

Vectors are W = 16 float32 lanes (one AVX-512 register, two AVX ones). Only whole vectors inside
the caller's arrays are loaded: the last keys of a block are copied, and the tails of the rows
of v and the mask go lane by lane.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tir.routines import ATTENTION_ROWS
from .c_vmath import vector_math

if TYPE_CHECKING:
    from .c_prelude import CPrelude

LANES = 16
KEYS = 128  # keys per block (BK): the scores of a block of rows stay in L1
SCORE_ROWS = 8  # rows of the scores' register tile (x 2 vectors)
OUT_ROWS = 4  # rows of the output's register tile (x up to 4 vectors)

_BODY = """\
static void {name}(const float* restrict q, const float* restrict k, const float* restrict v,{mask_param}
                   float* restrict out, int64_t q0, int64_t nq, int64_t S, int64_t E, int64_t Ev, int64_t q_rs,
                   int64_t k_rs, int64_t v_rs, int64_t o_rs, int64_t m_rs, int64_t m_cs, float scale) {{
  enum {{ R = {rows}, BK = {keys}, MR = {mr}, OR = {or_}, W = {lanes}, NV = R / W }};
  _Static_assert(R % W == 0 && R % OR == 0, "a block of queries is whole vectors and register tiles");
  (void)m_rs; (void)m_cs;
  const V ninf = (V){{0}} - INFINITY, zero = (V){{0}};
  const M iota = (M){{{iota}}};
  int64_t evp = (Ev + W - 1) / W * W, kbp = (MR * E + W - 1) / W * W;
  float* scratch = aligned_alloc(64, sizeof(float) * (size_t)(E * R + (BK + MR) * R + R * evp + kbp + 3 * R));
  float *qt = scratch, *s = qt + E * R, *o = s + (BK + MR) * R, *kb = o + R * evp, *m = kb + kbp, *l = m + R;
  float* alpha = l + R;
  /* q transposed (qt[e][i]) and scaled; the queries past nq are zero */
  for (int64_t e = 0; e < E; ++e)
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
    for (int64_t jg = 0; jg < nk; jg += MR) {{
      const float* kr = k + (j0 + jg) * k_rs;
      int64_t krs = k_rs;
      if (jg + MR > nk) {{  /* the last keys, copied (never a row past the caller's array) */
        for (int64_t r = 0; r < MR; ++r)
          for (int64_t e = 0; e < E; ++e) kb[r * E + e] = jg + r < nk ? kr[r * k_rs + e] : 0.0f;
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
      for (int r = 0; r < MR; ++r)
        for (int t = 0; t < NV; ++t) *(V*)(s + (jg + r) * R + t * W) = acc[r][t];
    }}
    /* online softmax, W queries at a time: mask, running max and sum per query */
    for (int h = 0; h < NV; ++h) {{
      int64_t i0 = q0 + h * W;
      M rows = iota + (int32_t)(h * W) < (int32_t)nq;
      V vmax = ninf;
      for (int64_t j = 0; j < nk; ++j) {{
        V x = *(V*)(s + j * R + h * W);
        M keep = rows;
{masking}        x = SEL(keep, x, ninf);
        *(V*)(s + j * R + h * W) = x;
        vmax = SEL(x > vmax, x, vmax);
      }}
      V mold = *(V*)(m + h * W);
      V mnew = SEL(vmax > mold, vmax, mold);
      V msafe = SEL(mnew == ninf, zero, mnew);  /* every key so far masked out: p = 0 */
      V sum = zero;
      for (int64_t j = 0; j < nk; ++j) {{
        V p = {expv}(*(V*)(s + j * R + h * W) - msafe);
        *(V*)(s + j * R + h * W) = p;
        sum += p;
      }}
      V a = {expv}(mold - msafe);
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
          const float* vr = v + (j0 + j) * v_rs + c;
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
          const float* vr = v + (j0 + j) * v_rs + c;
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
    float inv = 1.0f / l[i];  /* every key masked out: 0 * inf = NaN */
    for (int64_t c = 0; c < Ev; ++c) out[(q0 + i) * o_rs + c] = o[i * evp + c] * inv;
  }}
  free(scratch);
}}"""

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
          x += add;
        }
""",
}


def attention(lib: CPrelude, mask: str, causal: bool) -> str:
    """The name of the routine's C function for this variant (`ember_attention_<mask>[_causal]`),
    written into the prelude the first time."""
    name = f"ember_attention_{mask}{'_causal' if causal else ''}"

    def make() -> str:
        v, u, m = lib.vec("float32", LANES), lib.unaligned_vec("float32", LANES), lib.mask(32, LANES)
        masking = (_CAUSAL if causal else "") + _MASKS[mask]
        mask_param = {"none": "", "bool": " const uint8_t* restrict mask,",
                      "additive": " const float* restrict mask,"}[mask]
        body = _BODY.format(
            name=name, mask_param=mask_param, rows=ATTENTION_ROWS, keys=KEYS,
            mr=SCORE_ROWS, or_=OUT_ROWS, lanes=LANES, iota=", ".join(map(str, range(LANES))),
            kend="q0 + nq < S ? q0 + nq : S" if causal else "S", masking=masking,
            expv=vector_math(lib, "exp", "float32", LANES))
        return (f"#define V {v}\n#define U {u}\n#define M {m}\n"
                f"#define SEL(k, a, b) ((V)(((M)(a) & (k)) | ((M)(b) & ~(k))))\n{body}\n"
                "#undef V\n#undef U\n#undef M\n#undef SEL")

    return lib._helper(name, make)

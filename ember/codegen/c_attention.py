"""The C of the attention routine (ember.tir.routines: the calling convention): one call computes
the output rows of one block of queries of one (batch, head), flash-attention style.

Per block of BK keys: the scores of the block (queries x keys) in a register tile of MR rows x 2
vectors over the packed panels of k (GEMM's micro-kernel: a broadcast of q, two loads of a panel
row, 2 MR FMAs per step of e); then per row the mask, the block's maximum, the running maximum,
exp (c_vmath's vector exp) and the running sum, and the output accumulator rescaled by
exp(old max - new max) when the maximum grew; then the output accumulator += p v in a register
tile of 4 rows x up to 4 vectors (broadcasts of p, loads of rows of v). At the end each row is
divided by its sum (0 / 0 = NaN for a row whose keys were all masked out, as in PyTorch). The
scores of one block of keys are the only ones alive: scratch of O(rows x (BK + E + Ev)) per call.

Vectors are 16 float32 lanes (one AVX-512 register, two AVX ones). Only whole vectors inside
the caller's arrays are loaded: the tails of the rows of v and of the mask go lane by lane.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tir.routines import ATTENTION_PANEL, ATTENTION_ROWS
from .c_vmath import vector_math

if TYPE_CHECKING:
    from .c_prelude import CPrelude

LANES = 16
KEYS = 128  # keys per block (BK): the scores of a block of rows stay in L1
SCORE_ROWS = 8  # rows of the scores' register tile (x 2 vectors)
OUT_ROWS = 4  # rows of the output's register tile (x up to 4 vectors)

_BODY = """\
static void {name}(const float* restrict q, const float* restrict kt, const float* restrict v,{mask_param}
                   float* restrict out, int64_t q0, int64_t nq, int64_t S, int64_t E, int64_t Ev, int64_t q_rs,
                   int64_t v_rs, int64_t o_rs, int64_t m_rs, int64_t m_cs, float scale) {{
  enum {{ R = {rows}, P = {panel}, BK = {keys}, MR = {mr}, OR = {or_}, W = {lanes} }};
  (void)m_rs; (void)m_cs;
  const V ninf = (V){{0}} - INFINITY;
  const M iota = (M){{{iota}}};
  int64_t rows = (nq + MR - 1) / MR * MR, evp = (Ev + W - 1) / W * W, ep = (E + W - 1) / W * W;
  float* scratch = aligned_alloc(64, sizeof(float) * (size_t)(rows * ep + R * BK + R * evp + 2 * W + 2 * R));
  float *qs = scratch, *s = qs + rows * ep, *o = s + R * BK, *m = o + R * evp, *l = m + R;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t e = 0; e < E; ++e) qs[r * E + e] = r < nq ? q[(q0 + r) * q_rs + e] * scale : 0.0f;
  for (int64_t r = 0; r < R; ++r) {{
    m[r] = -INFINITY;
    l[r] = 0.0f;
    for (int64_t c = 0; c < evp; ++c) o[r * evp + c] = 0.0f;
  }}
  int64_t kend = {kend};
  for (int64_t j0 = 0; j0 < kend; j0 += BK) {{
    int64_t nk = kend - j0 < BK ? kend - j0 : BK, nkp = (nk + P - 1) / P * P;
    /* scores: s[r][jj] = q[r] . k[j0 + jj], an MR x 2W register tile per step */
    for (int64_t rg = 0; rg < rows; rg += MR) {{
      for (int64_t jc = 0; jc < nkp; jc += P) {{
        const float* panel = kt + (j0 + jc) / P * E * P;
        V acc[MR][2];
        for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = (V){{0}};
        for (int64_t e = 0; e < E; ++e) {{
          V b0 = *(const U*)(panel + e * P), b1 = *(const U*)(panel + e * P + W);
#pragma GCC unroll {mr}
          for (int r = 0; r < MR; ++r) {{
            float a = qs[(rg + r) * E + e];
            acc[r][0] += a * b0;
            acc[r][1] += a * b1;
          }}
        }}
        for (int r = 0; r < MR; ++r) {{
          *(U*)(s + (rg + r) * BK + jc) = acc[r][0];
          *(U*)(s + (rg + r) * BK + jc + W) = acc[r][1];
        }}
      }}
    }}
    /* online softmax, row by row: mask, running max and sum, rescale the output */
    for (int64_t r = 0; r < nq; ++r) {{
      float* row = s + r * BK;
      int64_t i = q0 + r;
      V vmax = ninf;
      for (int64_t c = 0; c < nkp; c += W) {{
        V x = *(U*)(row + c);
        M keep = iota + (int32_t)c < (int32_t)nk;
{masking}        x = SEL(keep, x, ninf);
        *(U*)(row + c) = x;
        vmax = SEL(x > vmax, x, vmax);
      }}
      float mx = -INFINITY;
      for (int t = 0; t < W; ++t) mx = vmax[t] > mx ? vmax[t] : mx;
      float mnew = mx > m[r] ? mx : m[r];
      if (mnew == -INFINITY) {{  /* every key so far masked out: p = 0 */
        for (int64_t c = 0; c < nkp; ++c) row[c] = 0.0f;
        continue;
      }}
      float alpha = {exp1}(m[r] - mnew);
      V vsum = (V){{0}};
      for (int64_t c = 0; c < nkp; c += W) {{
        V p = {expv}(*(U*)(row + c) - mnew);
        *(U*)(row + c) = p;
        vsum += p;
      }}
      float sum = 0.0f;
      for (int t = 0; t < W; ++t) sum += vsum[t];
      l[r] = l[r] * alpha + sum;
      m[r] = mnew;
      if (alpha != 1.0f)
        for (int64_t c = 0; c < evp; c += W) *(V*)(o + r * evp + c) *= alpha;
    }}
    for (int64_t r = nq; r < (nq + OR - 1) / OR * OR; ++r)
      for (int64_t c = 0; c < nkp; ++c) s[r * BK + c] = 0.0f;
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
            float p = s[(rg + r) * BK + j];
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
          V b = (V){{0}};
          if (width == W) b = *(const U*)vr;
          else for (int64_t t = 0; t < width; ++t) b[t] = vr[t];
#pragma GCC unroll {or_}
          for (int r = 0; r < OR; ++r) acc[r] += s[(rg + r) * BK + j] * b;
        }}
        for (int r = 0; r < OR; ++r) *(V*)(o + (rg + r) * evp + c) = acc[r];
      }}
    }}
  }}
  for (int64_t r = 0; r < nq; ++r) {{
    float inv = 1.0f / l[r];  /* every key masked out: 0 * inf = NaN */
    for (int64_t c = 0; c < Ev; ++c) out[(q0 + r) * o_rs + c] = o[r * evp + c] * inv;
  }}
  free(scratch);
}}"""

# the mask of one vector of keys: `keep` (int32 lanes, -1 kept) and the scores `x`
_CAUSAL = "        keep &= iota + (int32_t)(j0 + c) <= (int32_t)i;\n"
_MASKS = {
    "none": "",
    "bool": """\
        {{
          M mb = (M){{0}};
          const uint8_t* mr_ = mask + i * m_rs + (j0 + c) * m_cs;
          if (m_cs == 1 && c + W <= nk) mb = __builtin_convertvector(*(const {bytes}*)mr_, M);
          else for (int64_t t = 0; t < W && c + t < nk; ++t) mb[t] = mr_[t * m_cs];
          keep &= mb != 0;
        }}
""",
    "additive": """\
        {{
          V add = (V){{0}};
          const float* mr_ = mask + i * m_rs + (j0 + c) * m_cs;
          if (m_cs == 1 && c + W <= nk) add = *(const U*)mr_;
          else for (int64_t t = 0; t < W && c + t < nk; ++t) add[t] = mr_[t * m_cs];
          x += add;
        }}
""",
}


def attention(lib: CPrelude, mask: str, causal: bool) -> str:
    """The name of the routine's C function for this variant (`ember_attention_<mask>[_causal]`),
    written into the prelude the first time."""
    name = f"ember_attention_{mask}{'_causal' if causal else ''}"

    def make() -> str:
        v, u, m = lib.vec("float32", LANES), lib.unaligned_vec("float32", LANES), lib.mask(32, LANES)
        masking = (_CAUSAL if causal else "") + _MASKS[mask].format(bytes=lib.unaligned_vec("uint8", LANES))
        mask_param = {"none": "", "bool": " const uint8_t* restrict mask,",
                      "additive": " const float* restrict mask,"}[mask]
        body = _BODY.format(
            name=name, mask_param=mask_param, rows=ATTENTION_ROWS, panel=ATTENTION_PANEL, keys=KEYS,
            mr=SCORE_ROWS, or_=OUT_ROWS, lanes=LANES, iota=", ".join(map(str, range(LANES))),
            kend="q0 + nq < S ? q0 + nq : S" if causal else "S", masking=masking,
            exp1=vector_math(lib, "exp", "float32", 1), expv=vector_math(lib, "exp", "float32", LANES))
        return (f"#define V {v}\n#define U {u}\n#define M {m}\n"
                f"#define SEL(k, a, b) ((V)(((M)(a) & (k)) | ((M)(b) & ~(k))))\n{body}\n"
                "#undef V\n#undef U\n#undef M\n#undef SEL")

    return lib._helper(name, make)

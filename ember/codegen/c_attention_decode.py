"""The C of the decode attention routine (ember.tir.routines.ATTENTION_DECODE: the calling
convention): one query of each of the G query heads that share a key/value head, the keys and
values read once for all G.

A decode step's attention is a GEMV over the cache: each key is read once and used for one dot
product per head, so the general routine's 32-query register tile (c_attention) would compute
32 rows of scores to keep one. Here the G queries are scaled (log2 e folded in, as there) into
scratch, and each block of BK keys takes three passes, each vectorized over the head dimension
or the block's keys:

    scores  s[g][j] = q_g . k_j: W-lane FMAs over the head dimension, one horizontal sum a key
    softmax the block's maximum per head, p = 2^(s - max) over W keys at a time, the running
            sum, and the output rescaled when the maximum grew (online softmax)
    p v     o_g += p[g][j] v_j: up to 4 W-lane accumulators over the value dimension, down the keys

A cache kept in bfloat16 (kv "bfloat16") is widened in registers as it is loaded (a shift of each
16-bit lane into a float's upper half): half the bytes read, no converted copy. One kept in int8
(kv "int8": rows of codes and a float32 scale, ember.tir.kv_int8) is widened and converted the
same way (a quarter of the bytes), its scales folded into the sums: a key's scale multiplies its
score once (q . (c s) = (q . c) s), a value's its weight p once. The step's own key and value
(appended) are float32 and run as a last block of one key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import c_runtime, c_x86
from .c_attention import _exp2_nonpositive

if TYPE_CHECKING:
    from .c_prelude import CPrelude

KEYS = 64  # keys per block: their scores and, for p v, their values stay in L1
PREFETCH = 16  # keys ahead that the scores pass prefetches
SPAN = 256  # bytes of each of those keys' rows prefetched, from the head's own: the next heads' too

_TYPED = """\
static inline void {name}_scores{suffix}(const float* restrict qs, const {kt}* restrict k, const {kt}* restrict v,
                                         int64_t nk, int64_t k_rs, int64_t v_rs, int64_t G, int64_t E, int64_t ep,
                                         float* restrict s) {{
  int64_t ew = E / W * W;
  int64_t span = k_rs * (int64_t)sizeof({kt}) < SPAN ? k_rs * (int64_t)sizeof({kt}) : SPAN;
  for (int64_t j = 0; j < nk; ++j) {{
    const {kt}* kr = k + j * k_rs;
    /* the keys' and values' rows PREFETCH ahead: a head's rows are strided (the cache
       position-major, heads interleaved), often a page apart, where the hardware's prefetchers
       stop; SPAN bytes from the head's own row, so that the next heads' rows (their calls come
       next) are on their way too: a row of 68 bytes (int8) fetched alone from memory left the
       call waiting on each (GPT-2's 12 heads at 991 positions, the cache out of the caches, one
       thread of a loaded AMD EPYC Zen 5: int8 203 -> 107 us, bfloat16 271 -> 172, float32 same) */
    for (int64_t b = 0; b < span; b += 64) {{
      __builtin_prefetch((const char*)(kr + PREFETCH * k_rs) + b);
      __builtin_prefetch((const char*)(v + (j + PREFETCH) * v_rs) + b);
    }}
    for (int64_t g = 0; g < G; ++g) {{
      const float* qg = qs + g * ep;
      V acc = (V){{0}};
      for (int64_t e = 0; e < ew; e += W) acc += *(const V*)(qg + e) * {load}(kr + e);
      float x = {hsum}(acc);
      for (int64_t e = ew; e < E; ++e) x += qg[e] * {scalar}(kr[e]);
      s[g * BK + j] = x{kscale};
    }}
  }}
}}
static inline void {name}_pv{suffix}(const float* restrict p, const {kt}* restrict v, int64_t nk, int64_t v_rs,
                                     int64_t G, int64_t Ev, int64_t evp, float* restrict o) {{
  for (int64_t g = 0; g < G; ++g) {{
    const float* pg = p + g * BK;
    float* og = o + g * evp;
    int64_t c = 0;
    for (; c + 4 * W <= Ev; c += 4 * W) {{
      V a0 = *(V*)(og + c), a1 = *(V*)(og + c + W), a2 = *(V*)(og + c + 2 * W), a3 = *(V*)(og + c + 3 * W);
      for (int64_t j = 0; j < nk; ++j) {{
        const {kt}* vr = v + j * v_rs + c;
        float pj = pg[j]{vscale};
        a0 += pj * {load}(vr);
        a1 += pj * {load}(vr + W);
        a2 += pj * {load}(vr + 2 * W);
        a3 += pj * {load}(vr + 3 * W);
      }}
      *(V*)(og + c) = a0;
      *(V*)(og + c + W) = a1;
      *(V*)(og + c + 2 * W) = a2;
      *(V*)(og + c + 3 * W) = a3;
    }}
    for (; c + W <= Ev; c += W) {{
      V a = *(V*)(og + c);
      for (int64_t j = 0; j < nk; ++j) a += pg[j]{vscale} * {load}(v + j * v_rs + c);
      *(V*)(og + c) = a;
    }}
    for (; c < Ev; ++c) {{
      float a = og[c];
      for (int64_t j = 0; j < nk; ++j) a += pg[j]{vscale} * {scalar}(v[j * v_rs + c]);
      og[c] = a;
    }}
  }}
}}
"""

_SOFTMAX = """\
/* the block's nk scores of each head as p = 2^(s - max) in place, the running maximum and sum,
   and the output rescaled by 2^(old max - new max) when the maximum grew */
static inline void {name}_softmax(float* restrict s, int64_t nk, int64_t G, float* restrict o, int64_t evp,
                                  float* restrict m, float* restrict l) {{
  const V ninf = (V){{0}} - INFINITY;
  int64_t nkp = (nk + W - 1) / W * W;
  for (int64_t g = 0; g < G; ++g) {{
    float* sg = s + g * BK;
    for (int64_t j = nk; j < nkp; ++j) sg[j] = -INFINITY;
    V vmax = ninf;
    for (int64_t j = 0; j < nkp; j += W) {{
      V x = *(V*)(sg + j);
      vmax = SEL(x > vmax, x, vmax);
    }}
    float bmax = {hmax}(vmax), mold = m[g];
    float mnew = bmax > mold ? bmax : mold;
    float msafe = mnew == -INFINITY ? 0.0f : mnew;  /* every key so far masked out: p = 0 */
    V sum = (V){{0}}, shift = (V){{0}} + msafe;
    for (int64_t j = 0; j < nkp; j += W) {{
      V p = {exp2}(*(V*)(sg + j) - shift);
      *(V*)(sg + j) = p;
      sum += p;
    }}
    float a = {exp2}((V){{0}} + (mold - msafe))[0];
    l[g] = l[g] * a + {hsum}(sum);
    m[g] = mnew;
    if (a != 1.0f)
      for (int64_t c = 0; c < evp; c += W) *(V*)(o + g * evp + c) *= a;
  }}
}}
"""

_BODY = """\
static void {name}(const float* restrict q, const {kt}* restrict k, const {kt}* restrict v,{mask_param}{new_param}
                   float* restrict out, int64_t G, int64_t S, int64_t E, int64_t Ev, int64_t q_hs, int64_t k_rs,
                   int64_t v_rs, int64_t o_hs, int64_t m_hs, int64_t m_cs, float scale) {{
  (void)m_hs; (void)m_cs;
  scale *= 1.44269504088896341f;  /* scores in base-2 units (log2 e folded into q) */
  int64_t ep = (E + W - 1) / W * W, evp = (Ev + W - 1) / W * W;
  float* scratch = {scratch}(sizeof(float) * (size_t)(G * (ep + BK + evp + 2)));
  float *qs = scratch, *s = qs + G * ep, *o = s + G * BK, *m = o + G * evp, *l = m + G;
  for (int64_t g = 0; g < G; ++g) {{
    for (int64_t e = 0; e < ep; ++e) qs[g * ep + e] = e < E ? q[g * q_hs + e] * scale : 0.0f;
    for (int64_t c = 0; c < evp; ++c) o[g * evp + c] = 0.0f;
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }}
  int64_t cached = {cached};
  for (int64_t j0 = 0; j0 < cached; j0 += BK) {{
    int64_t nk = cached - j0 < BK ? cached - j0 : BK;
    {name}_scores(qs, k + j0 * k_rs, v + j0 * v_rs, nk, k_rs, v_rs, G, E, ep, s);
{mask_block}    {name}_softmax(s, nk, G, o, evp, m, l);
    {name}_pv(s, v + j0 * v_rs, nk, v_rs, G, Ev, evp, o);
  }}
{appended}  for (int64_t g = 0; g < G; ++g) {{
    float inv = l[g] == 0.0f ? 0.0f : 1.0f / l[g];  /* every key masked out: 0, as torch gives */
    for (int64_t c = 0; c < Ev; ++c) out[g * o_hs + c] = o[g * evp + c] * inv;
  }}
}}
"""

_APPENDED = """\
  {{  /* the step's own key and value (float32), a block of one key */
    int64_t j0 = S - 1, nk = 1;
    {name}_scores_new(qs, k_new, v_new, 1, 0, 0, G, E, ep, s);
{mask_block}    {name}_softmax(s, nk, G, o, evp, m, l);
    {name}_pv_new(s, v_new, 1, 0, G, Ev, evp, o);
  }}
"""

_MASK_BLOCKS = {
    "none": "",
    "bool": """\
    for (int64_t g = 0; g < G; ++g)
      for (int64_t j = 0; j < nk; ++j)
        if (!mask[g * m_hs + (j0 + j) * m_cs]) s[g * BK + j] = -INFINITY;
""",
    "additive": """\
    for (int64_t g = 0; g < G; ++g)
      for (int64_t j = 0; j < nk; ++j) s[g * BK + j] += mask[g * m_hs + (j0 + j) * m_cs] * 1.44269504088896341f;
""",
}


def _reduce(lib: CPrelude, op: str, lanes: int) -> str:
    """`float name(float32xW)`: the sum ("sum") or maximum ("max") of a vector's lanes, by halving
    shuffles (log2 W steps), lane 0 holding the result."""
    v, m = lib.vec("float32", lanes), lib.mask(32, lanes)
    name = f"ember_h{op}_x{lanes}"

    def make() -> str:
        lines = [f"static inline float {name}({v} x) {{"]
        h = lanes // 2
        while h:
            perm = ", ".join(str((i + h) % lanes) for i in range(lanes))
            lines.append(f"  {{ {v} y = __builtin_shuffle(x, ({m}){{{perm}}}); " +
                         ("x += y; }" if op == "sum" else f"x = ({v})((({m})x & (x >= y)) | (({m})y & (x < y))); }}"))
            h //= 2
        lines.append("  return x[0];\n}")
        return "\n".join(lines)

    return lib._helper(name, make)


def _row_scale(lib: CPrelude) -> str:
    """`float ember_kv_row_scale(const int8_t* p)`: the float32 scale stored at p (an int8 cache
    row's, after its codes: any alignment)."""
    name = "ember_kv_row_scale"
    return lib._helper(name, lambda: (
        f"static inline float {name}(const int8_t* p) {{ float s; __builtin_memcpy(&s, p, 4); return s; }}"))


def attention_decode(lib: CPrelude, mask: str, kv: str, lanes: int, appended: bool = False) -> str:
    """The name of the routine's C function for this variant (`ember_attention_decode_<mask>_<kv>
    [_appended]`), for vectors of `lanes` float32 lanes, written into the prelude the first time."""
    name = f"ember_attention_decode_{mask}_{kv}{'_appended' if appended else ''}"

    def make() -> str:
        v, u, m = lib.vec("float32", lanes), lib.unaligned_vec("float32", lanes), lib.mask(32, lanes)
        helpers = dict(hsum=_reduce(lib, "sum", lanes), hmax=_reduce(lib, "max", lanes),
                       exp2=_exp2_nonpositive(lib, v, m))
        f32 = dict(kt="float", load="LOADF", scalar="", kscale="", vscale="")
        if kv == "bfloat16":
            b, bu = lib.vec("bfloat16", lanes), lib.unaligned_vec("bfloat16", lanes)
            loads = f"#define LOADK(p) {lib.bf16_widen(lanes)}(({b})(*(const {bu}*)(p)))\n"
            typed = dict(f32, kt=lib.types["bfloat16"], load="LOADK", scalar=lib.bf16_to_float())
        elif kv == "int8":
            # (bytes to int32 by one vpmovsxbd: GCC 12 converts bytes to floats a lane at a time)
            widen, b = c_x86.widen_int32(lib, "int8", lanes), lib.unaligned_vec("int8", lanes)
            loads = f"#define LOADK(p) __builtin_convertvector({widen}(*(const {b}*)(p)), V)\n"
            scale = _row_scale(lib)
            typed = dict(kt=lib.types["int8"], load="LOADK", scalar="(float)", kscale=f" * {scale}(kr + E)",
                         vscale=f" * {scale}(v + j * v_rs + Ev)")
        else:
            loads, typed = "", f32
        mask_block = _MASK_BLOCKS[mask]
        text = _TYPED.format(name=name, suffix="", **typed, **helpers)
        if appended:
            text += _TYPED.format(name=name, suffix="_new", **f32, **helpers)
        text += _SOFTMAX.format(name=name, **helpers)
        text += _BODY.format(
            name=name, kt=typed["kt"], scratch=c_runtime.thread_scratch(lib), cached="S - 1" if appended else "S",
            mask_param={"none": "", "bool": " const uint8_t* restrict mask,",
                        "additive": " const float* restrict mask,"}[mask],
            new_param=" const float* restrict k_new, const float* restrict v_new," if appended else "",
            mask_block=mask_block,
            appended=_APPENDED.format(name=name, mask_block=mask_block) if appended else "")
        return (f"#define V {v}\n#define M {m}\n#define BK {KEYS}\n#define W {lanes}\n#define PREFETCH {PREFETCH}\n"
                f"#define SPAN {SPAN}\n"
                f"#define LOADF(p) ((V)(*(const {u}*)(p)))\n{loads}"
                f"#define SEL(k, a, b) ((V)(((M)(a) & (k)) | ((M)(b) & ~(k))))\n{text}"
                "#undef V\n#undef M\n#undef BK\n#undef W\n#undef PREFETCH\n#undef SPAN\n#undef LOADF\n#undef LOADK\n"
                "#undef SEL")

    return lib._helper(name, make)

"""The C of the decode attention routine (ember.tir.routines.ATTENTION_DECODE: the calling
convention): one query of each of the H * G query heads, G over each of H key/value heads, the
keys and values read once for all G, every head's keys of a block before the next block.

A decode step's attention is a GEMV over the cache: each key is read once and used for one dot
product per head, so the general routine's 32-query register tile (c_attention) would compute
32 rows of scores to keep one. Here the queries are scaled (log2 e folded in, as there) into
scratch, and each block of BK keys, for each key/value head, takes three passes, each vectorized
over the head dimension or the block's keys:

    scores  s[g][j] = q_g . k_j: W-lane FMAs over the head dimension; a group's heads take the
            horizontal sums of W keys at a time in one transposing tree, a single head one
            log2 W-step reduction a key
    softmax the block's maximum per head, p = 2^(s - max) over W keys at a time, the running
            sum, and the output rescaled when the maximum grew (online softmax)
    p v     o_g += p[g][j] v_j: up to 4 W-lane accumulators over the value dimension, down the keys;
            a group's G heads share each value's widening (G x 4 accumulators), where a pass per
            head widened every value G times

A cache kept in bfloat16 (kv "bfloat16") is widened in registers as it is loaded (a shift of each
16-bit lane into a float's upper half): half the bytes read, no converted copy. One kept in int8
(kv "int8": rows of codes and a float32 scale, ember.tir.kv_int8) is widened and converted the
same way (a quarter of the bytes), its scales folded into the sums: a key's scale multiplies its
score once (q . (c s) = (q . c) s), a value's its weight p once. The step's own key and value
(appended) are float32 and run as a last block of one key.

One call computes every head, a block of keys at a time: in a position-major cache (the step's
(1, past, heads, E)) a block's rows of all heads lie together, so that the cache streams once;
one call per head walked the whole cache per head, a row of 68 bytes (int8) at each position,
and each call ramped its prefetches up again. The keys are shared among the caller's OpenMP
threads (each thread's output, maximum and sum per head merged at the end, as flash-decoding
splits its keys), where there are PARALLEL_SCORES scores (a query head's against a key) a thread:
a contiguous range each of the items (block, key/value head) taken in that order, so that a long
cache splits by blocks (every head of each) and a cache of fewer blocks than threads by heads;
GPT-2's 12 heads over 128 positions (one block, 1536 scores) stay on one thread: split from 512
scores a thread, the call took 36-47 us at two threads against one thread's 15-21 (a quiet
2-core Zen 4, 6 alternating rounds) and was no faster at 1024 positions; a parallel loop over the
heads gave each thread rows strided through the whole cache. Each key's prefetch takes its head's
rows AHEAD keys on, the next block's, which the head reads after every other head's block: time enough for memory. The
prefetches go to L2 (prefetcht1), not L1: a block's rows of every head outnumber L1's outstanding
misses, and prefetcht0 held the loads of the block being computed behind them (LLaMA's 4 key/value
heads over 1023 int8 positions from memory, one thread of a Zen 4 EPYC: 117 -> 68 us a call,
benchmarks/attention_decode.py). Fewer prefetches are faster there still (an int8 row's: _prefetch),
one a row slower (its second line then missed).

An int8 cache's scores and p v, for heads of 64 or 128 values on a target with AVX-512 VNNI, are integer dot
products (ember.codegen.c_attention_decode_vnni): the scores on vpdpbusd, the query quantized into two bytes a value
once per call, 16 keys at a time; p v on vpdpwssd, each block's weights in 15 bits, two keys at a time. The block's
last keys that do not make 16 (scores) or 2 (p v) take the float path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tir.kv_int8 import SCALE_BYTES
from . import c_attention_decode_vnni as vnni
from . import c_runtime, c_x86
from .c_attention import _exp2_nonpositive

if TYPE_CHECKING:
    from .c_prelude import CPrelude

# keys per block: their scores stay in L1; the block's costs (the softmax's reductions and rescale,
# p v's int32 sums into the output) spread over 128 (LLaMA's 4 calls, in L2: 40 -> 36 us against 64)
KEYS = 128
assert KEYS * vnni.P_STEPS * 127 < 2**31  # p v's int32 sums of a block (c_attention_decode_vnni)
AHEAD = KEYS  # keys ahead that the scores pass prefetches a head's rows: the next block's
PARALLEL_SCORES = 4096  # scores (a query head's against a key) a thread computes at least (a fork: about 1 us)

_TYPED = """\
/* the lines of nk keys' and values' rows, each row's last byte's too (a head's rows are strided:
   the cache position-major, heads interleaved, where the hardware's prefetchers stop). (No
   select in the addresses: GCC 12 dropped every prefetch of a loop that had one.) */
static inline void {name}_fetch{suffix}(const {kt}* k, const {kt}* v, int64_t nk, int64_t k_rs, int64_t v_rs,
                                        int64_t E, int64_t Ev) {{
  int64_t kb = E * (int64_t)sizeof({kt}){extra}, vb = Ev * (int64_t)sizeof({kt}){extra};
  for (int64_t j = 0; j < nk; ++j) {{
    const char *kr = (const char*)(k + j * k_rs), *vr = (const char*)(v + j * v_rs);
    for (int64_t b = 0; b < kb; b += 64) PREFETCH(kr + b);
    for (int64_t b = 0; b < vb; b += 64) PREFETCH(vr + b);
    PREFETCH(kr + kb - 1);
    PREFETCH(vr + vb - 1);
  }}
}}
static inline void {name}_scores{suffix}(const float* restrict qs, const {kt}* restrict k, const {kt}* restrict v,
                                         int64_t done, int64_t nk, int64_t k_rs, int64_t v_rs, int64_t G, int64_t E,
                                         int64_t Ev, int64_t ep, float* restrict s) {{
  int64_t ew = E / W * W, kb = E * (int64_t)sizeof({kt}){extra}, vb = Ev * (int64_t)sizeof({kt}){extra};
  int64_t j = done;  /* (the keys before: scores_q16's) */
  /* a group's heads W keys at a time: each key's W-lane sums kept, then the W keys' horizontal
     sums in one transposing tree ({hsums}: 3 (W - 1) operations for W keys, where a sum a key took
     2 log2 W); a single head a key at a time (the tree was slower there: GPT-2's 12 heads over
     1000 positions from memory, one thread, 84 -> 91 us) */
  if (G > 1)
    for (; j + W <= nk; j += W) {{
      V part[{G}][W], ks;
      for (int64_t i = 0; i < W; ++i) {{
        const {kt}* kr = k + (j + i) * k_rs;
{prefetch_batch}        ks[i] = {kscale_of};
        for (int64_t g = 0; g < G; ++g) {{
          const float* qg = qs + g * ep;
          V acc = (V){{0}};
          for (int64_t e = 0; e < ew; e += W) acc += *(const V*)(qg + e) * {load}(kr + e);
          for (int64_t e = ew; e < E; ++e) acc[0] += qg[e] * {scalar}(kr[e]);
          part[g][i] = acc;
        }}
      }}
      for (int64_t g = 0; g < G; ++g) *(V*)(s + g * BK + j) = {hsums}(part[g]) * ks;
    }}
  for (; j < nk; ++j) {{
    const {kt}* kr = k + j * k_rs;
{prefetch_one}    for (int64_t g = 0; g < G; ++g) {{
      const float* qg = qs + g * ep;
      V acc = (V){{0}};
      for (int64_t e = 0; e < ew; e += W) acc += *(const V*)(qg + e) * {load}(kr + e);
      float x = {hsum}(acc);
      for (int64_t e = ew; e < E; ++e) x += qg[e] * {scalar}(kr[e]);
      s[g * BK + j] = x * {kscale_of};
    }}
  }}
}}
static inline void {name}_pv{suffix}(const float* restrict p, const {kt}* restrict v, int64_t nk, int64_t v_rs,
                                     int64_t G, int64_t Ev, int64_t evp, float* restrict o) {{
  int64_t c0 = 0;
  if (G > 1)  /* a group's heads share each value's widening (G x 4 accumulators: no latency to hide) */
    for (; c0 + 4 * W <= Ev; c0 += 4 * W) {{
      V a[{G}][4];
      for (int64_t g = 0; g < G; ++g)
        for (int t = 0; t < 4; ++t) a[g][t] = *(V*)(o + g * evp + c0 + t * W);
      for (int64_t j = 0; j < nk; ++j) {{
        const {kt}* vr = v + j * v_rs + c0;
        V x0 = {load}(vr), x1 = {load}(vr + W), x2 = {load}(vr + 2 * W), x3 = {load}(vr + 3 * W);
        float sj = 1.0f{vscale};
        for (int64_t g = 0; g < G; ++g) {{
          float pj = p[g * BK + j] * sj;
          a[g][0] += pj * x0;
          a[g][1] += pj * x1;
          a[g][2] += pj * x2;
          a[g][3] += pj * x3;
        }}
      }}
      for (int64_t g = 0; g < G; ++g)
        for (int t = 0; t < 4; ++t) *(V*)(o + g * evp + c0 + t * W) = a[g][t];
    }}
  for (int64_t g = 0; g < G; ++g) {{
    const float* pg = p + g * BK;
    float* og = o + g * evp;
    int64_t c = c0;
    for (; c + 4 * W <= Ev; c += 4 * W) {{
      /* two keys at a time into two sets of accumulators: one set waited on its FMAs' latency */
      V a0 = *(V*)(og + c), a1 = *(V*)(og + c + W), a2 = *(V*)(og + c + 2 * W), a3 = *(V*)(og + c + 3 * W);
      V b0 = (V){{0}}, b1 = (V){{0}}, b2 = (V){{0}}, b3 = (V){{0}};
      int64_t j = 0;
      for (; j + 2 <= nk; j += 2) {{
        const {kt}* vr = v + j * v_rs + c;
        float pj = pg[j]{vscale};
        a0 += pj * {load}(vr);
        a1 += pj * {load}(vr + W);
        a2 += pj * {load}(vr + 2 * W);
        a3 += pj * {load}(vr + 3 * W);
        vr += v_rs;
        float pk = pg[j + 1]{vscale1};
        b0 += pk * {load}(vr);
        b1 += pk * {load}(vr + W);
        b2 += pk * {load}(vr + 2 * W);
        b3 += pk * {load}(vr + 3 * W);
      }}
      for (; j < nk; ++j) {{
        const {kt}* vr = v + j * v_rs + c;
        float pj = pg[j]{vscale};
        a0 += pj * {load}(vr);
        a1 += pj * {load}(vr + W);
        a2 += pj * {load}(vr + 2 * W);
        a3 += pj * {load}(vr + 3 * W);
      }}
      *(V*)(og + c) = a0 + b0;
      *(V*)(og + c + W) = a1 + b1;
      *(V*)(og + c + 2 * W) = a2 + b2;
      *(V*)(og + c + 3 * W) = a3 + b3;
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
    float a = mnew == mold ? 1.0f : {exp2}((V){{0}} + (mold - msafe))[0];  /* (most blocks: no new maximum) */
    l[g] = l[g] * a + {hsum}(sum);
    m[g] = mnew;
    if (a != 1.0f)
      for (int64_t c = 0; c < evp; c += W) *(V*)(o + g * evp + c) *= a;
  }}
}}
"""

_BODY = """\
static void {name}(const float* restrict q, const {kt}* restrict k, const {kt}* restrict v,{mask_param}{new_param}
                   float* restrict out, int64_t H, int64_t g_count, int64_t S, int64_t e_dim, int64_t ev_dim,
                   int64_t q_hs, int64_t k_hs, int64_t k_rs, int64_t v_hs, int64_t v_rs, int64_t o_hs, int64_t m_hs,
                   int64_t m_cs, int64_t kn_hs, int64_t vn_hs, float scale) {{
  (void)m_hs; (void)m_cs; (void)kn_hs; (void)vn_hs;
  (void)g_count; (void)e_dim; (void)ev_dim;  /* the variant's: constants in its text */
  scale *= 1.44269504088896341f;  /* scores in base-2 units (log2 e folded into q) */
  int64_t Q = H * {G}, ep = ({E} + W - 1) / W * W, evp = ({Ev} + W - 1) / W * W;
  int64_t part = Q * evp + (2 * Q + W - 1) / W * W;  /* whole vectors: every part aligned */
  int64_t cached = {cached}, blocks = (cached + BK - 1) / BK;
  int T = {team}(H * {G} * cached / PARALLEL_SCORES, blocks * H);  /* PARALLEL_SCORES scores a thread at least */
  /* the scaled queries, each thread's part (its heads' output, running maximum and sum), the
     first thread's scores and the queries in two bytes (scores_q16's); the others' scores in
     their own scratch */
  float* scratch = {scratch}(sizeof(float) * (size_t)(Q * ep + T * part + {G} * BK + {q16_floats}));
  float *qs = scratch, *parts = qs + Q * ep;
  for (int64_t i = 0; i < Q; ++i)
    for (int64_t e = 0; e < ep; ++e) qs[i * ep + e] = e < {E} ? q[i * q_hs + e] * scale : 0.0f;
{quantize}  #pragma omp parallel num_threads(T) if(T > 1)
  {{
#ifdef _OPENMP
    int t = T > 1 ? omp_get_thread_num() : 0;
#else
    int t = 0;
#endif
    float* s = t == 0 ? parts + T * part : (float*){scratch}(sizeof(float) * (size_t)({G} * BK));
    float *o = parts + t * part, *m = o + Q * evp, *l = m + Q;
    for (int64_t i = 0; i < Q; ++i) {{
      for (int64_t c = 0; c < evp; ++c) o[i * evp + c] = 0.0f;
      m[i] = -INFINITY;
      l[i] = 0.0f;
    }}
    /* the thread's items, a contiguous range of (block, head) in that order: every head's block
       before the next block (the heads' rows of a block lie together in a position-major cache,
       so that the cache streams once); a cache of fewer blocks than threads split by heads */
    int64_t first = blocks * H * t / T, last = blocks * H * (t + 1) / T;
    for (int64_t i = first; i < last && i < first + H; ++i) {{  /* the first block's rows: none before fetched them */
      int64_t h = i % H, j0 = i / H * BK;
      {name}_fetch(k + h * k_hs + j0 * k_rs, v + h * v_hs + j0 * v_rs, cached - j0 < BK ? cached - j0 : BK,
                   k_rs, v_rs, {E}, {Ev});
    }}
    for (int64_t i = first; i < last; ++i) {{
      int64_t h = i % H, j0 = i / H * BK, nk = cached - j0 < BK ? cached - j0 : BK;
      const {kt}* vh = v + h * v_hs + j0 * v_rs;
      float *oh = o + h * {G} * evp, *mh = m + h * {G}, *lh = l + h * {G};
      const {kt}* kh = k + h * k_hs + j0 * k_rs;
      int64_t done = {scores_q16};
      {name}_scores(qs + h * {G} * ep, kh, vh, done, nk, k_rs, v_rs, {G}, {E}, {Ev}, ep, s);
{mask_block}      {name}_softmax(s, nk, {G}, oh, evp, mh, lh);
      int64_t pv_done = {pv_q15};
      {name}_pv(s + pv_done, vh + pv_done * v_rs, nk - pv_done, v_rs, {G}, {Ev}, evp, oh);
    }}
{appended}  }}
  /* the threads' parts merged: each rescaled to the largest maximum */
  for (int64_t i = 0; i < Q; ++i) {{
    float top = -INFINITY, sum = 0.0f;
    for (int t = 0; t < T; ++t) top = parts[t * part + Q * evp + i] > top ? parts[t * part + Q * evp + i] : top;
    float shift = top == -INFINITY ? 0.0f : top;
    for (int64_t c = 0; c < {Ev}; ++c) out[i * o_hs + c] = 0.0f;
    for (int t = 0; t < T; ++t) {{
      const float* pt = parts + t * part;
      float a = {exp2}((V){{0}} + (pt[Q * evp + i] - shift))[0];
      sum += pt[Q * evp + Q + i] * a;
      for (int64_t c = 0; c < {Ev}; ++c) out[i * o_hs + c] += pt[i * evp + c] * a;
    }}
    float inv = sum == 0.0f ? 0.0f : 1.0f / sum;  /* every key masked out: 0, as torch gives */
    for (int64_t c = 0; c < {Ev}; ++c) out[i * o_hs + c] *= inv;
  }}
}}
"""

_APPENDED = """\
    if (t == T - 1)  /* the step's own key and value (float32), a block of one key, the last thread's */
      for (int64_t h = 0; h < H; ++h) {{
        int64_t j0 = S - 1, nk = 1;
        float *oh = o + h * {G} * evp, *mh = m + h * {G}, *lh = l + h * {G};
        {name}_scores_new(qs + h * {G} * ep, k_new + h * kn_hs, v_new + h * vn_hs, 0, 1, 0, 0, {G}, {E}, {Ev}, ep,
                          s);
{mask_block}        {name}_softmax(s, nk, {G}, oh, evp, mh, lh);
        {name}_pv_new(s, v_new + h * vn_hs, 1, 0, {G}, {Ev}, evp, oh);
      }}
"""

_QUANTIZE_QUERIES = """\
  int32_t *qw = (int32_t*)(parts + T * part + {G} * BK), *qc = qw + Q * 2 * {E};
  float* qf = (float*)(qc + Q);
  for (int64_t i = 0; i < Q; ++i) {quantize}(qs + i * ep, {E}, qw + i * 2 * {E}, qc + i, qf + i);
"""
_SCORES_Q16 = "{name}_scores_q16(qw + h * {G} * 2 * {E}, qc + h * {G}, qf + h * {G}, kh, vh, nk, k_rs, v_rs, s)"

_MASK_BLOCKS = {  # (head h's query g is query head h * G + g)
    "none": "",
    "bool": """\
        for (int64_t g = 0; g < {G}; ++g)
          for (int64_t j = 0; j < nk; ++j)
            if (!mask[(h * {G} + g) * m_hs + (j0 + j) * m_cs]) s[g * BK + j] = -INFINITY;
""",
    "additive": """\
        for (int64_t g = 0; g < {G}; ++g)
          for (int64_t j = 0; j < nk; ++j)
            s[g * BK + j] += mask[(h * {G} + g) * m_hs + (j0 + j) * m_cs] * 1.44269504088896341f;
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


def _row_sums(lib: CPrelude, lanes: int) -> str:
    """`V name(const V* a)`: the sums of W vectors' lanes, lane i holding a[i]'s, by a transposing
    tree: each level adds the halves of every segment of two vectors into one vector of twice the
    segments (two shuffles and an add a pair), then one shuffle puts the keys in order. The lanes
    are added in the order `_reduce` adds them, so that a key's sum is the same either way."""
    v, m = lib.vec("float32", lanes), lib.mask(32, lanes)
    name = f"ember_hsums_x{lanes}"

    def make() -> str:
        lines = [f"static inline {v} {name}(const {v}* a) {{"]
        vecs = [(f"a[{i}]", [i]) for i in range(lanes)]
        while len(vecs) > 1:
            merged = []
            for (x, kx), (y, ky) in zip(vecs[0::2], vecs[1::2]):
                seg = lanes // len(kx)
                half = seg // 2
                lo = [b + j * seg + i for j in range(len(kx)) for b in (0, lanes) for i in range(half)]
                hi = [c + half for c in lo]
                t = f"t{len(lines)}"
                lines.append(f"  {v} {t} = __builtin_shuffle({x}, {y}, ({m}){{{', '.join(map(str, lo))}}}) + "
                             f"__builtin_shuffle({x}, {y}, ({m}){{{', '.join(map(str, hi))}}});")
                merged.append((t, [key for pair in zip(kx, ky) for key in pair]))
            vecs = merged
        (t, keys), = vecs
        order = ", ".join(str(keys.index(i)) for i in range(lanes))
        lines.append(f"  return __builtin_shuffle({t}, ({m}){{{order}}});\n}}")
        return "\n".join(lines)

    return lib._helper(name, make)


def _prefetch(key: str, indent: str, last: bool) -> str:
    """C prefetching the rows of the key AHEAD keys after `key` (kr: that key's row), each row's
    lines and, where `last`, its last byte's (a row need not start a line), written out at each
    use: through a function GCC 12 kept none. An int8 row of E codes, E a multiple of 64, and its
    4-byte scale needs no last: its start a multiple of 4 bytes, the scale lies in the line of
    code E, which the loop fetches (GPT-2's 12 heads over 1023 positions from memory, one thread of
    a loaded Zen 4 EPYC: 138 -> 126 us a call, LLaMA's 66 -> 57: a third of the prefetches fewer;
    one a row, its first line's, took 152 -> 205: the second lines then missed)."""
    lines = (f"{indent}for (int64_t b = 0; b < kb; b += 64) PREFETCH((const char*)(kr + AHEAD * k_rs) + b);\n"
             f"{indent}for (int64_t b = 0; b < vb; b += 64) PREFETCH((const char*)(v + ({key} + AHEAD) * v_rs) + b);\n")
    if last:
        lines += (f"{indent}PREFETCH((const char*)(kr + AHEAD * k_rs) + kb - 1);\n"
                  f"{indent}PREFETCH((const char*)(v + ({key} + AHEAD) * v_rs) + vb - 1);\n")
    return lines


def _row_scale(lib: CPrelude) -> str:
    """`float ember_kv_row_scale(const int8_t* p)`: the float32 scale stored at p (an int8 cache
    row's, after its codes: any alignment)."""
    name = "ember_kv_row_scale"
    return lib._helper(name, lambda: (
        f"static inline float {name}(const int8_t* p) {{ float s; __builtin_memcpy(&s, p, 4); return s; }}"))


def attention_decode(lib: CPrelude, mask: str, kv: str, lanes: int, dims: tuple[int, int, int],
                     appended: bool = False) -> str:
    """The name of the routine's C function for this variant (`ember_attention_decode_<mask>_<kv>
    [_appended]_<E>_<Ev>_<G>`), for vectors of `lanes` float32 lanes and `dims` (E, Ev, G) written
    into its text as constants, written into the prelude the first time. (Constants, not the
    scalars: the threads' region reads its variables through the struct OpenMP passes it, where
    GCC propagates no constant, and the loops over E and Ev and the G heads unknown ran 40%
    slower: GPT-2's 12 heads over 991 positions of an int8 cache, in L2.)"""
    e_dim, ev_dim, groups = dims
    name = f"ember_attention_decode_{mask}_{kv}{'_appended' if appended else ''}_{e_dim}_{ev_dim}_{groups}"

    def make() -> str:
        v, u, m = lib.vec("float32", lanes), lib.unaligned_vec("float32", lanes), lib.mask(32, lanes)
        helpers = dict(hsum=_reduce(lib, "sum", lanes), hmax=_reduce(lib, "max", lanes),
                       exp2=_exp2_nonpositive(lib, v, m))
        last = not (kv == "int8" and e_dim % 64 == 0 and ev_dim % 64 == 0)
        scores = dict(hsums=_row_sums(lib, lanes), G=groups, prefetch_batch=_prefetch("j + i", " " * 8, last),
                      prefetch_one=_prefetch("j", " " * 4, last))
        f32 = dict(kt="float", load="LOADF", scalar="", kscale_of="1.0f", vscale="", vscale1="", extra="")
        if kv == "bfloat16":
            b, bu = lib.vec("bfloat16", lanes), lib.unaligned_vec("bfloat16", lanes)
            loads = f"#define LOADK(p) {lib.bf16_widen(lanes)}(({b})(*(const {bu}*)(p)))\n"
            typed = dict(f32, kt=lib.types["bfloat16"], load="LOADK", scalar=lib.bf16_to_float())
        elif kv == "int8":
            # (bytes to int32 by one vpmovsxbd: GCC 12 converts bytes to floats a lane at a time)
            widen, b = c_x86.widen_int32(lib, "int8", lanes), lib.unaligned_vec("int8", lanes)
            loads = f"#define LOADK(p) __builtin_convertvector({widen}(*(const {b}*)(p)), V)\n"
            scale = _row_scale(lib)
            typed = dict(kt=lib.types["int8"], load="LOADK", scalar="(float)", kscale_of=f"{scale}(kr + E)",
                         vscale=f" * {scale}(v + j * v_rs + Ev)", vscale1=f" * {scale}(v + (j + 1) * v_rs + Ev)",
                         extra=f" + {SCALE_BYTES}")
        else:
            loads, typed = "", f32
        mask_block = _MASK_BLOCKS[mask].format(G=groups)
        consts = dict(name=name, mask_block=mask_block, G=groups, E=e_dim, Ev=ev_dim)
        q16 = dict(q16_floats="0", quantize="", scores_q16="0")
        text = ""
        if vnni.takes(kv, lanes, e_dim):
            text = vnni.scores(lib, name, dims, scale, _prefetch("j + i", " " * 6, last), SCALE_BYTES)
            q16 = dict(q16_floats=f"Q * (2 * {e_dim} + 2)",
                       quantize=_QUANTIZE_QUERIES.format(quantize=vnni.quantize_query(lib), **consts),
                       scores_q16=_SCORES_Q16.format(**consts))
        q16["pv_q15"] = "0"
        if vnni.takes(kv, lanes, ev_dim):
            text += vnni.pv(lib, name, dims, scale)
            q16["pv_q15"] = f"{name}_pv_q15(s, vh, nk, v_rs, evp, oh)"
        text += _TYPED.format(name=name, suffix="", **typed, **helpers, **scores)
        if appended:
            text += _TYPED.format(name=name, suffix="_new", **f32, **helpers, **scores)
        text += _SOFTMAX.format(name=name, **helpers)
        text += _BODY.format(
            **helpers, **consts, **q16, kt=typed["kt"], scratch=c_runtime.thread_scratch(lib), team=c_runtime.team(lib),
            cached="S - 1" if appended else "S",
            mask_param={"none": "", "bool": " const uint8_t* restrict mask,",
                        "additive": " const float* restrict mask,"}[mask],
            new_param=" const float* restrict k_new, const float* restrict v_new," if appended else "",
            appended=_APPENDED.format(**consts) if appended else "")
        return (f"#define V {v}\n#define M {m}\n#define BK {KEYS}\n#define W {lanes}\n#define AHEAD {AHEAD}\n"
                f"#define PARALLEL_SCORES {PARALLEL_SCORES}\n#define PREFETCH(p) __builtin_prefetch((p), 0, 2)\n"
                f"#define LOADF(p) ((V)(*(const {u}*)(p)))\n{loads}"
                f"#define SEL(k, a, b) ((V)(((M)(a) & (k)) | ((M)(b) & ~(k))))\n{text}"
                "#undef V\n#undef M\n#undef BK\n#undef W\n#undef AHEAD\n#undef PARALLEL_SCORES\n#undef PREFETCH\n"
                "#undef LOADF\n#undef LOADK\n#undef SEL")

    return lib._helper(name, make)

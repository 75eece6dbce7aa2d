"""Flash attention's steps of a warp on mma.sync's registers (FlashAttention-2's structure): the
scores, their online softmax and the probabilities' product with V never leave the lanes.

A warp owns 16 queries. Its register buffers are "wmma.accumulator" buffers (ember.cuda.
fragments: a 16x16 tile is 8 floats of each lane), in mma.sync's C layout (ember.intrinsics.
mma_lanes: of a tile's two 16x8 halves, floats 0-3 and 4-7 of lane l are c0..c3, at rows g and
g + 8, g = l / 4, columns 2t and 2t + 1, t = l % 4):

- `LOAD_Q` (q, 16 x e halves in shared memory) -> q_frag: Q's e/16 A fragments by ldmatrix.x4,
  once for the whole loop over keys, their 32-bit registers held as the bits of a (16, 16
  ceil(e/32)) buffer (two A fragments a tile);
- `SCORES` (a tile of bn keys, (bn, e) in shared memory; q_frag) -> s (16, bn): s = q k^T,
  K's rows loaded by ldmatrix.x4 (non-transposed: k's rows are the product's col-major B);
- `SOFTMAX` (s; state; o): the online softmax on the accumulators themselves. Each lane holds 2
  of a row's 8 columns in every 8: its max over them, then two shuffles (xor 1, 2) within its
  group of 4 give the row's. In base 2: x = s scale log2(e) (+ the additive mask's log2(e) m),
  -inf where masked (bool mask, causal, keys past the end); m' = max(m, max x); p = exp2(x - m')
  (ex2.approx: exp2f's handling of denormal results is worth nothing to a p rounded to half),
  written over s; l = l exp2(m - m') + the lane's share of sum p (in fp32, as FlashAttention-2
  sums it; summed across the 4 lanes once, by `STORE`); o *= exp2(m - m').
  state (16, 16): floats 0 and 1 of a lane are m of its rows g and g + 8, 2 and 3 its shares of l;
- `PV` (a tile of bn values, (bn, ev) in shared memory; s) -> o (16, ev): o += p v, each k16 slice
  of p rounded to the operands' type into an A fragment in registers: the C layout of two adjacent 16x8 tiles of s is
  the A layout of the 16x16 slice (a0 a1 = c0 c1 of the first, a2 a3 = its c2 c3, a4..a7 the
  second's), so p goes through no shared memory; V's rows by ldmatrix.x4.trans (row-major B);
- `INIT` (state, o): m = -inf, l = 0, o = 0; `STORE` (state, o) -> out (16 rows of ev in global
  memory, a row stride and the rows left): o / l in the output's type (0 where l is 0: every
  key masked out), two elements a lane at a time.

The shared tiles are read at any row stride that is a multiple of 16 bytes (the kernel pads
each row by 16 bytes: the 8 rows of an ldmatrix phase then fall in distinct banks), not
swizzled, so any head size that is a multiple of 16 is read the same way.

Scalars are integers (the scale is passed as its float32 bits), which the interpreter's call
of a twin takes. Every intrinsic has its NumPy twin (`emulate`) on PTX's lane tables, so the
interpreter runs each call lane by lane as the GPU does; their descriptions give only the shapes
of what each call touches (an online softmax is not one te compute of placeholders).
"""

from __future__ import annotations

import re
import struct

import numpy as np

from ..errors import ScheduleError
from ..tir import dtype as dt
from ..tir.expr import Buffer, const
from ..tir.stmt import CallRoutine, Evaluate, PrimFunc
from ..tir.tensor_intrin import RESOLVERS, TensorIntrin, formal_stride, register_intrin
from . import mma_lanes
from .wmma import ACC_SOURCE, ACC_TYPE, DTYPES, FEATURE, TILE, once

ROWS = TILE  # queries a warp
LOG2E = 1.4426950408889634
MASKS = {"bool": "bool", "float16": "f16", "bfloat16": "bf16", "float32": "f32"}  # a mask's dtype: its name part

_COMMON = once("EMBER_MMA_ATTENTION", f"""{ACC_SOURCE}
static __device__ __forceinline__ void ember_attn_ldmatrix(unsigned* r, const void* p) {{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%0, %1, %2, %3}}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"((unsigned)__cvta_generic_to_shared(p))
               : "memory");
}}
static __device__ __forceinline__ void ember_attn_ldmatrix_trans(unsigned* r, const void* p) {{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{%0, %1, %2, %3}}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"((unsigned)__cvta_generic_to_shared(p))
               : "memory");
}}
static __device__ __forceinline__ float ember_attn_exp2(float x) {{  // (the MUFU op alone; exp2(-inf) = 0)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}}
#define EMBER_ATTN_MMA(ptx, d, a, b0, b1) \\
  asm("mma.sync.aligned.m16n8k16.row.col.f32." ptx "." ptx ".f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, " \\
      "{{%8, %9}}, {{%0, %1, %2, %3}};" : "+f"((d)[0]), "+f"((d)[1]), "+f"((d)[2]), "+f"((d)[3]) \\
      : "r"((a)[0]), "r"((a)[1]), "r"((a)[2]), "r"((a)[3]), "r"(b0), "r"(b1))""")

_HALF = {  # per operand type: its PTX name, the function rounding two floats into one register, its C
    "float16": ("f16", "ember_attn_pack_f16", """
static __device__ __forceinline__ unsigned ember_attn_pack_f16(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *(unsigned*)&h;
}"""),
    "bfloat16": ("bf16", "ember_attn_pack_bf16", """
static __device__ __forceinline__ unsigned ember_attn_pack_bf16(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *(unsigned*)&h;
}"""),
}
_MASK_READ = {"bool": "((const unsigned char*)mask)[at] != 0", "float16": "__half2float(((const __half*)mask)[at])",
              "bfloat16": "__bfloat162float(((const __nv_bfloat16*)mask)[at])", "float32": "((const float*)mask)[at]"}


def _suffix(dtype: str) -> str:
    if dtype not in DTYPES:
        raise ScheduleError(f"flash attention on mma.sync takes {DTYPES} operands, not {dtype}")
    return _HALF[dtype][0]


def _half_source(dtype: str) -> str:
    return once(f"EMBER_ATTN_HALF_{_suffix(dtype).upper()}", _HALF[dtype][2])


def _check(*sizes: int) -> None:
    if any(n <= 0 or n % TILE for n in sizes):
        raise ScheduleError(f"flash attention's warp tiles are whole 16x16 fragments, not {sizes}")


def q_columns(e: int) -> int:
    """The columns of the fp32 register buffer holding Q's e/16 A fragments (two a tile)."""
    return TILE * -(-e // (2 * TILE))


def _declare(name: str, params: list[tuple[str, tuple[int, ...], str]], n_inputs: int, c_source: str, emulate):
    """Register the intrinsic `name` (its C function ember_<name>) the first time it is asked for:
    `params` (name, shape, dtype) of the buffers its calls read, then write, in their order; walked
    at formal strides."""
    if name in _DECLARED:
        return _DECLARED[name]
    bufs = tuple(Buffer(n, tuple(const(d) for d in shape), dtype) for n, shape, dtype in params)
    strides = tuple(tuple(formal_stride(f"{b.name}_stride{i}") for i in range(len(b.shape) - 1)) + (const(1),)
                    for b in bufs)
    call = CallRoutine(f"ember_{name}", (), (), (), ())
    intrin = TensorIntrin(name, PrimFunc(name, bufs, Evaluate(const(0))), n_inputs, strides, (("body", call),),
                          c_source, FEATURE, emulate)
    _DECLARED[name] = register_intrin(intrin, override=True)
    return _DECLARED[name]


_DECLARED: dict[str, TensorIntrin] = {}


def _frags(acc: np.ndarray, offset: int, count: int) -> np.ndarray:
    """(count, 32, 8): the lanes' floats of a register buffer's first `count` tiles (its calls
    always name its start)."""
    if offset:
        raise ScheduleError("flash attention's register buffers are named from their first tile")
    return acc[:256 * count].reshape(count, mma_lanes.LANES, 8)


def _halves(dtype: str, regs: np.ndarray) -> np.ndarray:
    """32-bit registers (uint32) as the two 16-bit elements each holds, low half first, in float32."""
    return np.ascontiguousarray(regs).view(dt.to_numpy(dtype)).astype(np.float32)


def _mma_tile(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    """c (32, 8: a 16x16 tile's two 16x8 halves) += a (32, 8) b, b ldmatrix.x4's registers as floats
    (32, 8: registers 0-1 the first half's B, 2-3 the second's)."""
    for n in range(2):
        c[:, 4 * n:4 * n + 4] = mma_lanes.mma_m16n8k16(a, b[:, 4 * n:4 * n + 4], c[:, 4 * n:4 * n + 4])


def as_a_fragment(c: np.ndarray) -> np.ndarray:
    """(32, 8): the A fragment (PTX's a0..a7 of each lane) of the 16x16 matrix whose two 16x8 halves
    are the C tiles c (32, 8: floats 0-3 the first half's c0..c3, 4-7 the second's), through
    PTX's tables; it is c itself, element for element (what PV's C code relies on)."""
    rows, cols = mma_lanes.c_layout()
    m = np.empty((16, 16), c.dtype)
    for n in range(2):
        m[rows, cols + 8 * n] = c[:, 4 * n:4 * n + 4]
    return m[mma_lanes.a_layout()]


def _rounded(dtype: str, x: np.ndarray) -> np.ndarray:
    return x.astype(dt.to_numpy(dtype)).astype(np.float32)


# LOAD_Q ---------------------------------------------------------------------------------------

def load_q(e: int):
    """Q's A fragments of a warp's 16 rows of e (16-bit elements) into registers."""
    _check(e)
    name = f"mma_attn_q_{e}"
    source = f"""{_COMMON}
static __device__ __forceinline__ void ember_{name}(const void* q, void* qf, int64_t ldq) {{
  const int lane = threadIdx.x & 31;
  unsigned* f = (unsigned*)(({ACC_TYPE}*)qf)->x;  // fragment i: registers 4 i .. 4 i + 3
#pragma unroll
  for (int i = 0; i < {e // TILE}; ++i)
    ember_attn_ldmatrix(f + 4 * i, (const unsigned short*)q + (lane & 15) * ldq + 16 * i + 8 * (lane >> 4));
}}"""

    def run(role, reads, writes, scalars, strides):
        (q, q_off), = reads
        (qf, f_off), = writes
        (ldq,) = scalars
        frags = _frags(qf, int(f_off), q_columns(e) // TILE).reshape(-1, mma_lanes.LANES, 2, 4)
        for i in range(e // TILE):
            rows = int(q_off) + (mma_lanes.LANE % 16) * ldq + 16 * i + 8 * (mma_lanes.LANE // 16)
            regs = np.ascontiguousarray(mma_lanes.ldmatrix_x4(q, rows)).view(np.uint32).reshape(32, 4)
            frags[i // 2, :, i % 2].view(np.uint32)[...] = regs

    return _declare(name, [("q", (ROWS, e), "float16"), ("qf", (ROWS, q_columns(e)), "float32")], 1, source, run)


# SCORES ---------------------------------------------------------------------------------------

def scores(dtype: str, e: int, bn: int):
    """s (16 x bn, fp32) = q k^T, q from LOAD_Q's registers, k a tile of bn rows of e."""
    ptx = _suffix(dtype)
    _check(e, bn)
    name = f"mma_attn_scores_{e}x{bn}_{ptx}"
    source = f"""{_COMMON}
static __device__ __forceinline__ void ember_{name}(const void* k, const void* qf, void* s, int64_t ldk) {{
  const int lane = threadIdx.x & 31;
  const unsigned* a = (const unsigned*)((const {ACC_TYPE}*)qf)->x;
  {ACC_TYPE}* c = ({ACC_TYPE}*)s;
#pragma unroll
  for (int j = 0; j < {bn // TILE}; ++j)
#pragma unroll
    for (int i = 0; i < 8; ++i) c[j].x[i] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < {e // TILE}; ++kk)
#pragma unroll
    for (int j = 0; j < {bn // TILE}; ++j) {{
      unsigned b[4];
      ember_attn_ldmatrix(b, (const unsigned short*)k + (16 * j + (lane & 7) + 8 * (lane >> 4)) * ldk + 16 * kk
                                 + 8 * ((lane >> 3) & 1));
      EMBER_ATTN_MMA("{ptx}", c[j].x, a + 4 * kk, b[0], b[1]);
      EMBER_ATTN_MMA("{ptx}", c[j].x + 4, a + 4 * kk, b[2], b[3]);
    }}
}}"""

    def run(role, reads, writes, scalars, strides):
        (k, k_off), (qf, f_off) = reads
        (s, s_off), = writes
        (ldk,) = scalars
        a = _frags(qf, int(f_off), q_columns(e) // TILE).reshape(-1, 32, 2, 4).transpose(0, 2, 1, 3).reshape(-1, 32, 4)
        c = _frags(s, int(s_off), bn // TILE)
        c[...] = 0
        lane = mma_lanes.LANE
        for kk in range(e // TILE):
            fa = _halves(dtype, a[kk].view(np.uint32))
            for j in range(bn // TILE):
                rows = int(k_off) + (16 * j + lane % 8 + 8 * (lane // 16)) * ldk + 16 * kk + 8 * ((lane // 8) % 2)
                fb = mma_lanes.ldmatrix_x4(k, rows).reshape(32, 8).astype(np.float32)
                _mma_tile(fa, fb, c[j])

    return _declare(name, [("k", (bn, e), dtype), ("qf", (ROWS, q_columns(e)), "float32"),
                           ("s", (ROWS, bn), "float32")], 2, source, run)


# SOFTMAX --------------------------------------------------------------------------------------

def softmax(dtype: str, bn: int, ev: int, causal: bool, mask: str | None):
    """The online softmax step of a tile of bn scores (module doc), `mask` the dtype of a mask
    read from global memory (None: none). Scalars: the scale's float32 bits, the warp's first
    query and the tile's first key, the queries and keys (bounds), whether the tile crosses a
    bound or the diagonal (`edge`: else nothing is checked), then with a mask its strides
    between rows and between keys (0 where it is broadcast)."""
    ptx = _suffix(dtype)
    _check(bn, ev)
    if mask is not None and mask not in MASKS:
        raise ScheduleError(f"flash attention's mask is bool or float, not {mask}")
    name = f"mma_attn_softmax_{bn}x{ev}_{ptx}" + ("_causal" if causal else "") + (f"_{MASKS[mask]}" if mask else "")
    mask_arg, mask_scalars = ("const void* mask, ", ", int64_t mrs, int64_t mcs") if mask else ("", "")
    keep = "key < keys && row < rows" + (" && key <= row" if causal else "")
    score = "x = c * v;"
    if mask == "bool":
        score += f"\n        if (!({_MASK_READ['bool']})) x = -INFINITY;"
    elif mask is not None:
        score = f"x = (v * scale + {_MASK_READ[mask]}) * {LOG2E}f;"
    mask_at = ("const int64_t at = (row < rows ? row : rows - 1) * mrs + (key < keys ? key : keys - 1) * mcs;"
               if mask else "")
    source = f"""{_COMMON}
{_half_source(dtype)}
static __device__ __forceinline__ void ember_{name}({mask_arg}void* s, void* state, void* o, int64_t scale_bits,
    int64_t row0, int64_t key0, int64_t rows, int64_t keys, int64_t edge{mask_scalars}) {{
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const float scale = __int_as_float((int)scale_bits), c = scale * {LOG2E}f;
  {ACC_TYPE}* p = ({ACC_TYPE}*)s;
  float* st = (({ACC_TYPE}*)state)->x;
  float top[2] = {{st[0], st[1]}};
#pragma unroll
  for (int j = 0; j < {bn // TILE}; ++j)
#pragma unroll
    for (int i = 0; i < 8; ++i) {{
      const int h = (i >> 1) & 1;
      const int row = (int)row0 + g + 8 * h, key = (int)key0 + 16 * j + 8 * (i >> 2) + 2 * t + (i & 1);
      const float v = p[j].x[i];
      float x;
      {mask_at}
      {score}
      if (edge && !({keep})) x = -INFINITY;
      p[j].x[i] = x;
      top[h] = fmaxf(top[h], x);
    }}
  float shift[2], alpha[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {{
    top[h] = fmaxf(top[h], __shfl_xor_sync(0xffffffffu, top[h], 1));
    top[h] = fmaxf(top[h], __shfl_xor_sync(0xffffffffu, top[h], 2));
    shift[h] = top[h] == -INFINITY ? 0.0f : top[h];  // every key so far masked out
    alpha[h] = ember_attn_exp2(st[h] - shift[h]);
    st[2 + h] *= alpha[h];
    st[h] = top[h];
  }}
#pragma unroll
  for (int j = 0; j < {bn // TILE}; ++j)
#pragma unroll
    for (int i = 0; i < 8; ++i) {{
      const int h = (i >> 1) & 1;
      const float e = ember_attn_exp2(p[j].x[i] - shift[h]);
      p[j].x[i] = e;
      st[2 + h] += e;
    }}
  {ACC_TYPE}* acc = ({ACC_TYPE}*)o;
#pragma unroll
  for (int j = 0; j < {ev // TILE}; ++j)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[j].x[i] *= alpha[(i >> 1) & 1];
}}"""

    def run(role, reads, writes, scalars, strides):
        (sb, s_off), (stb, st_off), (ob, o_off) = writes
        scale = struct.unpack("<f", struct.pack("<i", scalars[0]))[0]
        row0, key0, rows, keys, edge = scalars[1:6]
        p, acc = _frags(sb, int(s_off), bn // TILE), _frags(ob, int(o_off), ev // TILE)
        st = _frags(stb, int(st_off), 1)[0]
        i = np.arange(8)
        h = (i // 2) % 2
        row = row0 + mma_lanes.GROUP[:, None] + 8 * h  # (32, 8)
        key = key0 + 16 * np.arange(bn // TILE)[:, None, None] + 8 * (i // 4) + 2 * mma_lanes.IN_GROUP[:, None] + i % 2
        row = np.broadcast_to(row, key.shape)
        v = p.copy()
        with np.errstate(invalid="ignore", over="ignore"):
            x = v * np.float32(scale * LOG2E)
            if mask is not None:
                (mb, m_off), = reads
                mrs, mcs = scalars[6:8]
                m = mb[int(m_off) + np.minimum(row, rows - 1) * mrs + np.minimum(key, keys - 1) * mcs]
                if mask == "bool":
                    x = np.where(m, x, -np.inf)
                else:
                    x = (v * np.float32(scale) + m.astype(np.float32)) * np.float32(LOG2E)
            if edge:
                keep = (key < keys) & (row < rows)
                if causal:
                    keep &= key <= row
                x = np.where(keep, x, -np.inf)
            x = x.astype(np.float32)
            top = np.maximum(st[:, :2], np.stack([x[:, :, h == r].max(axis=(0, 2)) for r in (0, 1)], axis=-1))
            top = top.reshape(8, 4, 2).max(axis=1).repeat(4, axis=0)  # across each group's 4 lanes
            shift = np.where(top == -np.inf, np.float32(0), top)
            alpha = np.exp2(st[:, :2] - shift)
            e = np.exp2(x - shift[:, h]).astype(np.float32)
        st[:, 2:4] = st[:, 2:4] * alpha + np.stack([e[:, :, h == r].sum(axis=(0, 2)) for r in (0, 1)], axis=-1)
        st[:, :2] = top
        p[...] = e
        acc *= alpha[:, h]

    params = [("mask", (ROWS, bn), mask)] if mask else []
    params += [("s", (ROWS, bn), "float32"), ("state", (ROWS, TILE), "float32"), ("o", (ROWS, ev), "float32")]
    return _declare(name, params, len(params) - 3, source, run)


# PV -------------------------------------------------------------------------------------------

def pv(dtype: str, bn: int, ev: int):
    """o (16 x ev) += p v, p the probabilities SOFTMAX left in s, v a tile of bn rows of ev."""
    ptx, pack = _suffix(dtype), _HALF[dtype][1]
    _check(bn, ev)
    name = f"mma_attn_pv_{bn}x{ev}_{ptx}"
    source = f"""{_COMMON}
{_half_source(dtype)}
static __device__ __forceinline__ void ember_{name}(const void* v, const void* s, void* o, int64_t ldv) {{
  const int lane = threadIdx.x & 31;
  const {ACC_TYPE}* p = (const {ACC_TYPE}*)s;
  {ACC_TYPE}* c = ({ACC_TYPE}*)o;
#pragma unroll
  for (int kk = 0; kk < {bn // TILE}; ++kk) {{
    const float* x = p[kk].x;  // two 16x8 tiles of C: one 16x16 A fragment
    const unsigned a[4] = {{{pack}(x[0], x[1]), {pack}(x[2], x[3]), {pack}(x[4], x[5]), {pack}(x[6], x[7])}};
#pragma unroll
    for (int j = 0; j < {ev // TILE}; ++j) {{
      unsigned b[4];
      ember_attn_ldmatrix_trans(b, (const unsigned short*)v + (16 * kk + (lane & 15)) * ldv + 16 * j + 8 * (lane >> 4));
      EMBER_ATTN_MMA("{ptx}", c[j].x, a, b[0], b[1]);
      EMBER_ATTN_MMA("{ptx}", c[j].x + 4, a, b[2], b[3]);
    }}
  }}
}}"""

    def run(role, reads, writes, scalars, strides):
        (v, v_off), (sb, s_off) = reads
        (ob, o_off), = writes
        (ldv,) = scalars
        p, c = _frags(sb, int(s_off), bn // TILE), _frags(ob, int(o_off), ev // TILE)
        lane = mma_lanes.LANE
        for kk in range(bn // TILE):
            fa = _rounded(dtype, as_a_fragment(p[kk]))
            for j in range(ev // TILE):
                rows = int(v_off) + (16 * kk + lane % 16) * ldv + 16 * j + 8 * (lane // 16)
                fb = mma_lanes.ldmatrix_x4(v, rows, trans=True).reshape(32, 8).astype(np.float32)
                _mma_tile(fa, fb, c[j])

    return _declare(name, [("v", (bn, ev), dtype), ("s", (ROWS, bn), "float32"), ("o", (ROWS, ev), "float32")], 2,
                    source, run)


# INIT and STORE -------------------------------------------------------------------------------

def init(ev: int):
    """m = -inf, l = 0 in state; o (16 x ev) = 0."""
    _check(ev)
    name = f"mma_attn_init_{ev}"
    source = f"""{_COMMON}
static __device__ __forceinline__ void ember_{name}(void* state, void* o) {{
  float* st = (({ACC_TYPE}*)state)->x;
  st[0] = st[1] = -INFINITY;
  st[2] = st[3] = 0.0f;
  {ACC_TYPE}* c = ({ACC_TYPE}*)o;
#pragma unroll
  for (int j = 0; j < {ev // TILE}; ++j)
#pragma unroll
    for (int i = 0; i < 8; ++i) c[j].x[i] = 0.0f;
}}"""

    def run(role, reads, writes, scalars, strides):
        (stb, st_off), (ob, o_off) = writes
        st = _frags(stb, int(st_off), 1)[0]
        st[:, :2], st[:, 2:4] = -np.inf, 0
        _frags(ob, int(o_off), ev // TILE)[...] = 0

    return _declare(name, [("state", (ROWS, TILE), "float32"), ("o", (ROWS, ev), "float32")], 0, source, run)


def store(dtype: str, ev: int):
    """out[r, :] = o[r, :] / l[r] (0 where l is 0) for the warp's rows r < `rows` (a scalar), out
    of `dtype` at row stride ldo (even, as out's start: two elements a store)."""
    ptx, pack = _suffix(dtype), _HALF[dtype][1]
    _check(ev)
    name = f"mma_attn_store_{ev}_{ptx}"
    source = f"""{_COMMON}
{_half_source(dtype)}
static __device__ __forceinline__ void ember_{name}(const void* state, const void* o, void* out, int64_t ldo,
                                                    int64_t rows) {{
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const float* st = ((const {ACC_TYPE}*)state)->x;
  const {ACC_TYPE}* c = (const {ACC_TYPE}*)o;
  unsigned* y = (unsigned*)out;  // (pairs of elements)
#pragma unroll
  for (int h = 0; h < 2; ++h) {{
    float l = st[2 + h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l == 0.0f ? 0.0f : 1.0f / l;
    if (g + 8 * h < rows)
#pragma unroll
      for (int j = 0; j < {2 * ev // TILE}; ++j) {{
        const float* x = c[j / 2].x + 4 * (j % 2) + 2 * h;
        y[((g + 8 * h) * ldo + 8 * j + 2 * t) / 2] = {pack}(x[0] * inv, x[1] * inv);
      }}
  }}
}}"""

    def run(role, reads, writes, scalars, strides):
        (stb, st_off), (ob, o_off) = reads
        (out, y_off), = writes
        ldo, rows = scalars
        st, c = _frags(stb, int(st_off), 1)[0], _frags(ob, int(o_off), ev // TILE)
        l = st[:, 2:4].reshape(8, 4, 2).sum(axis=1, dtype=np.float32).repeat(4, axis=0)  # (32, 2)
        inv = np.where(l == 0, np.float32(0), np.float32(1) / np.where(l == 0, 1, l)).astype(np.float32)
        i = np.arange(8)
        h = (i // 2) % 2
        r, col = mma_lanes.GROUP[:, None] + 8 * h, 2 * mma_lanes.IN_GROUP[:, None] + i % 2 + 8 * (i // 4)
        for j in range(ev // TILE):
            value = (c[j] * inv[:, h]).astype(out.dtype)
            keep = r < rows
            out[int(y_off) + (r * ldo + 16 * j + col)[keep]] = value[keep]

    return _declare(name, [("state", (ROWS, TILE), "float32"), ("o", (ROWS, ev), "float32"),
                           ("out", (ROWS, ev), dtype)], 2, source, run)


def call(intrin: TensorIntrin, reads, writes, scalars, row_strides) -> CallRoutine:
    """A call of one of these intrinsics: `reads` and `writes` Pointers (a register buffer the C
    function updates in place is among the writes only), `scalars` its C scalars, `row_strides`
    each pointer's (what the interpreter and a region analysis walk)."""
    reads, writes = tuple(reads), tuple(writes)
    params = (("intrin", intrin.name), ("role", "body"), ("c_reads", tuple(range(len(reads)))),
              ("c_writes", tuple(range(len(reads), len(reads) + len(writes)))), ("c_scalars", len(scalars)))
    steps = tuple(x for ld in row_strides for x in (ld, 1))
    return CallRoutine(intrin.call("body").routine, params, reads, writes,
                       tuple(const(x) if isinstance(x, int) else x for x in (*scalars, *steps)))


_NAMES = (
    (re.compile(r"mma_attn_q_(\d+)"), lambda m: load_q(int(m[1]))),
    (re.compile(r"mma_attn_scores_(\d+)x(\d+)_(f16|bf16)"), lambda m: scores(_DTYPE[m[3]], int(m[1]), int(m[2]))),
    (re.compile(r"mma_attn_softmax_(\d+)x(\d+)_(f16|bf16)(_causal)?(?:_(bool|f16|bf16|f32))?"),
     lambda m: softmax(_DTYPE[m[3]], int(m[1]), int(m[2]), bool(m[4]), _MASK_DTYPE.get(m[5]))),
    (re.compile(r"mma_attn_pv_(\d+)x(\d+)_(f16|bf16)"), lambda m: pv(_DTYPE[m[3]], int(m[1]), int(m[2]))),
    (re.compile(r"mma_attn_init_(\d+)"), lambda m: init(int(m[1]))),
    (re.compile(r"mma_attn_store_(\d+)_(f16|bf16)"), lambda m: store(_DTYPE[m[2]], int(m[1]))),
)
_DTYPE = {"f16": "float16", "bf16": "bfloat16"}
_MASK_DTYPE = {v: k for k, v in MASKS.items()}


def _resolve(name: str):
    """The intrinsic named `name`, declared now (a kernel lowered in a worker process)."""
    for pattern, make in _NAMES:
        m = pattern.fullmatch(name)
        if m is not None:
            return make(m)
    return None


RESOLVERS.append(_resolve)

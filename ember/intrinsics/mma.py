"""Tensor Cores through `ldmatrix` and `mma.sync.aligned.m16n8k16` (inline PTX, sm_80 and later):
the warp's GEMM step of ember.intrinsics.wmma.warp_mma with the fragments' lanes in our hands.

- `warp_mma(dtype, WM, WN, b_layout)`: a warp's WM x WN tile of fp32 accumulators updated by one
  16-wide step of k, fp16 or bf16 inputs: A's WM/16 fragments loaded by one `ldmatrix.x4` each,
  B's WN/16 pairs of 16x8 fragments by one `ldmatrix.x4.trans` each (B row-major, (16, WN)) or
  plain `ldmatrix.x4` (b_layout "col": B given as its transpose, (WN, 16), a linear layer's
  weights), then (WM/16) (WN/8) `mma.sync.m16n8k16.row.col.f32`; every loop unrolled, so the
  fragments of A and B and the accumulators stay in registers;
- `STORE`: a 16x16 fp32 accumulator to memory, row-major, each lane storing its 8 floats as
  four pairs (float2) where PTX's layout puts them.

The accumulators are a "wmma.accumulator" buffer as wmma's are (ember.cuda.fragments: a
16x16 tile is 8 floats of each lane), in mma's layout: of a tile's two 16x8 halves, floats 0-3
and 4-7 of lane l are c0..c3 (ember.intrinsics.mma_lanes). So a tile is written out by this
module's STORE, never wmma's, whose layout is the compiler's.

The tiles of A and B are read in shared memory swizzled (mma_lanes.swizzle: conflict-free
ldmatrix without padded rows, keyed by the offset in the tile): the lowering pass
ember.cuda.swizzle lays out every shared buffer these calls read that way (its stores swizzled)
and passes each call the offsets of its pointers in their tiles (`a_at`, `b_at`, in elements),
from which each lane finds its tile's start and its row's swizzled offset
(`ember_lane_address`, mma_lanes.lane_address), wherever the tile starts. Rows of any power of
two bytes (mma_lanes.swizzles); each phase of an ldmatrix reads 8 consecutive rows of a tile.

The interpreter runs the calls through their NumPy twins (`emulate`), lane by lane on PTX's
layouts (mma_lanes): swizzled addresses, ldmatrix's registers, the products of each m16n8k16
and the store's lanes, so a wrong layout is a wrong number on the CPU.
"""

from __future__ import annotations

import re

import numpy as np

from .. import te
from ..errors import ScheduleError
from ..tir.tensor_intrin import RESOLVERS
from . import mma_lanes
from .wmma import ACC_SOURCE, ACC_TYPE, DTYPES, FEATURE, TILE, check_warp_tile, declare_warp_step, once

LANE_ADDRESS = """\
static __device__ __forceinline__ unsigned ember_row_shift(int64_t row_bytes) {  // (mma_lanes.row_shift)
  return max(7, 31 - __clz((int)row_bytes));
}
static __device__ __forceinline__ unsigned ember_lane_address(unsigned pointer, unsigned at, unsigned distance,
                                                              unsigned shift) {  // (mma_lanes.lane_address)
  const unsigned o = at + distance;
  return pointer - at + (o ^ (((o >> shift) & 7u) << 4));
}"""
"""The C code's lanes' addresses, the twin of mma_lanes.lane_address (tests compile it for the CPU)."""

_COMMON = once("EMBER_MMA_LDMATRIX", LANE_ADDRESS + """
static __device__ __forceinline__ void ember_ldmatrix_x4(unsigned* r, unsigned a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}
static __device__ __forceinline__ void ember_ldmatrix_x4_trans(unsigned* r, unsigned a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}""")


def _suffix(dtype: str) -> str:
    return {"float16": "f16", "bfloat16": "bf16"}[dtype]


def _source(dtype: str, fm: int, fn: int, name: str, b_layout: str) -> str:
    """The lanes' rows are those of `rows_a` and `rows_b` (the emulation's), in bytes."""
    if b_layout == "col":
        load_b = ("ember_ldmatrix_x4(fb[j], ember_lane_address(sb, ob, (unsigned)(((16 * j + (lane & 7) + 8 * "
                  "(lane >> 4)) * ldb + 8 * ((lane >> 3) & 1)) * 2), kb));")
    else:
        load_b = ("ember_ldmatrix_x4_trans(fb[j], ember_lane_address(sb, ob, (unsigned)(((lane & 15) * ldb + 16 * j "
                  "+ 8 * (lane >> 4)) * 2), kb));")
    ptx = _suffix(dtype)
    return f"""{ACC_SOURCE}
{_COMMON}
static __device__ __forceinline__ void {name}_fill(void* c) {{
#pragma unroll
  for (int f = 0; f < {fm * fn}; ++f)
#pragma unroll
    for (int i = 0; i < 8; ++i) (({ACC_TYPE}*)c)[f].x[i] = 0.0f;
}}
static __device__ __forceinline__ void {name}(const void* a, const void* b, void* c, int64_t lda, int64_t ldb,
                                              int64_t a_at, int64_t b_at) {{
  const int lane = threadIdx.x & 31;  // (threadIdx.x is the warp's 32 lanes: ember.cuda.fragments)
  const unsigned sa = (unsigned)__cvta_generic_to_shared(a), sb = (unsigned)__cvta_generic_to_shared(b);
  const unsigned oa = (unsigned)a_at * 2, ob = (unsigned)b_at * 2, ka = ember_row_shift(lda * 2),
                 kb = ember_row_shift(ldb * 2);
  unsigned fa[{fm}][4], fb[{fn}][4];
#pragma unroll
  for (int i = 0; i < {fm}; ++i)
    ember_ldmatrix_x4(fa[i], ember_lane_address(sa, oa, (unsigned)(((16 * i + (lane & 15)) * lda + 8 * (lane >> 4))
                                                                   * 2), ka));
#pragma unroll
  for (int j = 0; j < {fn}; ++j)
    {load_b}
#pragma unroll
  for (int i = 0; i < {fm}; ++i)
#pragma unroll
    for (int n = 0; n < {2 * fn}; ++n) {{
      float* d = (({ACC_TYPE}*)c)[i * {fn} + n / 2].x + 4 * (n % 2);
      asm("mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, "
          "{{%8, %9}}, {{%0, %1, %2, %3}};"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(fa[i][0]), "r"(fa[i][1]), "r"(fa[i][2]), "r"(fa[i][3]), "r"(fb[n / 2][2 * (n % 2)]),
            "r"(fb[n / 2][2 * (n % 2) + 1]));
    }}
}}"""


def rows_a(i: int, lda: int) -> np.ndarray:
    """The element offset (from the tile's start) of the row each lane gives ldmatrix for A's
    fragment i: rows 16 i + l % 16, columns 8 (l / 16)."""
    lane = mma_lanes.LANE
    return (16 * i + lane % 16) * lda + 8 * (lane // 16)


def rows_b(j: int, ldb: int, b_layout: str) -> np.ndarray:
    """The same for B's columns 16 j..16 j + 15: rows k = l % 16 at columns 16 j + 8 (l / 16)
    (row-major B, loaded transposed), or rows n = 16 j + l % 8 + 8 (l / 16) at k = 8 ((l / 8) % 2)
    (B given as its transpose)."""
    lane = mma_lanes.LANE
    if b_layout == "col":
        return (16 * j + lane % 8 + 8 * (lane // 16)) * ldb + 8 * ((lane // 8) % 2)
    return (lane % 16) * ldb + 16 * j + 8 * (lane // 16)


def _lane_rows(offset: int, at: int, rows: np.ndarray, row_elements: int, itemsize: int) -> np.ndarray:
    """Element offsets in the tile of the rows the lanes give ldmatrix (their 8 elements stay
    together), found as the C code finds their addresses: the call's pointer at element `offset` of
    a tile placed at mma_lanes.TILE_START, told that it lies at element `at`."""
    start = mma_lanes.TILE_START
    address = mma_lanes.lane_address(start + offset * itemsize, at * itemsize, rows * itemsize, row_elements * itemsize)
    return (address - start) // itemsize


def _fragments(acc: np.ndarray, offset: int, cols: int, count: int) -> np.ndarray:
    """(count, 32, 8): the lanes' floats of `count` tiles from the one at element `offset` of an
    accumulator of `cols` columns (tile f of the buffer: its lanes' 8 floats at 256 f + 8 l, the
    order of ember.cuda.fragments' array)."""
    first = offset // (TILE * cols) * (cols // TILE) + offset % cols // TILE
    return acc[256 * first:256 * (first + count)].reshape(count, mma_lanes.LANES, 8)


def _emulate(fm: int, fn: int, b_layout: str):
    def run(role, reads, writes, scalars, strides):
        (acc, c_offset), = writes
        frags = _fragments(acc, int(c_offset), strides[-2], fm * fn)
        if role == "reset":
            frags[...] = 0
            return
        (a, a_offset), (b, b_offset) = reads
        lda, ldb, a_at, b_at = scalars  # (the offsets passed by ember.cuda.swizzle)
        fa = [mma_lanes.ldmatrix_x4(a, _lane_rows(int(a_offset), a_at, rows_a(i, lda), lda, a.itemsize)).reshape(32, 8)
              for i in range(fm)]
        fb = [mma_lanes.ldmatrix_x4(b, _lane_rows(int(b_offset), b_at, rows_b(j, ldb, b_layout), ldb, b.itemsize),
                                    trans=b_layout != "col").reshape(32, 8) for j in range(fn)]
        for i in range(fm):
            for n in range(2 * fn):
                d = frags[i * fn + n // 2][:, 4 * (n % 2):4 * (n % 2) + 4]
                d[...] = mma_lanes.mma_m16n8k16(fa[i].astype(np.float32), fb[n // 2][:, 4 * (n % 2):4 * (n % 2) + 4]
                                                .astype(np.float32), d)
    return run


def warp_mma(dtype: str, wm: int, wn: int, b_layout: str = "row"):
    """The intrinsic of a warp's wm x wn tile of fp32 accumulators updated by a 16-wide step of k
    on `dtype` inputs (declared and registered the first time it is asked for): what
    wmma.warp_mma computes (its description), through ldmatrix and mma.sync on swizzled tiles."""
    if dtype not in DTYPES:
        raise ScheduleError(f"mma.sync takes {DTYPES} inputs, not {dtype}")
    check_warp_tile(wm, wn, b_layout)
    name = f"mma_warp_{wm}x{wn}x16_{_suffix(dtype)}_f32" + ("_bt" if b_layout == "col" else "")
    if name not in _WARP:
        _WARP[name] = declare_warp_step(name, dtype, wm, wn, b_layout,
                                        _source(dtype, wm // TILE, wn // TILE, f"ember_{name}", b_layout),
                                        _emulate(wm // TILE, wn // TILE, b_layout))
    return _WARP[name]


_WARP: dict = {}
_WARP_NAME = re.compile(r"mma_warp_(\d+)x(\d+)x16_(f16|bf16)_f32(_bt)?")


def _resolve(name: str):
    """The warp's intrinsic named `name`, declared now (a kernel lowered in a worker process)."""
    m = _WARP_NAME.fullmatch(name)
    if m is None:
        return None
    return warp_mma({"f16": "float16", "bf16": "bfloat16"}[m.group(3)], int(m.group(1)), int(m.group(2)),
                    "col" if m.group(4) else "row")


RESOLVERS.append(_resolve)


def is_swizzled(intrin_name: str) -> bool:
    """Whether a tensorized call of this intrinsic reads its tiles swizzled (ember.cuda.swizzle)."""
    return _WARP_NAME.fullmatch(intrin_name) is not None


_STORE_SOURCE = once("EMBER_MMA_STORE", f"""{ACC_SOURCE}
static __device__ __forceinline__ void ember_mma_store(const void* c, void* out, int64_t ldm) {{
  const float* d = ((const {ACC_TYPE}*)c)->x;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float* o = (float*)out;
#pragma unroll
  for (int h = 0; h < 2; ++h) {{
    *(float2*)&o[g * ldm + 8 * h + 2 * t] = make_float2(d[4 * h], d[4 * h + 1]);
    *(float2*)&o[(g + 8) * ldm + 8 * h + 2 * t] = make_float2(d[4 * h + 2], d[4 * h + 3]);
  }}
}}""")


def _emulate_store(role, reads, writes, scalars, strides):
    (acc, c_offset), = reads
    (out, o_offset), = writes
    (ldm,) = scalars
    (frag,) = _fragments(acc, int(c_offset), strides[0], 1)
    rows, cols = mma_lanes.c_layout()
    for h in range(2):
        at = int(o_offset) + rows * ldm + cols + 8 * h
        out[at] = frag[:, 4 * h:4 * h + 4]


def declare_store():
    """Declare (and register) the store of an fp32 accumulator in mma's layout to a row-major
    16x16 tile (float2 stores: the tile's start and row stride even)."""
    c = te.placeholder((TILE, TILE), "float32", name="c")
    out = te.compute((TILE, TILE), lambda i, j: c[i, j], name="out")

    def lower_fn(ins, outs):
        (pc,), (po,) = ins, outs
        return te.hardware_intrinsic("ember_mma_store", pc.access_ptr("r"), po.access_ptr("w"), po.strides[0])

    return te.decl_tensor_intrin(out.op, lower_fn, name="mma_store_16x16_f32", c_source=_STORE_SOURCE,
                                 feature=FEATURE, override=True, emulate=_emulate_store)


STORE = declare_store()

"""A direct convolution's register tile on AVX512-BF16 (`vdpbf16ps`) as one tensor intrinsic: MR
output columns x NV blocks of 16 output channels, summed over every input channel block, kernel
row, kernel column and pair of channels in one call, so that the MR x NV accumulators stay in zmm
registers from the first tap to the last (no im2col: each pair of input channels is broadcast
from where it lies in the padded input).

    c[i, v, l] = sum over q, r, s, k, g of a[q, r*DH, i*SW + s*DW, 2k + g] * b[v, q, r, s, k, l, g]

a is the input padded and rounded to bf16 in blocks of channels, (CB, H, W, 2 * IP) (a view at
the tile's first pixel, its rows, columns and blocks any stride apart, the channels of a pixel
contiguous); b the weights packed (NV, CB, KH, KW, IP, 16, 2), the pairs of input channels
along k, 16 output channels in a row (ember.ops.conv_bf16); c MR columns x NV blocks of 16 fp32
(columns and blocks any stride apart). Per pair of channels and tap, a tile takes NV loads of b,
MR broadcasts of a pair and MR x NV instructions. Reduction axes of one iteration (a 1x1 kernel,
one block of channels, one pair) are left out of the description, as they are out of the
operator's compute, so that the two nests match loop for loop. The extents, the stride along
columns and the dilations are the C function's constants: one intrinsic per geometry, declared
on first use (`intrin`), or by its name (`bf16conv_...`, `_resolve`) where a kernel lowered in
another process calls it. The interpreter runs the description (the fp32 sums in another order).

On AMX (`tdpbf16ps`, unit "amx") the same description is one tile product per tap: a tile of a
is MR pixels (up to 16 rows, a row SW pixels apart: `tileloadd`'s stride) x the IP pairs of a
block (IP * 4 bytes), a tile of b the tap's IP rows of 16 pairs of one block (64 bytes a row), an
accumulator tile MR x 16 fp32 per block; NV accumulator tiles, one of a, NV of b, configured per
call (ldtilecfg, as ember.intrinsics.amx does). Where Linux refuses the tile state, the call
computes the same sums in C, lane by lane (amx.py's `ember_amx_granted`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from .. import te
from ..errors import ScheduleError
from ..tir.tensor_intrin import RESOLVERS
from .amx import COMMON as AMX_COMMON
from .tiles import LANES, guard

FEATURE = "avx512bf16"
FEATURES = {"avx512": FEATURE, "amx": "amx-bf16"}  # a tile's unit -> the target feature it needs
MAX_ACCUMULATORS = 28  # of the 32 zmm registers: NV for b and one for a's broadcast pair left
AMX_ROWS = 16  # rows of an AMX tile: MR at most, and IP (a tile of b's rows)


@dataclass(frozen=True)
class ConvTile:
    """A tile's geometry: MR columns x NV blocks, over CB blocks of 2 * IP channels x KH x KW taps,
    SW the stride along columns, (DH, DW) the dilations."""

    mr: int
    nv: int
    cb: int
    kh: int
    kw: int
    ip: int
    sw: int = 1
    dh: int = 1
    dw: int = 1
    unit: str = "avx512"  # or "amx"

    @property
    def name(self) -> str:
        prefix = "bf16conv" if self.unit == "avx512" else f"{self.unit}_bf16conv"
        return (f"{prefix}_{self.mr}x{self.nv * LANES}_{self.cb}x{self.kh}x{self.kw}x{2 * self.ip}"
                f"_s{self.sw}_d{self.dh}x{self.dw}")

    @property
    def feature(self) -> str:
        return FEATURES[self.unit]

    @property
    def function(self) -> str:
        return f"ember_{self.name}"


def choose(columns: int, blocks: int) -> tuple[int, int] | None:
    """(MR, NV) for a row of `columns` output pixels by `blocks` blocks of 16 channels: NV 2 where
    the blocks pair up, else 1; MR the largest divisor of columns (whole tiles, at least 2) that
    keeps MR x NV within MAX_ACCUMULATORS; None when no MR fits. Measured on one Zen 5 core (3x3,
    64 to 64 channels at 56 x 56): 14 x 2 524 us, 28 x 1 558, 7 x 4 640 (4 blocks of weights a
    step, where 2 leave L1 more room); 512 channels at 7 x 7: 7 x 2 509 us, 7 x 4 589."""
    nv = 2 if blocks % 2 == 0 else 1
    mr = max((d for d in range(2, MAX_ACCUMULATORS // nv + 1) if columns % d == 0), default=None)
    return None if mr is None else (mr, nv)


def choose_amx(columns: int, blocks: int, pairs: int) -> tuple[int, int] | None:
    """(MR, NV) of an AMX tile: MR the largest divisor of columns up to 16 (at least 2), NV 2
    where the blocks pair up (2 accumulator tiles, 2 of b, 1 of a); None when no MR fits or a
    block's pairs are more than a tile's 16 rows."""
    mr = max((d for d in range(2, AMX_ROWS + 1) if columns % d == 0), default=None)
    return None if mr is None or pairs > AMX_ROWS else (mr, 2 if blocks % 2 == 0 else 1)


def intrin(tile: ConvTile):
    if tile.unit not in FEATURES:
        raise ScheduleError(f"{tile.name}: the unit must be one of {sorted(FEATURES)}, not {tile.unit!r}")
    if tile.mr < 1 or tile.nv < 1 or tile.mr * tile.nv > MAX_ACCUMULATORS:
        raise ScheduleError(f"{tile.name}: a tile holds at most {MAX_ACCUMULATORS} accumulators (MR x NV), "
                            f"not {tile.mr} x {tile.nv}")
    if tile.unit == "amx" and (tile.mr > AMX_ROWS or tile.nv > 2 or tile.ip > AMX_ROWS):
        raise ScheduleError(f"{tile.name}: an AMX tile has at most {AMX_ROWS} rows of pixels and of pairs, "
                            f"and 2 blocks")
    return _declare(tile)


def reduce_axes(cb: int, kh: int, kw: int, ip: int) -> dict[str, object]:
    """The reduction axes (q, r, s, k over blocks, rows, columns, pairs; g over a pair), each an
    axis where its extent is above 1, else 0: what the operator's compute and the description sum over."""
    axes = {name: te.reduce_axis((0, n), name=name) if n > 1 else 0
            for name, n in (("q", cb), ("r", kh), ("s", kw), ("k", ip))}
    axes["g"] = te.reduce_axis((0, 2), name="g")
    return axes


def summed(axes: dict) -> list:
    return [a for a in axes.values() if not isinstance(a, int)]


@functools.cache
def _declare(t: ConvTile):
    ax = reduce_axes(t.cb, t.kh, t.kw, t.ip)
    q, r, s, k, g = (ax[n] for n in "qrskg")
    # a's dimensions: only those a loop walks (a dimension of one iteration would not match the nest)
    a_dims = [(t.cb, lambda i: q)] if t.cb > 1 else []
    a_dims += [((t.kh - 1) * t.dh + 1, lambda i: r * t.dh)] if t.kh > 1 else []
    a_dims += [((t.mr - 1) * t.sw + (t.kw - 1) * t.dw + 1, lambda i: i * t.sw + s * t.dw),
               (2 * t.ip, lambda i: g if t.ip == 1 else k * 2 + g)]
    a = te.placeholder(tuple(n for n, _ in a_dims), "bfloat16", name="a")
    full = (t.nv, t.cb, t.kh, t.kw, t.ip, LANES, 2)
    kept = [0] + [d for d, n in zip((1, 2, 3, 4), (t.cb, t.kh, t.kw, t.ip)) if n > 1] + [5, 6]
    b = te.placeholder(tuple(full[d] for d in kept), "bfloat16", name="b")
    b_strides = [None] + [_row_major(full)[d] for d in kept[1:]]
    index = {1: q, 2: r, 3: s, 4: k, 6: g}

    def body(i, v, lane):
        bi = tuple(v if d == 0 else lane if d == 5 else index[d] for d in kept)
        return te.sum(a[tuple(f(i) for _, f in a_dims)].astype("float32") * b[bi].astype("float32"), axis=summed(ax))

    c = te.compute((t.mr, t.nv, LANES), body, name="c")
    walks = [t.cb > 1, t.kh > 1, True]  # the strides of a's blocks, rows and columns, where a walks them

    def lower_fn(ins, outs):
        (pa, pb), (pc,) = ins, outs
        strides = iter(pa.strides)
        sa = [next(strides) if w else 0 for w in walks]
        return te.hardware_intrinsic(t.function, pa.access_ptr("r"), pb.access_ptr("r"), pc.access_ptr("w"),
                                     *sa, pb.strides[0], pc.strides[0], pc.strides[1])

    source = _c_source(t) if t.unit == "avx512" else _amx_source(t)
    return te.decl_tensor_intrin(c.op, lower_fn, name=t.name, c_source=source, feature=t.feature,
                                 override=True, strides={a: (None,) * (len(a_dims) - 1) + (1,), b: tuple(b_strides),
                                                         c: (None, None, 1)})


def _row_major(shape) -> list[int]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return out[::-1]


def _c_source(t: ConvTile) -> str:
    acc = [(i, v) for i in range(t.mr) for v in range(t.nv)]
    lines = [f"  __m512 c{i}_{v} = _mm512_setzero_ps();" for i, v in acc]
    lines += [f"  for (int64_t q = 0; q < {t.cb}; ++q)",
              f"  for (int64_t r = 0; r < {t.kh}; ++r)",
              f"  for (int64_t s = 0; s < {t.kw}; ++s) {{",
              f"    const uint16_t* xa = pa + q * sq + r * {t.dh} * sh + s * {t.dw} * sw;",
              f"    const uint16_t* xb = pb + ((q * {t.kh} + r) * {t.kw} + s) * {t.ip * 2 * LANES};",
              f"    for (int64_t k = 0; k < {t.ip}; ++k) {{"]
    lines += [f"      __m512bh b{v} = (__m512bh)_mm512_loadu_si512(xb + {v} * sb + k * {2 * LANES});"
              for v in range(t.nv)]
    for i in range(t.mr):
        lines.append(f"      memcpy(&pair, xa + {i * t.sw} * sw + 2 * k, 4);")
        lines.append(f"      __m512bh a{i} = (__m512bh)_mm512_set1_epi32(pair);")
        lines += [f"      c{i}_{v} = _mm512_dpbf16_ps(c{i}_{v}, a{i}, b{v});" for v in range(t.nv)]
    lines += ["    }", "  }"]
    lines += [f"  _mm512_storeu_ps(pc + {i} * sc + {v} * sv, c{i}_{v});" for i, v in acc]
    body = "\n".join(lines)
    return guard(t.function, f"""#include <immintrin.h>
#include <stdint.h>
#include <string.h>
__attribute__((target("avx512f,avx512bf16")))
static void {t.function}(const void* a, const void* b, void* c, int64_t sq, int64_t sh, int64_t sw, int64_t sb,
                         int64_t sc, int64_t sv) {{
  const uint16_t* pa = a;
  const uint16_t* pb = b;
  float* pc = c;
  int32_t pair;
{body}
}}""")


def _amx_source(t: ConvTile) -> str:
    nl = "\n"
    config = [f"  cfg.rows[{v}] = {t.mr}; cfg.colsb[{v}] = 64;" for v in range(t.nv)]
    config += [f"  cfg.rows[4] = {t.mr}; cfg.colsb[4] = {4 * t.ip};"]
    config += [f"  cfg.rows[{6 + v}] = {t.ip}; cfg.colsb[{6 + v}] = 64;" for v in range(t.nv)]
    steps = [f"    _tile_loadd(4, xa, {t.sw} * sw * 2);"]
    steps += [f"    _tile_loadd({6 + v}, xb + {v} * sb, 64);" for v in range(t.nv)]
    steps += [f"    _tile_dpbf16ps({v}, 4, {6 + v});" for v in range(t.nv)]
    return AMX_COMMON + guard(t.function, f"""__attribute__((target("amx-tile,amx-bf16")))
static void {t.function}(const void* a, const void* b, void* c, int64_t sq, int64_t sh, int64_t sw, int64_t sb,
                         int64_t sc, int64_t sv) {{
  const uint16_t* pa = a;
  const uint16_t* pb = b;
  float* pc = c;
  if (!ember_amx_granted()) {{  /* the same sums, lane by lane */
    for (int i = 0; i < {t.mr}; ++i)
      for (int j = 0; j < {t.nv * LANES}; ++j) {{
        float s = 0;
        for (int64_t q = 0; q < {t.cb}; ++q)
          for (int64_t r = 0; r < {t.kh}; ++r)
            for (int64_t x = 0; x < {t.kw}; ++x)
              for (int64_t k = 0; k < {2 * t.ip}; ++k)
                s += ember_amx_bf16_f32(pa[q * sq + r * {t.dh} * sh + (i * {t.sw} + x * {t.dw}) * sw + k])
                     * ember_amx_bf16_f32(pb[j / {LANES} * sb + (((q * {t.kh} + r) * {t.kw} + x) * {t.ip} + k / 2)
                                             * {2 * LANES} + j % {LANES} * 2 + k % 2]);
        pc[i * sc + j / {LANES} * sv + j % {LANES}] = s;
      }}
    return;
  }}
  struct {{ uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; }} cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
{nl.join(config)}
  _tile_loadconfig(&cfg);
{nl.join(f"  _tile_zero({v});" for v in range(t.nv))}
  for (int64_t q = 0; q < {t.cb}; ++q)
  for (int64_t r = 0; r < {t.kh}; ++r)
  for (int64_t x = 0; x < {t.kw}; ++x) {{
    const uint16_t* xa = pa + q * sq + r * {t.dh} * sh + x * {t.dw} * sw;
    const uint16_t* xb = pb + ((q * {t.kh} + r) * {t.kw} + x) * {t.ip * 2 * LANES};
{nl.join(steps)}
  }}
{nl.join(f"  _tile_stored({v}, pc + {v} * sv, sc * 4);" for v in range(t.nv))}
}}""")


_NAME = re.compile(r"(amx_)?bf16conv_(\d+)x(\d+)_(\d+)x(\d+)x(\d+)x(\d+)_s(\d+)_d(\d+)x(\d+)")


def _resolve(name: str):
    """The intrinsic named `name` (ConvTile.name), declared now, if a convolution tile's."""
    m = _NAME.fullmatch(name)
    if m is None:
        return None
    mr, cols, cb, kh, kw, chans, sw, dh, dw = (int(x) for x in m.groups()[1:])
    return intrin(ConvTile(mr, cols // LANES, cb, kh, kw, chans // 2, sw, dh, dw, "amx" if m[1] else "avx512"))


RESOLVERS.append(_resolve)

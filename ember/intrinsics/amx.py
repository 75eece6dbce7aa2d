"""AMX tile products as tile intrinsics (ember.intrinsics.tiles): `tdpbf16ps` (bf16 pairs into
fp32), `tdpbusd` (u8 x s8 quads into int32) and `tdpbssd` (s8 x s8). A tile register holds 16
rows of 64 bytes: a tile of a is 16 rows of 32 bf16 (or 64 bytes), a tile of b 16 rows of one
block's 16 columns in groups along k (the weights packed [N / 16][K / G][16][G], as for
AVX512-BF16 and VNNI: 64 contiguous bytes per row), an accumulator tile 16 x 16 fp32 or int32.
A call computes MR = 16 or 32 rows x NV = 1 or 2 blocks: up to 2 x 2 accumulator tiles (tmm0-3),
2 of a (tmm4-5) and 2 of b (tmm6-7) per step of 32 bf16 (64 bytes) of k, so K must be a
multiple of 32 (bf16) or 64 (int8).

Linux gives a process the tile state only when asked (`arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)`): the first call of a library asks, and remembers the answer (a process
with several models asks once per model; the grant is the process's); where it is refused,
every call computes the same sums in C, lane by lane. Each call loads its tile configuration
(`ldtilecfg`: 8 tiles of 16 x 64 bytes), since the configuration is per thread and another
library in the process (oneDNN under torch) may load its own between two calls. The C functions
are compiled for AMX alone (`__attribute__((target))`); a kernel calls them only where the
target's flags enable the unit (amx-bf16, amx-int8), and AMX is chosen ahead of AVX512-BF16
(ember.schedules.cpu.lowp).
"""

from __future__ import annotations

from .tiles import Unit, guard

ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 0x1023, 18
SHAPES = ((32, 2), (16, 2), (32, 1), (16, 1))

COMMON = guard("amx_common", rf"""#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
static int ember_amx_state;  /* 0: not asked yet, 1: granted, -1: refused */
static int ember_amx_granted(void) {{
  int state = __atomic_load_n(&ember_amx_state, __ATOMIC_ACQUIRE);
  if (state == 0) {{
    state = syscall(SYS_arch_prctl, {ARCH_REQ_XCOMP_PERM:#x}, {XFEATURE_XTILEDATA}) == 0 ? 1 : -1;
    __atomic_store_n(&ember_amx_state, state, __ATOMIC_RELEASE);
  }}
  return state > 0;
}}
__attribute__((target("amx-tile")))
static void ember_amx_configure(void) {{
  struct {{ uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; }} cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) {{
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }}
  _tile_loadconfig(&cfg);
}}
static inline float ember_amx_bf16_f32(uint16_t x) {{
  uint32_t u = (uint32_t)x << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}}""")

# (the name, G, a's dtype and C type, b's, the accumulator's, the instruction, its target feature)
KINDS = {
    "bf16": (2, "bfloat16", "uint16_t", "bfloat16", "uint16_t", "float32", "float", "_tile_dpbf16ps", "amx-bf16"),
    "u8s8": (4, "uint8", "uint8_t", "int8", "int8_t", "int32", "int32_t", "_tile_dpbusd", "amx-int8"),
    "s8s8": (4, "int8", "int8_t", "int8", "int8_t", "int32", "int32_t", "_tile_dpbssd", "amx-int8"),
}


def _source(kind: str):
    g, _, a_c, _, b_c, _, acc_c, instruction, feature = KINDS[kind]
    widen = "ember_amx_bf16_f32" if kind == "bf16" else f"({acc_c})"
    sum_c = "float" if kind == "bf16" else "uint32_t"  # int32 sums wrap, as the unit's do

    def c_source(mr: int, nv: int) -> str:
        fn = UNITS[kind].function(mr, nv)
        mt = mr // 16
        steps = [f"    _tile_loadd({4 + t}, pa + {16 * t} * sa + {g} * k, sa * sizeof(*pa));" for t in range(mt)]
        steps += [f"    _tile_loadd({6 + v}, pb + {v} * sb + {16 * g} * k, 64);" for v in range(nv)]
        steps += [f"    {instruction}({t * nv + v}, {4 + t}, {6 + v});" for t in range(mt) for v in range(nv)]
        stores = [f"  _tile_stored({t * nv + v}, pc + {16 * t} * sc + {16 * v}, sc * sizeof(*pc));"
                  for t in range(mt) for v in range(nv)]
        zero = [f"  _tile_zero({t});" for t in range(mt * nv)]
        nl = "\n"
        return COMMON + guard(fn, f"""__attribute__((target("amx-tile,{feature}")))
static void {fn}(const void* a, const void* b, void* c, int64_t kg, int64_t sa, int64_t sb, int64_t sc) {{
  const {a_c}* pa = a;
  const {b_c}* pb = b;
  {acc_c}* pc = c;
  if (!ember_amx_granted()) {{  /* the same sums, lane by lane */
    for (int i = 0; i < {mr}; ++i)
      for (int j = 0; j < {nv * 16}; ++j) {{
        {sum_c} s = 0;
        for (int64_t k = 0; k < kg * {g}; ++k) {{
          {b_c} w = pb[j / 16 * sb + k / {g} * {16 * g} + j % 16 * {g} + k % {g}];
          s += ({sum_c})({widen}(pa[i * sa + k]) * {widen}(w));
        }}
        pc[i * sc + j] = ({acc_c})s;
      }}
    return;
  }}
  ember_amx_configure();
{nl.join(zero)}
  for (int64_t k = 0; k < kg; k += 16) {{
{nl.join(steps)}
  }}
{nl.join(stores)}
}}""")

    return c_source


UNITS = {kind: Unit(f"amx_{kind}", spec[8], spec[0], spec[1], spec[3], spec[5], SHAPES, _source(kind), kg_step=16)
         for kind, spec in KINDS.items()}
BF16, U8S8, S8S8 = UNITS["bf16"], UNITS["u8s8"], UNITS["s8s8"]

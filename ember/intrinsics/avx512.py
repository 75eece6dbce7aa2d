"""AVX-512's dot-product instructions as tile intrinsics (ember.intrinsics.tiles), a register
tile of MR rows x NV blocks of 16 columns whose MR x NV accumulators stay in zmm registers from
the first k to the last:

- BF16: AVX512-BF16's `vdpbf16ps` (`_mm512_dpbf16_ps`) adds to each of 16 fp32 lanes the
  products of a pair of bf16 by a pair of bf16 (the weights packed [N / 16][K / 2][16][2]);
- U8S8: AVX512-VNNI's `vpdpbusd` (`_mm512_dpbusd_epi32`) adds to each of 16 int32 lanes the 4
  products of an unsigned byte by a signed byte (VNNI's layout [N / 16][K / 4][16][4]).

Per group of k, a tile takes NV loads of b, MR broadcasts of a group of a and MR x NV
instructions. The products of bf16 are exact in fp32 and summed in fp32 (the instruction
flushes denormals and rounds to nearest even); the int8 sums are exact and wrap as int32 does.
The interpreter runs the description (the fp32 sums in another order). The C functions are
compiled for their unit alone (`__attribute__((target))`): a kernel calls them only where the
target's flags enable the feature (the C backend refuses one that does not, ember.backends.c),
and a machine without it is refused before the kernel runs (Target.check_runs_here, and
ember.load for a saved model); elsewhere a model's schedule computes the same bf16 products on
fp32 vectors (ember.schedules.cpu.matmul_bf16).
"""

from __future__ import annotations

from .tiles import LANES, Unit, guard
from .vnni import DPBUSD

SHAPES = ((8, 2), (4, 4), (4, 2), (8, 1), (4, 1), (2, 2), (2, 1), (1, 2), (1, 1))  # (MR, NV): 16 accumulators at most

# (a's C type, b's, the accumulator's C type and vector type, its zero and store, the operands'
# vector type, the instruction, the target's features)
KINDS = {
    "bf16": ("uint16_t", "uint16_t", "float", "__m512", "_mm512_setzero_ps()", "_mm512_storeu_ps", "__m512bh",
             "_mm512_dpbf16_ps", "avx512f,avx512bf16"),
    "u8s8": ("uint8_t", "int8_t", "int32_t", "__m512i", "_mm512_setzero_si512()", "_mm512_storeu_si512", "__m512i",
             "ember_dpbusd", "avx512f,avx512vnni"),
}


def _source(kind: str):
    a_c, b_c, acc_c, vec, zero, store, operand, instruction, features = KINDS[kind]

    def c_source(mr: int, nv: int) -> str:
        unit = UNITS[kind]
        fn, g = unit.function(mr, nv), unit.group
        acc = [(i, v) for i in range(mr) for v in range(nv)]
        lines = [f"  {vec} c{i}_{v} = {zero};" for i, v in acc]
        lines.append("  for (int64_t k = 0; k < kg; ++k) {")
        lines += [f"    {operand} b{v} = ({operand})_mm512_loadu_si512(pb + {v} * sb + k * {g * LANES});"
                  for v in range(nv)]
        for i in range(mr):
            lines.append(f"    memcpy(&group, pa + {i} * sa + {g} * k, 4);")
            lines.append(f"    {operand} a{i} = ({operand})_mm512_set1_epi32(group);")
            lines += [f"    c{i}_{v} = {instruction}(c{i}_{v}, a{i}, b{v});" for v in range(nv)]
        lines.append("  }")
        lines += [f"  {store}(pc + {i} * sc + {v * LANES}, c{i}_{v});" for i, v in acc]
        body = "\n".join(lines)
        prelude = DPBUSD if kind == "u8s8" else ""
        return prelude + guard(fn, f"""#include <immintrin.h>
#include <stdint.h>
#include <string.h>
__attribute__((target("{features}")))
static void {fn}(const void* a, const void* b, void* c, int64_t kg, int64_t sa, int64_t sb, int64_t sc) {{
  const {a_c}* pa = a;
  const {b_c}* pb = b;
  {acc_c}* pc = c;
  int32_t group;
{body}
}}""")

    return c_source


UNITS = {
    "bf16": Unit("bf16_avx512", "avx512bf16", 2, "bfloat16", "bfloat16", "float32", SHAPES, _source("bf16")),
    "u8s8": Unit("u8s8_vnni", "avx512vnni", 4, "uint8", "int8", "int32", SHAPES, _source("u8s8")),
}
BF16, U8S8 = UNITS["bf16"], UNITS["u8s8"]

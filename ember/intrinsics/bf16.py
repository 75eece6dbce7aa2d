"""AVX512-BF16's dot product as a tile intrinsic (ember.intrinsics.tiles): `vdpbf16ps`
(`_mm512_dpbf16_ps`) adds to each of 16 fp32 lanes the products of a pair of bf16 by a pair of
bf16, so a tile of MR rows x NV blocks of 16 columns takes, per pair of k, NV loads of b (its
weights packed [N / 16][K / 2][16][2]), MR broadcasts of a pair of a and MR x NV instructions,
its MR x NV accumulators in zmm registers from the first k to the last.

The products of bf16 are exact in fp32 and summed in fp32 (the instruction flushes denormals
and rounds to nearest even); the interpreter runs the description, the same sums in another
order. The C function is compiled for the unit alone (`__attribute__((target))`): a kernel calls
it only where the target's flags enable avx512bf16 (the C backend refuses one that does not,
ember.backends.c), and a machine without it is refused before the kernel runs
(Target.check_runs_here, and ember.load for a saved model); elsewhere the model's schedule
computes the same bf16 products on fp32 vectors (ember.schedules.cpu.lowp).
"""

from __future__ import annotations

from .tiles import LANES, Unit, guard

FEATURE = "avx512bf16"  # a Target feature: /proc/cpuinfo's avx512_bf16
SHAPES = ((8, 2), (4, 2), (8, 1), (4, 1), (2, 2), (2, 1), (1, 2), (1, 1))  # (MR, NV): 16 accumulators at most

def _c_source(mr: int, nv: int) -> str:
    fn = UNIT.function(mr, nv)
    acc = [(i, v) for i in range(mr) for v in range(nv)]
    lines = [f"  __m512 c{i}_{v} = _mm512_setzero_ps();" for i, v in acc]
    lines.append("  for (int64_t k = 0; k < kg; ++k) {")
    lines += [f"    __m512bh b{v} = (__m512bh)_mm512_loadu_si512(pb + {v} * sb + k * {2 * LANES});" for v in range(nv)]
    for i in range(mr):
        lines.append(f"    memcpy(&pair, pa + {i} * sa + 2 * k, 4);")
        lines.append(f"    __m512bh a{i} = (__m512bh)_mm512_set1_epi32(pair);")
        lines += [f"    c{i}_{v} = _mm512_dpbf16_ps(c{i}_{v}, a{i}, b{v});" for v in range(nv)]
    lines.append("  }")
    lines += [f"  _mm512_storeu_ps(pc + {i} * sc + {v * LANES}, c{i}_{v});" for i, v in acc]
    body = "\n".join(lines)
    return guard(fn, f"""#include <immintrin.h>
#include <stdint.h>
#include <string.h>
__attribute__((target("avx512f,avx512bf16")))
static void {fn}(const void* a, const void* b, void* c, int64_t kg, int64_t sa, int64_t sb, int64_t sc) {{
  const uint16_t* pa = a;
  const uint16_t* pb = b;
  float* pc = c;
  int32_t pair;
{body}
}}""")


UNIT = Unit("bf16_avx512", FEATURE, 2, "bfloat16", "bfloat16", "float32", SHAPES, _c_source)

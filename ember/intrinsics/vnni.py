"""AVX512-VNNI's int8 dot product as a tensor intrinsic: `vpdpbusd` (`_mm512_dpbusd_epi32`) adds,
to each of 16 int32 lanes, the sum of 4 products of an unsigned byte by a signed byte.

DOT_16X4 computes c[i] (+)= sum over k < 4 of a[k] * b[i, k]: 4 u8 of a row of A (broadcast to
every lane) against 16 rows of 4 s8 of B, the weights packed as [N / 16][K / 4][16][4] (VNNI's
K-groups of 4, contiguous: b's strides are 4 and 1), into 16 int32 of C (unit stride). A GEMM
`C[m, n] = sum_k A[m, k] * B[k, n]` tensorizes onto it with n split by 16 and k by 4 (see
`gemm`). Products are exact in int32; the sums wrap as int32 does.

The C functions are compiled for the unit alone (`__attribute__((target))`, whatever the build's
flags) and test the CPU at run time (`__builtin_cpu_supports`): a kernel built with them runs
`vpdpbusd` where the CPU has it and the same sums lane by lane elsewhere, never an illegal
instruction. NATIVE (and NATIVE_GCC) is the same intrinsic without that test, for a
target whose features include avx512vnni (qgemm's schedule, ember.schedules.cpu.quantized):
inlined into a register tile, its accumulators then stay in registers across the K loop; `native`
picks the form by how many registers the tile leaves for the weights.
"""

from __future__ import annotations

from .. import te

DOT_16X4 = "dot_16x4_u8s8s32_vnni"
FEATURE = "avx512_vnni"

# acc + a (u8) . b (s8) in int32 lanes, by inline assembly, b in a register: of the intrinsic
# `_mm512_dpbusd_epi32`, GCC 12 copies the accumulator to another register and back around each
# instruction and, in a tile of 16 accumulators, spills two to the stack inside the K loop (the
# tiles' GEMM at half the unit's rate), or folds b's load into the instruction of every row of the
# tile (qgemm's 4 x 4: 16 loads of b a K-group where 4 would do)
DPBUSD = r"""#ifndef EMBER_DPBUSD_DEFINED
#define EMBER_DPBUSD_DEFINED
#include <immintrin.h>
__attribute__((target("avx512f,avx512vnni")))
static inline __m512i ember_dpbusd(__m512i acc, __m512i a, __m512i b) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}
#endif
"""

C_SOURCE = r"""#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx512f,avx512vnni")))
static void ember_vnni_dot16x4_vnni(const void* a, const void* b, void* c, int accumulate) {
  int32_t a4;
  memcpy(&a4, a, 4);
  __m512i acc = accumulate ? _mm512_loadu_si512(c) : _mm512_setzero_si512();
  _mm512_storeu_si512(c, _mm512_dpbusd_epi32(acc, _mm512_set1_epi32(a4), _mm512_loadu_si512(b)));
}
#endif

/* where the CPU lacks the unit: the same sums, exact, one lane at a time */
static void ember_vnni_dot16x4_lanes(const void* a, const void* b, void* c, int accumulate) {
  const uint8_t* pa = a;
  const int8_t* pb = b;
  int32_t* pc = c;
  for (int i = 0; i < 16; ++i) {
    uint32_t s = accumulate ? (uint32_t)pc[i] : 0u;
    for (int k = 0; k < 4; ++k) s += (uint32_t)((int32_t)pa[k] * (int32_t)pb[i * 4 + k]);
    pc[i] = (int32_t)s;
  }
}

static inline void ember_vnni_dot16x4_any(const void* a, const void* b, void* c, int accumulate) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512vnni")) {
    ember_vnni_dot16x4_vnni(a, b, c, accumulate);
    return;
  }
#endif
  ember_vnni_dot16x4_lanes(a, b, c, accumulate);
}

static inline void ember_vnni_dot16x4(const void* a, const void* b, void* c) { ember_vnni_dot16x4_any(a, b, c, 0); }
static inline void ember_vnni_reset16(void* c) { memset(c, 0, 64); }
static inline void ember_vnni_dot16x4_update(const void* a, const void* b, void* c) {
  ember_vnni_dot16x4_any(a, b, c, 1);
}
"""


# For a target whose features include avx512vnni (its flags let the compiler use the unit, and a
# model built so refuses to load on a CPU without it: ember.runtime.artifact): no test per call,
# so that once inlined into a register tile the accumulators stay in registers across the K loop.
# NATIVE holds b in a register (ember_dpbusd); NATIVE_GCC is the compiler's intrinsic, for a tile
# whose accumulators leave too few registers for b's panels (`native`).
NATIVE_C = r"""#include <string.h>

__attribute__((target("avx512f,avx512vnni")))
static inline void %(prefix)s_dot16x4(const void* a, const void* b, void* c) {
  int32_t a4;
  memcpy(&a4, a, 4);
  _mm512_storeu_si512(c, %(dpbusd)s(_mm512_setzero_si512(), _mm512_set1_epi32(a4), _mm512_loadu_si512(b)));
}

static inline void %(prefix)s_reset16(void* c) { memset(c, 0, 64); }

__attribute__((target("avx512f,avx512vnni")))
static inline void %(prefix)s_dot16x4_update(const void* a, const void* b, void* c) {
  int32_t a4;
  memcpy(&a4, a, 4);
  _mm512_storeu_si512(c, %(dpbusd)s(_mm512_loadu_si512(c), _mm512_set1_epi32(a4), _mm512_loadu_si512(b)));
}
"""
DOT_16X4_NATIVE = "dot_16x4_u8s8s32_vnni_native"
C_SOURCE_NATIVE = DPBUSD + NATIVE_C % {"prefix": "ember_vnni_native", "dpbusd": "ember_dpbusd"}
DOT_16X4_NATIVE_GCC = "dot_16x4_u8s8s32_vnni_native_gcc"
C_SOURCE_NATIVE_GCC = "#include <immintrin.h>\n" + NATIVE_C % {"prefix": "ember_vnni_native_gcc",
                                                               "dpbusd": "_mm512_dpbusd_epi32"}
REGISTERS = 32  # zmm registers: a tile's accumulators, b's panels and the broadcast of a's group


def declare(name: str = DOT_16X4, c_source: str = C_SOURCE, prefix: str = "ember_vnni"):
    """Declare (and register) the intrinsic under `name` with the C functions of `c_source`, named
    `prefix`_dot16x4, `prefix`_reset16 and `prefix`_dot16x4_update."""
    a = te.placeholder((4,), "uint8", name="a")
    b = te.placeholder((16, 4), "int8", name="b")
    k = te.reduce_axis((0, 4), name="k")
    c = te.compute((16,), lambda i: te.sum(a[k].astype("int32") * b[i, k].astype("int32"), axis=k), name="c")

    def lower_fn(ins, outs):
        (pa, pb), (pc,) = ins, outs
        args = (pa.access_ptr("r"), pb.access_ptr("r"), pc.access_ptr("w"))
        return (te.hardware_intrinsic(f"{prefix}_dot16x4", *args),
                te.hardware_intrinsic(f"{prefix}_reset16", pc.access_ptr("w")),
                te.hardware_intrinsic(f"{prefix}_dot16x4_update", *args))

    # (no feature: the C chooses at run time, so any target may call it)
    return te.decl_tensor_intrin(c.op, lower_fn, name=name, c_source=c_source, strides={b: (4, 1)}, override=True)


INTRIN = declare()
NATIVE = declare(DOT_16X4_NATIVE, C_SOURCE_NATIVE, "ember_vnni_native")
NATIVE_GCC = declare(DOT_16X4_NATIVE_GCC, C_SOURCE_NATIVE_GCC, "ember_vnni_native_gcc")


def native(rows: int, panels: int):
    """The native intrinsic for a register tile of rows x panels accumulators: b's panels in
    registers, each loaded once a K-group for all the rows, where they fit beside the
    accumulators and the broadcast (qgemm's 4 x 4 at 1024^3: 41% -> 85-89% of vpdpbusd's peak, one
    thread of an AMD EPYC Zen 5); else the compiler's intrinsic, which keeps in registers the
    panels it has room for and reads the others from L1 (7 x 4: 3 of the 4, at 93-95% of the peak
    for ResNet-18's 3x3 layers, where the fifth register of b would spill an accumulator)."""
    return NATIVE if rows * panels + panels + 1 <= REGISTERS else NATIVE_GCC


def gemm(m: int, n: int, k: int, rows: int = 4, vectors: int = 2, intrin=INTRIN):
    """An int8 GEMM over VNNI-packed weights, tensorized onto DOT_16X4: a (M, K) uint8, bp
    (N / 16, K / 4, 16, 4) int8 (`pack`), c (M, N / 16, 16) int32 (c.reshape(M, N) is A @ B).
    A tile of `rows` x `vectors` x 16 outputs is unrolled inside the reduction's loop, its init a
    block of its own before it (decompose_reduction), so that its accumulators are loaded once
    per tile. M must be a multiple of `rows`, N of 16 * `vectors`, K of 4. Returns (schedule,
    [a, bp, c])."""
    a = te.placeholder((m, k), "uint8", name="A")
    bp = te.placeholder((n // 16, k // 4, 16, 4), "int8", name="Bp")
    ko = te.reduce_axis((0, k // 4), name="ko")
    ki = te.reduce_axis((0, 4), name="ki")
    c = te.compute((m, n // 16, 16), lambda i, jo, ji: te.sum(
        a[i, ko * 4 + ki].astype("int32") * bp[jo, ko, ji, ki].astype("int32"), axis=[ko, ki]), name="C")
    s = te.create_schedule(c.op)
    i, jo, ji = s[c].op.axis
    io, ii = s[c].split(i, factor=rows)
    joo, joi = s[c].split(jo, factor=vectors)
    s[c].reorder(io, joo, ko, ii, joi, ji, ki)
    s[c].parallel(io)
    s[c].unroll(ii)
    s[c].unroll(joi)
    s[c].decompose_reduction(ko)
    s[c].tensorize(ji, intrin)
    return s, [a, bp, c]


def pack(b):
    """B (K, N) int8 as the VNNI layout [N / 16][K / 4][16][4]."""
    k, n = b.shape
    return b.reshape(k // 4, 4, n // 16, 16).transpose(2, 0, 3, 1).copy()

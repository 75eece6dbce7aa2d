"""A wmma accumulator fragment multiplied element by element by a 16x16 fp32 tile in memory:
`c[i, j] *= a[i, j]`, the tile loaded as a fragment of the same shape and multiplied lane by lane.

What it is for: scaling a fragment's rows (flash attention's output accumulator, rescaled by each
row's exp(m - m') at every tile of keys) when the lanes' layout of a fragment is the compiler's
(ember.intrinsics.wmma): two fp32 accumulators of one shape share that layout, so a tile whose
row i holds row i's factor in every column, loaded with `wmma.load.c`, puts each element's factor
in the register beside it. No lane needs to know which row it holds.
"""

from __future__ import annotations

from .. import te
from ..tir.expr import const
from ..tir.stmt import CallRoutine, Pointer
from .wmma import FEATURE, TILE

NAME = "wmma_fragment_scale_16x16_f32"
ROUTINE = "ember_wmma_fragment_scale"

_SOURCE = f"""#ifndef EMBER_WMMA_FRAGMENT_SCALE
#define EMBER_WMMA_FRAGMENT_SCALE
static __device__ __forceinline__ void {ROUTINE}(const void* a, void* c, int64_t lda) {{
  float f[8];
  float* d = (float*)c;
  asm volatile("wmma.load.c.sync.aligned.row.m16n16k16.f32 {{%0, %1, %2, %3, %4, %5, %6, %7}}, [%8], %9;"
               : "=f"(f[0]), "=f"(f[1]), "=f"(f[2]), "=f"(f[3]), "=f"(f[4]), "=f"(f[5]), "=f"(f[6]), "=f"(f[7])
               : "l"(a), "r"((int)lda) : "memory");
#pragma unroll
  for (int i = 0; i < 8; ++i) d[i] *= f[i];
}}
#endif"""


def _declare():
    a = te.placeholder((TILE, TILE), "float32", name="a")
    c = te.placeholder((TILE, TILE), "float32", name="c")
    out = te.compute((TILE, TILE), lambda i, j: c[i, j] * a[i, j], name="out")

    def lower_fn(ins, outs):
        (pa, _), (po,) = ins, outs
        return te.hardware_intrinsic(ROUTINE, pa.access_ptr("r"), po.access_ptr("w"), pa.strides[0])

    return te.decl_tensor_intrin(out.op, lower_fn, name=NAME, c_source=_SOURCE, feature=FEATURE, override=True)


SCALE = _declare()


def scale_call(a: Pointer, lda: int, frag: Pointer, ldf: int) -> CallRoutine:
    """The statement frag *= a on one 16x16 tile: a fp32 in memory at row stride lda, frag the
    tile of a "wmma.accumulator" buffer of row length ldf; the whole warp makes the call."""
    return CallRoutine(ROUTINE, (("intrin", NAME), ("role", "body"), ("c_reads", (0,)), ("c_writes", (2,)),
                                 ("c_scalars", 1)),
                       (a, frag), (frag,), tuple(const(x) for x in (lda, lda, 1, ldf, 1, ldf, 1)))

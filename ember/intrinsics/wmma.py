"""Tensor Cores as tensor intrinsics: the warp-level matrix operations of CUDA's wmma (PTX
`wmma.load` / `wmma.mma` / `wmma.store`) on 16x16x16 tiles, fp16 or bf16 inputs read from shared
memory, fp32 accumulators.

Two intrinsics per input type, and a store:

- `MMA[dtype]`: c[i, j] (+)= sum over k < 16 of a[i, k] * b[k, j], a and b 16x16 row-major
  tiles (any row stride: `ldm`), c a 16x16 fragment of a "wmma.accumulator" buffer. Its reset
  zeroes the fragment, its update loads a's and b's fragments and runs the product;
- `STORE`: out[i, j] = c[i, j], a fragment stored to memory (row-major, any row stride), the
  copy out of a cache_write "wmma.accumulator"; `LOAD`: the other way, a fragment loaded from an
  fp32 tile in memory (a tile kernel's accumulator entering its K loop), its reset (`ZERO`) the
  fragment set to zero (a tile kernel's dot into a block of zeros);
- `MMA["float32"]`: the same 16x16x16 step on fp32 tiles as TF32 (two m16n16k8 steps), each
  operand rounded to TF32's 10 bits of mantissa, to nearest with ties away from zero
  (`cvt.rna.tf32.f32`, which the description does on the bits), products summed in fp32: Triton's
  `input_precision="tf32"`;
- `SHARED_MMA[dtype]`: c[i, j] += sum over k < 16 of a[i, k] * b[k, j] with c a row-major fp32
  tile in memory (loaded into a fragment, multiplied into, stored back): a tile kernel's `tl.dot`
  (ember.triton on the GPU), whose accumulator lives in shared memory between its statements,
  and flash_attention's products on the GPU; `shared_mma_call` is the statement of one call.

`warp_mma(dtype, WM, WN)`: a warp's whole WM x WN tile of fragments updated by one 16-wide step
of k, each fragment of A and B loaded once (WM/16 + WN/16 loads where a call per fragment makes
2 (WM/16)(WN/16)), which is what lets a GEMM keep its fragments in registers across a k step.

Why wmma, now that ember.intrinsics.mma has `ldmatrix` / `mma.sync`: the GEMM schedules
(cuda.tensorcore.tensorcore_gemm, and tensorcore_product where its shared tiles' rows are a power
of two bytes) run on mma, whose register layout is PTX's and whose tiles are swizzled in shared
memory (conflict-free without padding), and wmma stays where mma does not reach yet: TF32
(m16n16k8, a "tf32" model's products), SHARED_MMA's accumulators in shared memory (the tile
kernels' `tl.dot`, flash attention), and products whose rows are not a power of two bytes
(padded instead), with the fragments' layout across the lanes left to the compiler (which lowers
a wmma.load of a padded shared tile to ldmatrix where it can). Neither is what cuBLAS and Triton
run on sm_90 (the warpgroup's asynchronous `wgmma`, fed by TMA). The instructions are
written as inline PTX rather than through `nvcuda::wmma` (mma.h) because that header needs the
CUDA compiler's `crt/` headers, which NVRTC's pip packages do not always ship; the PTX is what
mma.h emits, and NVRTC compiles it for any of those architectures.

A fragment lives in the registers of a warp's 32 lanes, 8 floats each (`ACC_TYPE`), and every
call is made by the whole warp together: the CUDA renderer holds a "wmma.accumulator" buffer as
an array of fragments and leaves the lanes to the calls (ember.cuda.fragments). The loop-IR
interpreter runs the descriptions (fp16/bf16 products summed in float32).
"""

from __future__ import annotations

import re

from .. import te
from ..errors import ScheduleError
from ..tir.expr import binary, const, reinterpret
from ..tir.stmt import CallRoutine, Pointer
from ..tir.tensor_intrin import RESOLVERS

TILE = 16
FEATURE = "wmma"
DTYPES = ("float16", "bfloat16")  # the inputs of a GEMM schedule's fragments (the tf32 product is a tile kernel's)
ACC_TYPE = "ember_wmma_acc"  # a lane's part of an fp32 16x16 accumulator fragment: 8 floats

ACC_SOURCE = f"""#ifndef EMBER_WMMA_ACC
#define EMBER_WMMA_ACC
struct {ACC_TYPE} {{ float x[8]; }};
#endif"""


def _suffix(dtype: str) -> str:
    return {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}[dtype]


def _regs(first: int, n: int) -> str:
    return "{" + ", ".join(f"%{i}" for i in range(first, first + n)) + "}"


def _outs(name: str, n: int, constraint: str = "=r") -> str:
    return ", ".join(f'"{constraint}"({name}[{i}])' for i in range(n))


def once(guard: str, text: str) -> str:
    """text defined once in a unit that several intrinsics' sources bring it into (a kernel
    calling SHARED_MMA and MMA, STORE and SHARED_MMA)."""
    return f"#ifndef {guard}\n#define {guard}\n{text}\n#endif"


_STORE_SOURCE = once("EMBER_WMMA_STORE", f"""{ACC_SOURCE}
static __device__ __forceinline__ void ember_wmma_store(const void* c, void* out, int64_t ldm) {{
  const float* d = ((const {ACC_TYPE}*)c)->x;
  asm volatile("wmma.store.d.sync.aligned.row.m16n16k16.f32 [%0], {_regs(1, 8)}, %9;"
               :: "l"(out), {", ".join(f'"f"(d[{i}])' for i in range(8))}, "r"((int)ldm) : "memory");
}}""")


ZERO = "ember_wmma_zero"  # LOAD's reset: a fragment set to zero (its C call takes the fragment alone)
_LOAD_SOURCE = once("EMBER_WMMA_LOAD", f"""{ACC_SOURCE}
static __device__ __forceinline__ void ember_wmma_load(const void* src, void* c, int64_t ldm) {{
  float* d = (({ACC_TYPE}*)c)->x;
  asm volatile("wmma.load.c.sync.aligned.row.m16n16k16.f32 {_regs(0, 8)}, [%8], %9;"
               : {_outs("d", 8, "=f")} : "l"(src), "r"((int)ldm) : "memory");
}}
static __device__ __forceinline__ void {ZERO}(void* c) {{
#pragma unroll
  for (int i = 0; i < 8; ++i) (({ACC_TYPE}*)c)->x[i] = 0.0f;
}}""")


def _tf32_source() -> str:
    """Two m16n16k8 steps; each loaded operand rounded to TF32 (the load keeps fp32's bits,
    which the product would truncate)."""
    return f"""{ACC_SOURCE}
static __device__ __forceinline__ void ember_wmma_fill_tf32(void* c) {{
  for (int i = 0; i < 8; ++i) (({ACC_TYPE}*)c)->x[i] = 0.0f;
}}
static __device__ __forceinline__ void ember_wmma_mma_tf32(const void* a, const void* b, void* c, int64_t lda,
                                                           int64_t ldb) {{
  unsigned fa[4], fb[4];
  float* d = (({ACC_TYPE}*)c)->x;
#pragma unroll
  for (int h = 0; h < 2; ++h) {{
    asm volatile("wmma.load.a.sync.aligned.row.m16n16k8.tf32 {_regs(0, 4)}, [%4], %5;"
                 : {_outs("fa", 4)} : "l"((const float*)a + 8 * h), "r"((int)lda) : "memory");
    asm volatile("wmma.load.b.sync.aligned.row.m16n16k8.tf32 {_regs(0, 4)}, [%4], %5;"
                 : {_outs("fb", 4)} : "l"((const float*)b + 8 * h * ldb), "r"((int)ldb) : "memory");
#pragma unroll
    for (int i = 0; i < 4; ++i) {{
      asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(fa[i]) : "f"(__uint_as_float(fa[i])));
      asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(fb[i]) : "f"(__uint_as_float(fb[i])));
    }}
    asm volatile("wmma.mma.sync.aligned.row.row.m16n16k8.f32.tf32.tf32.f32 {_regs(0, 8)}, {_regs(8, 4)}, "
                 "{_regs(12, 4)}, {_regs(0, 8)};"
                 : {_outs("d", 8, "+f")} : {", ".join(f'"r"(fa[{i}])' for i in range(4))},
                   {", ".join(f'"r"(fb[{i}])' for i in range(4))});
  }}
}}"""


def _mma_source(dtype: str) -> str:
    text = _tf32_source() if dtype == "float32" else _wmma_source(dtype)
    return once(f"EMBER_WMMA_MMA_{_suffix(dtype).upper()}", text)


def _wmma_source(dtype: str) -> str:
    """fp16 fragments of A and B are 8 registers a lane (2 halves each), bf16's 4."""
    s = _suffix(dtype)
    n = 8 if dtype == "float16" else 4
    ptx = "f16" if dtype == "float16" else "bf16"
    kind = "f32.f32" if dtype == "float16" else "f32.bf16.bf16.f32"
    return f"""{ACC_SOURCE}
static __device__ __forceinline__ void ember_wmma_fill_{s}(void* c) {{
  for (int i = 0; i < 8; ++i) (({ACC_TYPE}*)c)->x[i] = 0.0f;
}}
static __device__ __forceinline__ void ember_wmma_mma_{s}(const void* a, const void* b, void* c, int64_t lda,
                                                          int64_t ldb) {{
  unsigned fa[{n}], fb[{n}];
  float* d = (({ACC_TYPE}*)c)->x;
  asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.{ptx} {_regs(0, n)}, [%{n}], %{n + 1};"
               : {_outs("fa", n)} : "l"(a), "r"((int)lda) : "memory");
  asm volatile("wmma.load.b.sync.aligned.row.m16n16k16.{ptx} {_regs(0, n)}, [%{n}], %{n + 1};"
               : {_outs("fb", n)} : "l"(b), "r"((int)ldb) : "memory");
  asm volatile("wmma.mma.sync.aligned.row.row.m16n16k16.{kind} {_regs(0, 8)}, {_regs(8, n)}, {_regs(8 + n, n)}, "
               "{_regs(0, 8)};"
               : {_outs("d", 8, "+f")} : {", ".join(f'"r"(fa[{i}])' for i in range(n))},
                 {", ".join(f'"r"(fb[{i}])' for i in range(n))});
}}"""


def _mma_description(dtype: str):
    """What a 16x16x16 Tensor Core step computes: c[i, j] = sum over k of a[i, k] * b[k, j] in fp32
    (fp32 operands rounded to TF32 first)."""
    a = te.placeholder((TILE, TILE), dtype, name="a")
    b = te.placeholder((TILE, TILE), dtype, name="b")
    k = te.reduce_axis((0, TILE), name="k")
    wide = _tf32 if dtype == "float32" else (lambda x: x.astype("float32"))
    return te.compute((TILE, TILE), lambda i, j: te.sum(wide(a[i, k]) * wide(b[k, j]), axis=k), name="c")


def _tf32(x):
    """x rounded to TF32 as `cvt.rna.tf32.f32` does: the magnitude's bits plus half of the last kept
    bit's unit, the 13 bits below it cleared (no carry reaches the sign), the sign put back."""
    bits = reinterpret("uint32", x)
    magnitude = binary("&", bits, const(0x7FFFFFFF, "uint32"))
    rounded = binary("&", binary("+", magnitude, const(0x1000, "uint32")), const(0xFFFFE000, "uint32"))
    return reinterpret("float32", binary("|", rounded, binary("&", bits, const(0x80000000, "uint32"))))


def declare_mma(dtype: str):
    """Declare (and register) the 16x16x16 product of `dtype` tiles into fp32 fragments."""
    c = _mma_description(dtype)
    s = _suffix(dtype)

    def lower_fn(ins, outs):
        (pa, pb), (pc,) = ins, outs
        update = te.hardware_intrinsic(f"ember_wmma_mma_{s}", pa.access_ptr("r"), pb.access_ptr("r"),
                                       pc.access_ptr("w"), pa.strides[0], pb.strides[0])
        return None, te.hardware_intrinsic(f"ember_wmma_fill_{s}", pc.access_ptr("w")), update

    return te.decl_tensor_intrin(c.op, lower_fn, name=f"wmma_mma_16x16x16_{s}_f32", c_source=_mma_source(dtype),
                                 feature=FEATURE, override=True)


def _declare_copy(what: str, call: str, source: str, strided: int):
    """Declare (and register) a copy between an fp32 fragment and a row-major 16x16 tile: `call`
    takes the source, the destination and the row stride of the tile (input 0 or output 0)."""
    c = te.placeholder((TILE, TILE), "float32", name="c")
    out = te.compute((TILE, TILE), lambda i, j: c[i, j], name="frag" if what == "load" else "out")

    def lower_fn(ins, outs):
        (pc,), (po,) = ins, outs
        return te.hardware_intrinsic(call, pc.access_ptr("r"), po.access_ptr("w"), (pc, po)[strided].strides[0])

    return te.decl_tensor_intrin(out.op, lower_fn, name=f"wmma_{what}_16x16_f32", c_source=source,
                                 feature=FEATURE, override=True)


def declare_load():
    """Declare (and register) the load of an fp32 fragment from a row-major 16x16 tile."""
    return _declare_copy("load", "ember_wmma_load", _LOAD_SOURCE, 0)


def declare_store():
    """Declare (and register) the store of an fp32 fragment to a row-major 16x16 tile."""
    return _declare_copy("store", "ember_wmma_store", _STORE_SOURCE, 1)


def _warp_mma_source(dtype: str, fm: int, fn: int, name: str, b_layout: str = "row") -> str:
    """A warp's fm x fn fragments updated by one 16-wide step of k: fm fragments of A and fn of
    B loaded once each (fm + fn loads where the 16x16x16 call makes 2 fm fn), then the fm fn
    products; every loop unrolled, so the fragments stay in registers. `b_layout` "col": b is
    given as its transpose (wn, 16), row-major (a linear layer's weights, (N, K))."""
    if dtype == "float32":
        return _warp_tf32_source(fm, fn, name, b_layout)
    n = 8 if dtype == "float16" else 4
    step_b = f"j * {TILE} * ldb" if b_layout == "col" else f"j * {TILE}"
    ptx = "f16" if dtype == "float16" else "bf16"
    kind = "f32.f32" if dtype == "float16" else "f32.bf16.bf16.f32"
    return f"""{ACC_SOURCE}
static __device__ __forceinline__ void {name}_fill(void* c) {{
#pragma unroll
  for (int f = 0; f < {fm * fn}; ++f)
#pragma unroll
    for (int i = 0; i < 8; ++i) (({ACC_TYPE}*)c)[f].x[i] = 0.0f;
}}
static __device__ __forceinline__ void {name}(const void* a, const void* b, void* c, int64_t lda, int64_t ldb) {{
  unsigned fa[{fm}][{n}], fb[{fn}][{n}];
  const {_dtype_c(dtype)}* pa = (const {_dtype_c(dtype)}*)a;
  const {_dtype_c(dtype)}* pb = (const {_dtype_c(dtype)}*)b;
#pragma unroll
  for (int i = 0; i < {fm}; ++i)
    asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.{ptx} {_regs(0, n)}, [%{n}], %{n + 1};"
                 : {_outs("fa[i]", n)} : "l"(pa + i * {TILE} * lda), "r"((int)lda) : "memory");
#pragma unroll
  for (int j = 0; j < {fn}; ++j)
    asm volatile("wmma.load.b.sync.aligned.{b_layout}.m16n16k16.{ptx} {_regs(0, n)}, [%{n}], %{n + 1};"
                 : {_outs("fb[j]", n)} : "l"(pb + {step_b}), "r"((int)ldb) : "memory");
#pragma unroll
  for (int i = 0; i < {fm}; ++i)
#pragma unroll
    for (int j = 0; j < {fn}; ++j) {{
      float* d = (({ACC_TYPE}*)c)[i * {fn} + j].x;
      asm volatile("wmma.mma.sync.aligned.row.{b_layout}.m16n16k16.{kind} {_regs(0, 8)}, {_regs(8, n)}, "
                   "{_regs(8 + n, n)}, {_regs(0, 8)};"
                   : {_outs("d", 8, "+f")} : {", ".join(f'"r"(fa[i][{k}])' for k in range(n))},
                     {", ".join(f'"r"(fb[j][{k}])' for k in range(n))});
    }}
}}"""


def _warp_tf32_source(fm: int, fn: int, name: str, b_layout: str) -> str:
    """`_warp_mma_source` for fp32 tiles as TF32: each 16-wide step of k two m16n16k8 steps, the
    loaded fragments rounded (cvt.rna: a "tf32" model's operands are TF32 values already, so the
    rounding changes nothing for them; the load keeps fp32's bits, which the product would
    truncate)."""
    step_b = f"j * {TILE} * ldb + 8 * h" if b_layout == "col" else f"8 * h * ldb + j * {TILE}"
    cvt = 'asm("cvt.rna.tf32.f32 %0, %1;" : "=r"({0}) : "f"(__uint_as_float({0})));'
    return f"""{ACC_SOURCE}
static __device__ __forceinline__ void {name}_fill(void* c) {{
#pragma unroll
  for (int f = 0; f < {fm * fn}; ++f)
#pragma unroll
    for (int i = 0; i < 8; ++i) (({ACC_TYPE}*)c)[f].x[i] = 0.0f;
}}
static __device__ __forceinline__ void {name}(const void* a, const void* b, void* c, int64_t lda, int64_t ldb) {{
  unsigned fa[{fm}][4], fb[{fn}][4];
  const float* pa = (const float*)a;
  const float* pb = (const float*)b;
#pragma unroll
  for (int h = 0; h < 2; ++h) {{
#pragma unroll
    for (int i = 0; i < {fm}; ++i)
      asm volatile("wmma.load.a.sync.aligned.row.m16n16k8.tf32 {_regs(0, 4)}, [%4], %5;"
                   : {_outs("fa[i]", 4)} : "l"(pa + i * {TILE} * lda + 8 * h), "r"((int)lda) : "memory");
#pragma unroll
    for (int j = 0; j < {fn}; ++j)
      asm volatile("wmma.load.b.sync.aligned.{b_layout}.m16n16k8.tf32 {_regs(0, 4)}, [%4], %5;"
                   : {_outs("fb[j]", 4)} : "l"(pb + {step_b}), "r"((int)ldb) : "memory");
#pragma unroll
    for (int r = 0; r < 4; ++r) {{
#pragma unroll
      for (int i = 0; i < {fm}; ++i) {cvt.format("fa[i][r]")}
#pragma unroll
      for (int j = 0; j < {fn}; ++j) {cvt.format("fb[j][r]")}
    }}
#pragma unroll
    for (int i = 0; i < {fm}; ++i)
#pragma unroll
      for (int j = 0; j < {fn}; ++j) {{
        float* d = (({ACC_TYPE}*)c)[i * {fn} + j].x;
        asm volatile("wmma.mma.sync.aligned.row.{b_layout}.m16n16k8.f32.tf32.tf32.f32 {_regs(0, 8)}, "
                     "{_regs(8, 4)}, {_regs(12, 4)}, {_regs(0, 8)};"
                     : {_outs("d", 8, "+f")} : {", ".join(f'"r"(fa[i][{k}])' for k in range(4))},
                       {", ".join(f'"r"(fb[j][{k}])' for k in range(4))});
      }}
  }}
}}"""


def _dtype_c(dtype: str) -> str:
    return {"float16": "__half", "bfloat16": "__nv_bfloat16"}[dtype]


def check_warp_tile(wm: int, wn: int, b_layout: str) -> None:
    """A ScheduleError unless a warp's wm x wn tile is whole 16x16 fragments and its b tile
    row-major ("row") or its transpose ("col"): the warp steps of wmma and mma take the same."""
    if wm % TILE or wn % TILE or wm <= 0 or wn <= 0:
        raise ScheduleError(f"a warp's tile is made of 16x16 fragments, not {wm}x{wn}")
    if b_layout not in ("row", "col"):
        raise ScheduleError(f"a warp's b tile is row-major or its transpose (\"row\" or \"col\"), not {b_layout!r}")


def warp_mma(dtype: str, wm: int, wn: int, b_layout: str = "row"):
    """The intrinsic of a warp's whole wm x wn tile of fp32 fragments updated by a 16-wide step
    of k, `dtype` inputs (declared and registered the first time it is asked for): c[i, j] (+)=
    sum over k < 16 of a[i, k] * b[k, j], a (wm, 16) and b (16, wn) row-major tiles in shared
    memory (b_layout "col": b given as its transpose, a (wn, 16) row-major tile read bt[j, k]), c
    a (wm, wn) "wmma.accumulator" buffer whose fragments it takes in order (ember.cuda.
    fragments). What `MMA` does per 16x16 fragment, with each fragment of A and B loaded once.
    `dtype` "float32": fp32 tiles of TF32 values (a "tf32" model's operands, rounded where they
    are made), multiplied as TF32 (`_warp_tf32_source`)."""
    check_warp_tile(wm, wn, b_layout)
    name = f"wmma_warp_mma_{wm}x{wn}x16_{_suffix(dtype)}_f32" + ("_bt" if b_layout == "col" else "")
    if name not in _WARP:
        source = _warp_mma_source(dtype, wm // TILE, wn // TILE, f"ember_{name}", b_layout)
        _WARP[name] = declare_warp_step(name, dtype, wm, wn, b_layout, source)
    return _WARP[name]


def declare_warp_step(name: str, dtype: str, wm: int, wn: int, b_layout: str, c_source: str, emulate=None):
    """Declare (and register) the intrinsic `name` of a warp's step (`warp_description`), called as
    ember_<name>(a, b, c, lda, ldb), its reset as ember_<name>_fill(c), both defined by
    `c_source`: wmma's warp steps and mma's (ember.intrinsics.mma, with `emulate`) alike."""
    fn_name = f"ember_{name}"

    def lower_fn(ins, outs):
        (pa, pb), (pc,) = ins, outs
        update = te.hardware_intrinsic(fn_name, pa.access_ptr("r"), pb.access_ptr("r"), pc.access_ptr("w"),
                                       pa.strides[0], pb.strides[0])
        return None, te.hardware_intrinsic(f"{fn_name}_fill", pc.access_ptr("w")), update

    c = warp_description(dtype, wm, wn, b_layout)
    return te.decl_tensor_intrin(c.op, lower_fn, name=name, feature=FEATURE, override=True, c_source=c_source,
                                 emulate=emulate)


def warp_description(dtype: str, wm: int, wn: int, b_layout: str):
    """What a warp's step computes: c (wm, wn) = sum over k < 16 of a[i, k] * b[k, j] in fp32, b
    given as (16, wn), or as its transpose (wn, 16) for b_layout "col"."""
    a = te.placeholder((wm, TILE), dtype, name="a")
    k = te.reduce_axis((0, TILE), name="k")
    if b_layout == "col":
        b = te.placeholder((wn, TILE), dtype, name="b")
        return te.compute((wm, wn), lambda i, j: te.sum(a[i, k].astype("float32") * b[j, k].astype("float32"),
                                                         axis=k), name="c")
    b = te.placeholder((TILE, wn), dtype, name="b")
    return te.compute((wm, wn), lambda i, j: te.sum(a[i, k].astype("float32") * b[k, j].astype("float32"), axis=k),
                      name="c")


_WARP: dict = {}
_WARP_NAME = re.compile(r"wmma_warp_mma_(\d+)x(\d+)x16_(f16|bf16|tf32)_f32(_bt)?")


def _resolve(name: str):
    """The warp's intrinsic named `name`, declared now (a kernel lowered in a worker process names
    one this process has not declared)."""
    m = _WARP_NAME.fullmatch(name)
    if m is None:
        return None
    dtype = {"f16": "float16", "bf16": "bfloat16", "tf32": "float32"}[m.group(3)]
    return warp_mma(dtype, int(m.group(1)), int(m.group(2)), "col" if m.group(4) else "row")


RESOLVERS.append(_resolve)


def _shared_mma_source(dtype: str) -> str:
    s = _suffix(dtype)
    return f"""{_mma_source(dtype)}
static __device__ __forceinline__ void ember_wmma_shared_mma_{s}(const void* a, const void* b, void* c, int64_t lda,
                                                                 int64_t ldb, int64_t ldc) {{
  {ACC_TYPE} acc;
  float* d = acc.x;
  asm volatile("wmma.load.c.sync.aligned.row.m16n16k16.f32 {_regs(0, 8)}, [%8], %9;"
               : {_outs("d", 8, "=f")} : "l"(c), "r"((int)ldc) : "memory");
  ember_wmma_mma_{s}(a, b, &acc, lda, ldb);
  ember_wmma_store(&acc, c, ldc);
}}
static __device__ __forceinline__ void ember_wmma_shared_zero_{s}(void* c, int64_t ldc) {{
  {ACC_TYPE} acc;
  ember_wmma_fill_{s}(&acc);
  ember_wmma_store(&acc, c, ldc);
}}"""


def declare_shared_mma(dtype: str):
    """Declare (and register) c += a @ b on 16x16x16 tiles, c fp32 in memory."""
    c = _mma_description(dtype)
    s = _suffix(dtype)

    def lower_fn(ins, outs):
        (pa, pb), (pc,) = ins, outs
        reset = te.hardware_intrinsic(f"ember_wmma_shared_zero_{s}", pc.access_ptr("w"), pc.strides[0])
        return None, reset, te.hardware_intrinsic(f"ember_wmma_shared_mma_{s}", pa.access_ptr("r"),
                                                 pb.access_ptr("r"), pc.access_ptr("w"), pa.strides[0],
                                                 pb.strides[0], pc.strides[0])

    return te.decl_tensor_intrin(c.op, lower_fn, name=f"wmma_shared_mma_16x16x16_{s}_f32",
                                 c_source=_STORE_SOURCE + "\n" + _shared_mma_source(dtype), feature=FEATURE,
                                 override=True)


def shared_mma_call(dtype: str, a: Pointer, b: Pointer, c: Pointer, lda: int, ldb: int, ldc: int) -> CallRoutine:
    """The statement c += a @ b on 16x16x16 tiles (SHARED_MMA[dtype]): a and b of dtype, c fp32, all
    row-major in memory at those row strides; the whole warp makes the call."""
    s = _suffix(dtype)
    return CallRoutine(f"ember_wmma_shared_mma_{s}", (
        ("intrin", f"wmma_shared_mma_16x16x16_{s}_f32"), ("role", "update"), ("c_reads", (0, 1)), ("c_writes", (2,)),
        ("c_scalars", 3)), (a, b), (c,), tuple(const(x) for x in (lda, ldb, ldc, lda, 1, ldb, 1, ldc, 1)))


MMA = {dtype: declare_mma(dtype) for dtype in (*DTYPES, "float32")}
SHARED_MMA = {dtype: declare_shared_mma(dtype) for dtype in (*DTYPES, "float32")}
STORE = declare_store()
LOAD = declare_load()

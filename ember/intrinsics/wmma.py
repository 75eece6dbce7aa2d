"""Tensor Cores as tensor intrinsics: CUDA's warp-level matrix functions (`nvcuda::wmma`) on
16x16x16 tiles, fp16 or bf16 inputs read from shared memory, fp32 accumulators.

Two intrinsics per input type:

- `MMA[dtype]`: c[i, j] (+)= sum over k < 16 of a[i, k] * b[k, j], a and b 16x16 tiles of
  shared memory (any row stride: `ldm`), c a 16x16 fragment of a "wmma.accumulator" buffer.
  Its reset is `fill_fragment(c, 0)`, its update loads a's and b's fragments
  (`load_matrix_sync`) and runs `mma_sync`;
- `STORE`: out[i, j] = c[i, j], a fragment stored to memory (`store_matrix_sync`, row-major,
  any row stride), the copy out of a cache_write "wmma.accumulator".

Why wmma and not `ldmatrix` / `mma.sync` in inline PTX: wmma is plain CUDA C that NVRTC
compiles from its own headers (`mma.h`), portable across sm_70 and later with the fragment
layout left to the compiler; `mma.sync` would give control of the register layout (and of
ldmatrix's conflict-free shared loads) at the price of per-architecture PTX, a later step.

A fragment lives in the registers of a warp's 32 lanes, each holding a part, and every call
is made by the whole warp together: the C functions take the accumulator's address as that of a
`wmma::fragment`, so the buffer a call names as c must be held as fragments. The loop-IR
interpreter runs the descriptions (fp16/bf16 products summed in float32), which is how these
declarations are checked today.

Not yet: the CUDA renderer emitting the calls (a "wmma.accumulator" scope held as an array of
fragments, each 16x16 tile's first element naming one, threadIdx.x left unbound around the
calls so that every lane of the warp makes them), compact_buffers sizing a shared tile that only
tensorized calls read (it sees a call's address, not the region behind it), and the
`tensorcore_gemm` schedule built on both.
"""

from __future__ import annotations

from .. import te

TILE = 16
FEATURE = "wmma"
DTYPES = ("float16", "bfloat16")
_CTYPE = {"float16": "__half", "bfloat16": "__nv_bfloat16"}

HEADER = "#include <mma.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>"

_ACC = "nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>"

_STORE_SOURCE = f"""{HEADER}
static __device__ __forceinline__ void ember_wmma_store(const void* c, void* out, int64_t ldm) {{
  nvcuda::wmma::store_matrix_sync((float*)out, *(const {_ACC}*)c, (unsigned)ldm, nvcuda::wmma::mem_row_major);
}}"""


def _mma_source(dtype: str) -> str:
    t, s = _CTYPE[dtype], _suffix(dtype)
    frag = "nvcuda::wmma::fragment<nvcuda::wmma::matrix_{0}, 16, 16, 16, " + t + ", nvcuda::wmma::row_major>"
    return f"""{HEADER}
static __device__ __forceinline__ void ember_wmma_fill_{s}(void* c) {{
  nvcuda::wmma::fill_fragment(*({_ACC}*)c, 0.0f);
}}
static __device__ __forceinline__ void ember_wmma_mma_{s}(const void* a, const void* b, void* c, int64_t lda,
                                                          int64_t ldb) {{
  {frag.format("a")} fa;
  {frag.format("b")} fb;
  nvcuda::wmma::load_matrix_sync(fa, (const {t}*)a, (unsigned)lda);
  nvcuda::wmma::load_matrix_sync(fb, (const {t}*)b, (unsigned)ldb);
  nvcuda::wmma::mma_sync(*({_ACC}*)c, fa, fb, *({_ACC}*)c);
}}"""


def _suffix(dtype: str) -> str:
    return {"float16": "f16", "bfloat16": "bf16"}[dtype]


def declare_mma(dtype: str):
    """Declare (and register) the 16x16x16 product of `dtype` tiles into fp32 fragments."""
    a = te.placeholder((TILE, TILE), dtype, name="a")
    b = te.placeholder((TILE, TILE), dtype, name="b")
    k = te.reduce_axis((0, TILE), name="k")
    c = te.compute((TILE, TILE), lambda i, j: te.sum(a[i, k].astype("float32") * b[k, j].astype("float32"),
                                                     axis=k), name="c")
    s = _suffix(dtype)

    def lower_fn(ins, outs):
        (pa, pb), (pc,) = ins, outs
        update = te.hardware_intrinsic(f"ember_wmma_mma_{s}", pa.access_ptr("r"), pb.access_ptr("r"),
                                       pc.access_ptr("w"), pa.strides[0], pb.strides[0])
        return None, te.hardware_intrinsic(f"ember_wmma_fill_{s}", pc.access_ptr("w")), update

    return te.decl_tensor_intrin(c.op, lower_fn, name=f"wmma_mma_16x16x16_{s}_f32", c_source=_mma_source(dtype),
                                 feature=FEATURE, override=True)


def declare_store():
    """Declare (and register) the store of an fp32 fragment to a row-major 16x16 tile."""
    c = te.placeholder((TILE, TILE), "float32", name="c")
    out = te.compute((TILE, TILE), lambda i, j: c[i, j], name="out")

    def lower_fn(ins, outs):
        (pc,), (po,) = ins, outs
        return te.hardware_intrinsic("ember_wmma_store", pc.access_ptr("r"), po.access_ptr("w"), po.strides[0])

    return te.decl_tensor_intrin(out.op, lower_fn, name="wmma_store_16x16_f32", c_source=_STORE_SOURCE,
                                 feature=FEATURE, override=True)


MMA = {dtype: declare_mma(dtype) for dtype in DTYPES}
STORE = declare_store()

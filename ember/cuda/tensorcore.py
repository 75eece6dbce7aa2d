"""GPU schedules on Tensor Cores (ember.intrinsics.mma's mma.sync or ember.intrinsics.wmma's
fragments), fp16/bf16 operands with fp32 sums (fp32 ones as TF32):

- `tensorcore_gemm`: C = A @ B, a warp's accumulators in registers across the K loop, A's and B's
  tiles staged in shared memory by cp.async in `stages`;
- `tensorcore_product`: an operator's product at any shape (batch axes, B transposed, tiles
  padded; a convolution's columns computed as they are copied), its epilogue computed from the
  fp32 sums (in the lanes' fragments on mma: ember.cuda.fragment_epilogue), on
  ember.cuda.schedules' operands and block grid (`product_operands`, `shared_operands`,
  `block_grid`, shared with its CUDA-core twin `cuda_core_product`).
"""

from __future__ import annotations

from .. import te
from ..errors import ScheduleError
from ..target import STATIC_SHARED
from ..te.schedule import TESchedule, ThreadAxis
from ..tir import dtype as dt
from ..tir.expr import as_int
from .fragment_epilogue import FRAGMENT_EPILOGUE
from .schedules import block_grid, product_operands, shared_operands


def tensorcore_gemm(M: int, N: int, K: int, dtype: str = "float16", *, BM: int = 128, BN: int = 128, BK: int = 32,
                    WM: int = 64, WN: int = 64, pad: int | None = None, stages: int | None = None,
                    intrinsic: str | None = None, group: int | None = None):
    """C = A @ B on Tensor Cores: A (M, K) and B (K, N) of `dtype` (float16 or bfloat16), C
    (M, N) float32. A block computes a BM x BN tile of C with (BM/WM) x (BN/WN) warps
    (threadIdx.y the warp, threadIdx.x its 32 lanes), each warp a WM x WN tile of fp32
    accumulators in registers (cache_write "wmma.accumulator") for the whole K loop, written out
    once at its end. The K loop stages BK-wide tiles of A and B in shared memory (cache_read
    "shared"), copied by all the block's threads together 16 bytes a thread at a time, `stages`
    of them in flight (cp.async: ember.cuda.pipeline; 1, none); at each 16-wide step of k a warp
    loads each of its fragments of A and B once and makes every product of its tile. The nest of
    the calls binds threadIdx.y only: every lane of the warp runs it, as the warp-level calls need.
    Returns the te schedule and [A, B, C].

    `intrinsic` "mma": ldmatrix and mma.sync.m16n8k16 (ember.intrinsics.mma), the shared tiles
    swizzled (conflict-free without padding: `pad` 0), which takes rows of A (BK) and B (BN) of a
    power of two bytes (ember.intrinsics.mma_lanes.swizzles); "wmma": wmma's 16x16x16
    (ember.intrinsics.wmma), the shared rows `pad` elements longer (default 8: with rows a
    multiple of 128 bytes apart, the 16 rows a fragment load reads would share banks). None (the
    default): mma where its rows fit (the default tiles: A's rows of 64 bytes, B's of 256), else
    wmma. `stages` defaults to 3 on mma (48 KiB of 128x128x32 tiles, static shared memory), 2 on wmma.
    `group`: the blocks run down `group` rows of tiles of C before the next columns (blockIdx.x
    over (rows / group, columns, group)), so that blocks running together share tiles of A and B
    in the L2; 1, row after row (the default on wmma; 8 on mma).

    On an H200 (fp16 and bf16 4096^3, CUDA events), wmma: 210 TFLOP/s with 128x128x32, 64x64
    warps, padded rows, 2 stages, 30% of cuBLAS (the first version, a call per fragment, no
    padding, no pipelining: 14%); without the padding 15%, with 64x32 warps 25%, in one stage
    24%; mma's 12 configurations were all wrong there (B's rows of 256 bytes and more, swizzled
    by the address in shared memory then, not by the offset in the tile: mma_lanes' module doc).
    Stages and tiles past the 48 KiB of static shared memory (4 stages of 128x128x32, 3 of
    128x256x32) take dynamic shared memory (ember.cuda.launch_shape.DYNAMIC), up to what a block may
    opt in to (227 KiB on sm_90)."""
    from ..intrinsics import wmma

    if dtype not in wmma.DTYPES:
        raise ScheduleError(f"tensorcore_gemm takes {wmma.DTYPES} inputs, not {dtype}")
    intrinsic = intrinsic or _fitting_intrinsic(dtype, BK, BN)
    stages = (3 if intrinsic == "mma" else 2) if stages is None else stages
    group = (8 if intrinsic == "mma" else 1) if group is None else group
    pad = _check_intrinsic(intrinsic, pad)
    _check_tensorcore(M, N, K, BM, BN, BK, WM, WN, pad)
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("float32") * B[k, j].astype("float32"), axis=k),
                   name="C")
    s = te.create_schedule(C.op)
    caches = (s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C]), s.cache_write(C, "wmma.accumulator"))
    i, j = s[C].op.axis
    bi, ii = s[C].split(i, factor=BM)
    bj, jj = s[C].split(j, factor=BN)
    group = max(1, min(group, M // BM))
    if (M // BM) % group:
        raise ScheduleError(f"tensorcore_gemm: groups of {group} rows of tiles must divide the {M // BM} rows")
    rows, row = s[C].split(bi, factor=group)
    s[C].reorder(rows, bj, row, ii, jj)
    block = s[C].fuse(rows, bj, row)
    s[C].bind(block, ThreadAxis("blockIdx.x"))
    row_a, row_b = BK + pad, BN + pad
    if stages * (BM * row_a + BK * row_b) * dt.bits(dtype) // 8 > STATIC_SHARED:
        s[C].pragma(block, "dynamic_shared", True)  # (ember.cuda.launch_shape.DYNAMIC)
    _warp_tiles(s, C, *caches, (block, None, ii, jj), BM, BN, BK, WM, WN, pad, stages, dtype, intrinsic=intrinsic)
    return s, [A, B, C]


def _fitting_intrinsic(dtype: str, *row_lengths: int) -> str:
    """"mma" where the inputs are 16-bit and the shared tiles' rows (of these lengths) can be
    swizzled (ember.intrinsics.mma_lanes.swizzles), else "wmma"."""
    from ..intrinsics import mma_lanes

    size = dt.bits(dtype) // 8
    fits = dtype != "float32" and all(mma_lanes.swizzles(n * size) for n in row_lengths)
    return "mma" if fits else "wmma"


def _check_intrinsic(intrinsic: str, pad: int | None) -> int:
    """The rows' padding of a Tensor Core schedule on `intrinsic` (its default where None)."""
    if intrinsic not in ("mma", "wmma"):
        raise ScheduleError(f"Tensor Core schedules run on \"mma\" (mma.sync) or \"wmma\", not {intrinsic!r}")
    if intrinsic == "mma" and pad:
        raise ScheduleError(f"mma.sync reads swizzled shared tiles, whose rows are not padded (pad {pad})")
    return (8 if intrinsic == "wmma" else 0) if pad is None else pad


def tensorcore_product(s: TESchedule, C, out, *, BM: int = 64, BN: int = 64, BK: int = 32, WM: int = 32,
                       WN: int = 64, stages: int = 2, intrinsic: str | None = None,
                       fragment_stores: bool = True) -> None:
    """An operator's float16/bfloat16 product on Tensor Cores, any shape (float32 operands as
    TF32, a "tf32" model's): C, its float32 sum of products (C[.., i, j] = sum over k of
    A[.., i, k] * B[.., k, j], batch axes first; B may be read transposed, B[.., j, k], a linear
    layer's weights), and `out`, the kernel's output computed from C (its cast to the inputs'
    type, and any epilogue fused after it: a bias, a GELU, a residual), of C's shape or with C's
    last axis split in two (a convolution's output positions, OH*OW as (OH, OW)). A block
    computes a BM x BN tile of C (of one batch element) as `tensorcore_gemm` does; on mma, each
    lane then computes `out` at the elements of its fragments, the epilogue applied to the fp32
    sums in its registers (`fragment_stores`: out's tile loops marked FRAGMENT_EPILOGUE for
    ember.cuda.fragment_epilogue; two adjacent columns one store), else (wmma, whose fragments'
    layout is the compiler's, or fragment_stores False) the fragments are stored into a float32
    tile in shared memory, from which the block's threads compute `out` (coalesced, after a
    barrier). Where the tiles do not divide M, N or K,
    the product is padded with zeros (pad_einsum): the copies of A's and B's tiles into shared
    memory write zeros past the operands' ends, so the sums are unchanged and the fragments stay
    whole, and the tiles of `out` are guarded. The operands are read with `product_operands`'
    layouts; one that is a stage of the kernel (a convolution's columns, ember.ops.conv_gemm; a
    prologue, in its pad stage) is computed as its tiles are copied. `intrinsic` (as
    tensorcore_gemm's; None: "mma" where the shared tiles' rows are a power of two bytes, as
    swizzling needs, and the inputs 16-bit, else "wmma", its rows padded by 16 bytes)."""
    A, B, b_layout = product_operands(s, C)
    (M, N), K = (as_int(d) for d in C.shape[-2:]), as_int(s[C].op.reduce_axis[0].dom.extent)
    intrinsic = intrinsic or _fitting_intrinsic(A.dtype, BK, BK if b_layout == "col" else BN)
    pad = _check_intrinsic(intrinsic, None if intrinsic == "mma" else 128 // dt.bits(A.dtype))  # wmma: 16 bytes
    _check_tensorcore(*(t if n is None else t * -(-n // t) for n, t in ((M, BM), (N, BN), (K, BK))),
                      BM, BN, BK, WM, WN, pad, A.dtype)
    C, operands = shared_operands(s, C, A, B, BM, BN, BK)
    CF = s.cache_write(C, "wmma.accumulator")
    ii, jj, at = block_grid(s, out, C, BM, BN)
    if fragment_stores and intrinsic == "mma":  # the tile's loops left whole for ember.cuda.fragment_epilogue
        s[out].pragma(ii, FRAGMENT_EPILOGUE, True)
    else:
        _, rest = s[out].split(s[out].fuse(ii, jj), factor=(BM // WM) * (BN // WN) * 32)
        y, x = s[out].split(rest, factor=32)
        s[out].bind(y, ThreadAxis("threadIdx.y"))
        s[out].bind(x, ThreadAxis("threadIdx.x"))
    s[C].compute_at(s[out], at)
    _warp_tiles(s, C, *operands, CF, (None, None, *s[C].op.axis[-2:]), BM, BN, BK, WM, WN, pad, stages, A.dtype,
                b_layout, intrinsic)


def _check_tensorcore(M, N, K, BM, BN, BK, WM, WN, pad, dtype: str = "float16") -> None:
    if M % BM or N % BN or K % BK or BM % WM or BN % WN or WM % 16 or WN % 16 or BK % 16:
        raise ScheduleError(f"tensorcore_gemm: tiles {BM}x{BN}x{BK} (warps' {WM}x{WN}, in 16x16x16 steps) must "
                            f"divide {M}x{N}x{K}")
    lanes = 128 // dt.bits(dtype)
    if pad % lanes or pad < 0:
        raise ScheduleError(f"tensorcore_gemm: rows padded by {pad} elements; wmma loads rows 16 bytes apart (a "
                            f"multiple of {lanes})")


def _warp_tiles(s: TESchedule, C, AS, BS, CF, axes, BM, BN, BK, WM, WN, pad, stages, dtype,
                b_layout: str = "row", intrinsic: str = "wmma") -> None:
    """C's BM x BN block tile (`axes`: its block loops, None where they are another stage's,
    then its loops over the tile; any batch axes before them span one element) on the block's
    warps, each a WM x WN tile of fragments (CF) over the K loop, with A's and B's tiles staged
    in AS and BS (B's transposed for `b_layout` "col"; see tensorcore_gemm), on `intrinsic`'s
    calls (ember.intrinsics.mma or wmma)."""
    from ..intrinsics import mma, wmma

    bi, bj, ii, jj = axes
    wi, ii = s[C].split(ii, factor=WM)
    store_fi, store_i = s[C].split(ii, factor=16)
    wj, jj = s[C].split(jj, factor=WN)
    store_fj, store_j = s[C].split(jj, factor=16)
    s[C].reorder(*[a for a in (bi, bj) if a is not None], wi, wj, store_fi, store_fj, store_i, store_j)
    warp = s[C].fuse(wi, wj)
    s[C].bind(warp, ThreadAxis("threadIdx.y"))
    s[CF].compute_at(s[C], warp)
    ci, cj = s[CF].op.axis[-2:]
    (kk,) = s[CF].op.reduce_axis
    ko, ki = s[CF].split(kk, factor=BK)
    kf, kt = s[CF].split(ki, factor=16)
    s[CF].reorder(ko, kf, ci, cj, kt)
    s[CF].unroll(kf)
    if stages > 1:
        s[CF].pragma(ko, "software_pipeline", stages)
    for axis in (store_fi, store_fj):
        s[C].unroll(axis)
    threads = (BM // WM) * (BN // WN) * 32
    for S, row_length in ((AS, BK), (BS, BK if b_layout == "col" else BN)):
        s[S].compute_at(s[CF], ko)
        *lead, row, col = s[S].op.axis
        if pad:
            s[S].storage_align(row, row_length, pad)
        # 16 bytes a thread at a time (ember.cuda.vectors)
        col, lanes = s[S].split(col, factor=128 // dt.bits(dtype))
        s[S].vectorize(lanes)
        _, rest = s[S].split(s[S].fuse(*lead, row, col), factor=threads)
        y, x = s[S].split(rest, factor=32)
        s[S].bind(y, ThreadAxis("threadIdx.y"))
        s[S].bind(x, ThreadAxis("threadIdx.x"))
    # tensorize removes the blocks: the primitives on their loops come first
    calls = mma if intrinsic == "mma" else wmma
    s[CF].tensorize(ci, calls.warp_mma(dtype, WM, WN, b_layout))
    s[C].tensorize(store_i, calls.STORE)

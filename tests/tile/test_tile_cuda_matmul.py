"""The tutorial's matmul (examples/triton/03_matmul.py) compiled for target "cuda" and interpreted
with GPU semantics (tile_cuda.py): its tl.dot on the Tensor Cores (wmma, or mma.sync through
ldmatrix, as the target's architecture allows), the accumulator in registers across the K loop,
the operands' copies pipelined by cp.async, the epilogue stored from the fragments."""

import numpy as np
import pytest
from tile_cuda import interpret_cuda, needs_nvrtc, tf32

import ember.triton as triton
from ember.target import GPU, Target


def operands(rng, dtype, shape):
    if dtype == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
    return rng.standard_normal(shape).astype(dtype)



def launch_matmul(tutorials, a, b, c, block_m, block_n, block_k, group_m, activation, **options):
    """The tutorial's kernel on row-major a (M x K) and b (K x N) into c, a program per block of c."""
    (M, K), N = a.shape, b.shape[1]
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    tutorials["03_matmul"].matmul_kernel.base_fn[grid](
        a, b, c, M, N, K, K, 1, N, 1, N, 1, BLOCK_SIZE_M=block_m, BLOCK_SIZE_N=block_n, BLOCK_SIZE_K=block_k,
        GROUP_SIZE_M=group_m, ACTIVATION=activation, **options)


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_matmul_on_tensor_cores_accumulates_in_registers(tutorials, rng, on_cuda, dtype, monkeypatch):
    """The tutorial's `accumulator = tl.dot(a, b, accumulator)` over K: each warp's tiles of the
    accumulator zeroed in fragments before the loop (`tl.zeros`: no zeros written to shared memory),
    multiplied into there (fp16, bf16, and float32 as TF32, Triton's default input_precision),
    stored once after it; the operands' tiles copied by cp.async two iterations ahead (Triton's
    default num_stages=3), of three K steps."""
    monkeypatch.setenv("EMBER_TILE_MMA", "0")  # (wmma: the fallback where a GPU finds mma.sync wrong)
    M, N, K = 37, 29, 41  # no block size divides these
    a, b = operands(rng, dtype, (M, K)), operands(rng, dtype, (K, N))
    c = np.empty((M, N), a.dtype)
    launch_matmul(tutorials, a, b, c, 32, 32, 16, 2, "", num_warps=2)  # two of the four 16x16 tiles a warp
    wide = [x.astype(np.float64) for x in ((tf32(a), tf32(b)) if dtype == "float32" else (a, b))]
    want = wide[0] @ wide[1]
    eps = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 1e-5}[dtype]  # c's rounding, or fp32's sums
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=eps, atol=eps * np.abs(want).max())
    if dtype == "float32":  # TF32 is not float32: the exact product is further away
        assert np.abs(c - a.astype(np.float64) @ b).max() > 1e-4 * np.abs(want).max()
    (source,) = on_cuda
    suffix = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}[dtype]
    # the warps a 1x2 grid over the 2x2 tiles, a warp's two tiles: zeroed before the loop, stored after it
    # (+ each definition); in it one call per 16 of k for both (fp16, bf16: each fragment of A and B
    # loaded once) or a TF32 call per tile
    product = f"ember_wmma_mma_{suffix}(" if dtype == "float32" else f"ember_wmma_warp_mma_32x16x16_{suffix}_f32("
    assert source.count(product) == (2 if dtype == "float32" else 1) + 1
    assert source.count("ember_wmma_zero(") == source.count("ember_wmma_store(") == 2 + 1
    assert source.count("ember_wmma_load(") == 1 and "ember_wmma_shared_mma" not in source
    # A's and B's copies issued in the two steps before the loop and once in it, into three stages of
    # their tiles (rows padded by 16 bytes: 3 * (32 * 24 + 16 * 40) halves, or 3 * (32 * 20 + 16 * 36)
    # floats), whose memory the 4096 bytes of the accumulator take after the loop
    assert "cp.async.wait_group 1;" in source and source.count("cp.async.commit_group") == 3
    assert f"dynamic shared memory {14592 if dtype == 'float32' else 8448} bytes" in source
    # barriers: before the loop, one in it (after the wait: the stages'), before the accumulator takes the
    # stages' memory, before the epilogue reads it
    assert source.count("__syncthreads()") == 4


@needs_nvrtc
@pytest.mark.parametrize("arch, dtype, product", [("sm_75", "float16", "wmma.mma.sync"), ("sm_75", "bfloat16", None),
                                                  ("sm_75", "float32", None), ("sm_80", "bfloat16", "m16n8k16")])
def test_matmul_takes_the_tensor_cores_of_the_targets_architecture(tutorials, rng, on_cuda, arch, dtype, product):
    """tl.dot follows the target GPU (GPU.tensor_cores): on sm_75 float16 on wmma (no m16n8k16,
    no ldmatrix), bfloat16 and TF32 on CUDA cores, its pipelined copies plain (no cp.async); on
    sm_80 mma.sync through ldmatrix, cp.async. Each compiled by NVRTC for that architecture."""
    interpret_cuda.target = Target("cuda", gpu=GPU.of(arch))
    M, N, K = 37, 29, 41
    a, b = operands(rng, dtype, (M, K)), operands(rng, dtype, (K, N))
    c = np.empty((M, N), a.dtype)
    launch_matmul(tutorials, a, b, c, 32, 32, 16, 2, "", num_warps=2)
    want = a.astype(np.float64) @ b.astype(np.float64)
    eps = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 1e-5}[dtype]
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=eps, atol=eps * np.abs(want).max())
    (source,) = on_cuda
    for call in ("wmma.mma.sync", "m16n8k16"):
        assert (call in source) == (call == product)
    assert ("ldmatrix" in source) == (product == "m16n8k16") and ("cp.async.cg" in source) == (arch == "sm_80")


@needs_nvrtc
def test_matmul_warps_as_a_grid(tutorials, rng, on_cuda, monkeypatch):
    """A 64x64 block on 4 warps: a 2x2 grid of warps, each a 32x32 block of fragments (Triton's
    warpsPerCTA), four products per 16 of k from two fragments of A and two of B; the operands
    read 16 bytes at a time where they can be (num_stages=1: in their own iteration, no cp.async)."""
    monkeypatch.setenv("EMBER_TILE_MMA", "0")  # (wmma: the fallback where a GPU finds mma.sync wrong)
    M, N, K = 70, 45, 40
    a, b = operands(rng, "float16", (M, K)), operands(rng, "float16", (K, N))
    c = np.empty((M, N), a.dtype)
    launch_matmul(tutorials, a, b, c, 64, 64, 32, 1, "", num_warps=4, num_stages=1)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=2.0 ** -10, atol=2.0 ** -10 * np.abs(want).max())
    (source,) = on_cuda
    assert source.count("ember_wmma_warp_mma_32x32x16_f16_f32(") == 1 + 1
    assert "threadIdx.y;" in source and "/ 2 * 2048" in source  # warp ty's rows: (ty / 2) * 32 of 64 columns
    # the operands' tiles copied 16 bytes at a time where a vector is aligned and unmasked (A's rows of 40
    # halves from the first column; K's tail of 8 in the second step), else element by element
    assert source.count("*reinterpret_cast<uint4*>(&ld") == 2 and "cp.async" not in source
    assert ", 40, 72);" in source  # the shared tiles' rows of 32 and 64 halves padded by 16 bytes (lda, ldb)



@needs_nvrtc
@pytest.mark.parametrize("dtype, block_n, warp", [("float16", 64, "32x32"), ("bfloat16", 128, "64x32")])
def test_matmul_on_mma_sync(tutorials, rng, on_cuda, monkeypatch, dtype, block_n, warp):
    """EMBER_TILE_MMA=1: the tutorial's dot on ldmatrix and mma.sync, a 2x2 grid of warps over a
    64x64 or 64x128 block (B's rows of 128 or 256 bytes), K (40) not a multiple of BLOCK_SIZE_K
    (32) and M, N not of the block (masks at the edges, on the K loop too), the operands' tiles
    unpadded and swizzled (on 128-byte lines), copied by cp.async in three stages (more than the K
    loop's two steps); the accumulator zeroed in mma's lane layout and stored from it by the lanes
    (epilogue.py: no float block in shared memory)."""
    monkeypatch.setenv("EMBER_TILE_MMA", "1")
    M, N, K = 50, 45, 40
    a, b = operands(rng, dtype, (M, K)), operands(rng, dtype, (K, N))
    c = np.empty((M, N), a.dtype)
    launch_matmul(tutorials, a, b, c, 64, block_n, 32, 1, "", num_warps=4)
    want = a.astype(np.float64) @ b.astype(np.float64)
    eps = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}[dtype]
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=eps, atol=eps * np.abs(want).max())
    (source,) = on_cuda
    suffix = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    assert source.count(f"ember_mma_warp_{warp}x16_{suffix}_f32(") == 1 + 1 and "wmma." not in source
    assert "ldmatrix.sync.aligned.m8n8.x4.trans" in source and "mma.sync.aligned.m16n8k16" in source
    assert "ember_mma_store(" not in source and "cp.async.wait_group 1;" in source
    assert "ember_wmma_" not in source.replace("ember_wmma_acc", "")  # (mma's fragments are wmma's type)
    assert f", 32, {block_n}, " in source  # the tiles' rows of 32 and block_n, unpadded (lda, ldb), then their offsets
    # the store of c: each of a lane's pairs of columns (2 halves x 2 rows of each of its warp's tiles) one
    # store of both under one test of their masks, from its floats of the fragments
    tiles = {"32x32": 4, "64x32": 8}[warp]
    assert source.count({"float16": "__halves2half2(", "bfloat16": "__halves2bfloat162("}[dtype]) == 4 * tiles
    assert "float4" not in source
    # A's K mask (`offs_k < K - k * BK`, affine in a vector's lanes) tested at its last lane alone
    assert "tx % 4 * 8 + 7) < K[0]) {" in source and "tx % 4 * 8 + 6) < K[0]) &&" not in source
    assert "extern __shared__ __align__(128)" in source


@needs_nvrtc
@pytest.mark.parametrize("dtype, out, activation", [("float16", "float16", ""), ("bfloat16", "bfloat16", "leaky_relu"),
                                                    ("float16", "float32", "leaky_relu")])
def test_matmul_on_mma_sync_stores_c_from_the_fragments(tutorials, rng, on_cuda, dtype, out, activation):
    """The accumulator's fragments (mma's layout) stored to c by the lanes that hold them, converted
    to c's type (float16, bfloat16, float32) after the tutorial's leaky_relu: no float block in
    shared memory, no barrier before the epilogue, each pair of adjacent columns of a row one store
    (half2, bfloat162, float2) where both are inside c and the row's offset is even, else each column
    under its mask (M, N, K odd: masks at every edge, rows of 45 at odd offsets every other row)."""
    M, N, K = 50, 45, 40
    a, b = operands(rng, dtype, (M, K)), operands(rng, dtype, (K, N))
    c = np.full((M, N), np.nan, operands(rng, out, (1,)).dtype)
    launch_matmul(tutorials, a, b, c, 64, 64, 32, 1, activation, num_warps=4)
    want = a.astype(np.float64) @ b.astype(np.float64)
    if activation:
        want = np.where(want >= 0, want, 0.01 * want)
    eps = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 1e-6}[out]  # c's rounding, or fp32's sums
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=eps, atol=eps * np.abs(want).max())
    (source,) = on_cuda
    pair = {"float16": "__halves2half2(", "bfloat16": "__halves2bfloat162(", "float32": "make_float2("}[out]
    assert "ember_mma_store(" not in source and source.count(pair) == 4 * 4  # (4 tiles of 16x16 a warp)
    # the three stages of the operand tiles alone in shared memory (3 * (64 * 32 + 32 * 64) halves), two
    # barriers: the stages' in the K loop and the one before it
    assert "dynamic shared memory 24576 bytes" in source and source.count("__syncthreads()") == 2
    if out == "float16":  # (the cast's rounding is the store's: one conversion)
        assert f"{pair}__float2half_rn(frag" in source


@needs_nvrtc
def test_matmul_on_mma_sync_by_default_at_tritons_config(tutorials, rng, on_cuda):
    """The default lowering at Triton's usual fp16 shape: 128x128x32 blocks on 8 warps (2 x 4 warps of
    64x32), 4 stages over 4 K steps (the prologue's 3, then the loop's), M, N, K multiples of 16
    (assumed so by the kernel: its copies' alignment tests fold) but not of the block (one program,
    masked on every edge), in bf16."""
    M, N, K = 112, 112, 112
    a, b = operands(rng, "bfloat16", (M, K)), operands(rng, "bfloat16", (K, N))
    c = np.empty((M, N), a.dtype)
    launch_matmul(tutorials, a, b, c, 128, 128, 32, 8, "", num_warps=8, num_stages=4)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=2.0 ** -7, atol=2.0 ** -7 * np.abs(want).max())
    (source,) = on_cuda
    assert source.count("ember_mma_warp_64x32x16_bf16_f32(") == 1 + 1 and "cp.async.wait_group 2;" in source
    assert "__builtin_assume((K_value & 15) == 0);" in source and "wmma." not in source
    assert ", 32, 128, kk * 16, ty" in source  # the offsets in the swizzle's period: no stage, no warp row of A

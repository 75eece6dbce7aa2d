"""Tensor Cores through ldmatrix and mma.sync (ember.intrinsics.mma): PTX's lane layouts as the
interpreter models them (ember.intrinsics.mma_lanes) against the ISA's tables and against a
product, the swizzle's banks, the GEMM schedule on them (swizzled tiles, 3 and 4 cp.async stages)
on the interpreter against NumPy, compiled by NVRTC for sm_90, and on a GPU where there is one."""

import ml_dtypes
import numpy as np
import pytest
from gpu_kernels import needs_gpu, needs_nvrtc

import ember
from ember.cuda import kernel as cuda_kernel
from ember.cuda import tensorcore
from ember.errors import ScheduleError
from ember.intrinsics import mma, mma_lanes

NUMPY = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def test_lane_layouts_are_ptx_s():
    """Lane 5 (groupID 1, threadID_in_group 1) holds what the ISA's figures for m16n8k16 say, and
    every layout covers its tile once."""
    (ar, ac), (br, bc), (cr, cc) = mma_lanes.a_layout(), mma_lanes.b_layout(), mma_lanes.c_layout()
    assert list(zip(ar[5], ac[5])) == [(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)]
    assert list(zip(br[5], bc[5])) == [(2, 1), (3, 1), (10, 1), (11, 1)]
    assert list(zip(cr[5], cc[5])) == [(1, 2), (1, 3), (9, 2), (9, 3)]
    for (rows, cols), n in (((ar, ac), 16), ((br, bc), 8), ((cr, cc), 8)):
        assert len(set(zip(rows.ravel(), cols.ravel()))) == rows.size == 16 * n


@pytest.mark.parametrize("b_layout", ["row", "col"])
def test_ldmatrix_and_mma_make_the_product(b_layout):
    """A 16x16 tile of A and two 16x8 tiles of B loaded by the lanes' ldmatrix addresses (those the
    C code computes) from swizzled shared rows, multiplied lane by lane: A @ B."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((16, 32)).astype(np.float16)  # rows of 64 bytes, two k steps
    b = rng.standard_normal((16, 64)).astype(np.float16)  # (16, 64), or its transpose (64, 16)
    stored_b = b if b_layout == "row" else np.ascontiguousarray(b.T)

    def swizzled(tile):
        flat = np.empty(tile.size, tile.dtype)
        row_bytes = tile.shape[1] * 2
        flat[mma_lanes.swizzle(np.arange(tile.size) * 2, row_bytes) // 2] = tile.ravel()
        return flat, tile.shape[1]

    (sa, lda), (sb, ldb) = swizzled(a[:, 16:]), swizzled(stored_b)
    fa = mma_lanes.ldmatrix_x4(sa, mma_lanes.swizzle(mma.rows_a(0, lda) * 2, lda * 2) // 2).reshape(32, 8)
    fb = mma_lanes.ldmatrix_x4(sb, mma_lanes.swizzle(mma.rows_b(1, ldb, b_layout) * 2, ldb * 2) // 2,
                               trans=b_layout == "row").reshape(32, 8)
    want = a[:, 16:].astype(np.float32) @ b[:, 16:32].astype(np.float32)
    for half in range(2):
        d = mma_lanes.mma_m16n8k16(fa.astype(np.float32), fb[:, 4 * half:4 * half + 4].astype(np.float32),
                                   np.zeros((32, 4), np.float32))
        got = np.empty((16, 8), np.float32)
        got[mma_lanes.c_layout()] = d
        np.testing.assert_allclose(got, want[:, 8 * half:8 * half + 8], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("row_bytes", [32, 64, 128])
def test_swizzled_rows_are_conflict_free(row_bytes):
    """Each phase of an ldmatrix (8 rows of 16 bytes at one column) hits 8 distinct groups of banks,
    and the swizzle permutes the chunks of each line."""
    rows = np.arange(8)[:, None] + 8 * np.arange(4)[None, :]
    for chunk in range(row_bytes // 16):
        addresses = mma_lanes.swizzle(rows * row_bytes + 16 * chunk, row_bytes)
        for phase in addresses.T:
            assert len(set(phase // 16 % 8)) == 8
    span = mma_lanes.alignment(row_bytes)
    moved = mma_lanes.swizzle(np.arange(0, span, 16), row_bytes)
    assert sorted(moved) == list(range(0, span, 16))


CASES = [  # M, N, K, dtype, tiles
    (64, 64, 64, "float16", {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "stages": 3}),
    (128, 256, 64, "bfloat16", {"BM": 128, "BN": 64, "WM": 64, "WN": 32, "stages": 3, "group": 1}),
    (64, 128, 96, "bfloat16", {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "stages": 4}),  # K: 3 tiles
]


@pytest.mark.parametrize("m, n, k, dtype, tiles", CASES)
def test_mma_gemm_on_the_interpreter(m, n, k, dtype, tiles):
    s, args = tensorcore.tensorcore_gemm(m, n, k, dtype, **tiles)
    f = ember.build(s, args, target="python", seed=4)
    rng = np.random.default_rng(9)
    a = rng.standard_normal((m, k)).astype(NUMPY[dtype])
    b = rng.standard_normal((k, n)).astype(NUMPY[dtype])
    out = np.full((m, n), np.nan, np.float32)
    f(a, b, out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_tiles_stored_unswizzled_are_wrong(monkeypatch):
    """The interpreter reads the tiles as ldmatrix does: without the pass that swizzles the copies
    into them, the products are of misplaced chunks."""
    monkeypatch.setattr(cuda_kernel, "swizzle_tiles", lambda func: func)
    m, n, k, dtype, tiles = CASES[0]
    s, args = tensorcore.tensorcore_gemm(m, n, k, dtype, **tiles)
    f = ember.build(s, args, target="python")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
    out = np.zeros((m, n), np.float32)
    f(a, b, out)
    assert np.abs(out - a.astype(np.float32) @ b.astype(np.float32)).max() > 1.0


def test_mma_refuses_padding_and_other_rows():
    with pytest.raises(ScheduleError, match="swizzled shared tiles, whose rows are not padded"):
        tensorcore.tensorcore_gemm(128, 128, 64, pad=8, intrinsic="mma")
    with pytest.raises(ScheduleError, match='"mma" \\(mma.sync\\) or "wmma", not \'tf32\''):
        tensorcore.tensorcore_gemm(128, 128, 64, intrinsic="tf32")
    for bn, wn in ((96, 32), (128, 64)):  # B's rows: 192 and 256 bytes (mma_lanes: 128 at most)
        s, args = tensorcore.tensorcore_gemm(64, bn, 32, BM=64, BN=bn, WM=32, WN=wn, intrinsic="mma")
        with pytest.raises(ScheduleError, match=f"power of two from 16 to 128 bytes, not {2 * bn}"):
            ember.build(s, args, target="python")


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mma_gemm_compiles_for_sm90(dtype):
    s, args = tensorcore.tensorcore_gemm(256, 256, 128, dtype, BN=64, WN=32)  # (B's rows of 128 bytes: mma)
    f = ember.build(s, args, target="cuda", arch="sm_90")
    src, ptx = f.source, {"float16": "f16", "bfloat16": "bf16"}[dtype]
    assert f.block == (32, 4, 1) and f.grid == (8, 1, 1) and 0 < f.registers <= 255
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in src and "ldmatrix.sync.aligned.m8n8.x4.trans" in src
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32" in src and "wmma" not in src.replace(
        "ember_wmma_acc", "").replace("EMBER_WMMA_ACC", "").replace("wmma_accumulator", "")
    # three stages of 128 rows of 32 (A) and of 32 rows of 64 (B), unpadded, aligned for the swizzle
    assert "__shared__ __align__(1024) __half" in src.replace("__nv_bfloat16", "__half") and "A_shared[12288];" in src
    assert "__align__(2048)" not in src and "B_shared[6144];" in src
    assert "cp.async.wait_group 1;" in src and src.count("cp.async.cg.shared.global") == 6  # 2 ahead, 1 in the loop
    loop = src[src.index("for (int k_0"):]
    assert loop[:loop.index("ember_mma_store")].count("__syncthreads();") == 1  # the pipeline's one barrier


@needs_nvrtc
def test_stages_past_static_shared_memory_are_dynamic():
    """4 stages of 256x64x32 (96 KiB) are carved from dynamic shared memory, which the launch asks
    for and a saved kernel keeps; past what a block may opt in to, a ScheduleError."""
    s, args = tensorcore.tensorcore_gemm(256, 256, 128, BM=256, BN=64, WN=32, stages=4)
    f = ember.build(s, args, target="cuda", arch="sm_90")
    assert f.shared == 81920 and f.to_json()["shared"] == 81920
    assert "extern __shared__ __align__(1024) unsigned char ember_dynamic_shared[];" in f.source
    assert "__shared__ __align__" not in f.source.replace("extern __shared__ __align__", "")
    assert "B_shared = reinterpret_cast<__half*>(ember_dynamic_shared + 0);" in f.source
    assert type(f).restore(f.to_json(), f.binary, f.source).shared == 81920
    s, args = tensorcore.tensorcore_gemm(256, 256, 256, BM=256, BN=256, BK=64, WN=128, stages=4)  # 256 KiB
    with pytest.raises(ScheduleError, match="past the limit of 232448 bytes of dynamic shared memory a block may opt "
                                            "in to \\(sm_90\\)"):
        ember.build(s, args, target="cuda", arch="sm_90")


@needs_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mma_gemm_on_the_gpu(dtype):
    s, args = tensorcore.tensorcore_gemm(256, 384, 96, dtype, BN=64, WN=32, stages=4)  # (dynamic shared memory)
    f = ember.build(s, args, target="cuda")
    rng = np.random.default_rng(11)
    a = rng.standard_normal((256, 96)).astype(NUMPY[dtype])
    b = rng.standard_normal((96, 384)).astype(NUMPY[dtype])
    out = np.full((256, 384), np.nan, np.float32)
    f(a, b, out)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-3)

"""Tensor Cores through ldmatrix and mma.sync (ember.intrinsics.mma): PTX's lane layouts as the
interpreter models them (ember.intrinsics.mma_lanes) against the ISA's tables and against a
product, the swizzle's banks at the lanes' addresses, the GEMM schedule on them (swizzled tiles of
rows of 64 to 512 bytes, 1 to 4 cp.async stages) on the interpreter against NumPy, its tiles placed
where a swizzle keyed by the address fails, compiled by NVRTC for sm_90, and on a GPU where there
is one."""

import ctypes

import ml_dtypes
import numpy as np
import pytest
from gpu_kernels import needs_gpu, needs_nvrtc

import ember
from ember.cuda import swizzle, tensorcore
from ember.errors import ScheduleError
from ember.intrinsics import mma, mma_lanes
from ember.runtime.build import build_library

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


ROW_BYTES = [32, 64, 128, 256, 512]


def _ldmatrix_rows(row_bytes: int):
    """(pointer's element offset in its tile, the lanes' rows from it) of every ldmatrix.x4 the warp
    step makes in a tile of 32 rows of `row_bytes`: A's fragments and B's, row-major or given as its
    transpose, at each 16-wide column and each 16th row."""
    ld = row_bytes // 2
    for row in range(0, 32, 16):
        for col in range(0, ld, 16):
            at = row * ld + col
            yield from ((at, rows) for rows in (mma.rows_a(0, ld), mma.rows_b(0, ld, "row"), mma.rows_b(0, ld, "col")))


@pytest.mark.parametrize("row_bytes", ROW_BYTES)
def test_swizzled_rows_are_conflict_free(row_bytes):
    """The banks of every phase of every ldmatrix the warp step makes (8 rows of 16 bytes: lanes
    8q..8q+7), at the addresses the C code computes, and of each quarter-warp's 16-byte copies into
    the tile (8 consecutive chunks): 8 distinct groups of 4 banks, for a tile on a 128-byte line
    and on a 16-byte one; and the swizzle permutes the chunks of each 8 rows (or 1 KiB)."""
    for start in (mma_lanes.TILE_START, 1024 + 48):
        for at, rows in _ldmatrix_rows(row_bytes):
            addresses = mma_lanes.lane_address(start + 2 * at, 2 * at, 2 * rows, row_bytes)
            for phase in addresses.reshape(4, 8):
                assert len(set(phase // 16 % 8)) == 8, (start, at, phase)
        copies = start + mma_lanes.swizzle(16 * np.arange(8 * 32 * row_bytes // 16), row_bytes)
        for quarter in copies.reshape(-1, 8):
            assert len(set(quarter // 16 % 8)) == 8
    span = 8 * max(row_bytes, 128)
    moved = mma_lanes.swizzle(np.arange(0, 4 * span, 16), row_bytes)
    assert sorted(moved) == list(range(0, 4 * span, 16))
    assert all(set(moved[i:i + 8] // 128) == {i // 8} for i in range(0, moved.size, 8))  # (a chunk keeps its line)


def test_the_c_lane_address_is_its_twin():
    """The C code's lanes' addresses (mma.LANE_ADDRESS), compiled for the CPU, are
    mma_lanes.lane_address's, on random pointers, offsets and lanes at each row length."""
    source = ("#include <stdint.h>\n#define __device__\n#define __forceinline__ inline\n#define __clz __builtin_clz\n"
              "#define max(a, b) ((a) > (b) ? (a) : (b))\n" + mma.LANE_ADDRESS +
              "\nvoid lanes(const unsigned* p, const unsigned* at, const unsigned* d, int64_t row_bytes, unsigned* out,"
              " int n) {\n  for (int i = 0; i < n; ++i) out[i] = ember_lane_address(p[i], at[i], d[i], "
              "ember_row_shift(row_bytes));\n}\n")
    lanes = ctypes.CDLL(str(build_library(source))).lanes
    rng = np.random.default_rng(3)
    for row_bytes in ROW_BYTES:
        at = 16 * rng.integers(0, 4096, 256, dtype=np.uint32)
        start = 16 * rng.integers(0, 8192, 256, dtype=np.uint32)
        p, d = start + at, 16 * rng.integers(0, 1024, 256, dtype=np.uint32)
        out = np.empty(256, np.uint32)
        lanes(*(x.ctypes.data_as(ctypes.c_void_p) for x in (p, at, d)), ctypes.c_int64(row_bytes),
              out.ctypes.data_as(ctypes.c_void_p), 256)
        want = mma_lanes.lane_address(p.astype(np.int64), at.astype(np.int64), d.astype(np.int64), row_bytes)
        np.testing.assert_array_equal(out, want)
        assert (out != p + d).any()  # (the swizzle moves chunks)


def _old_lane_address(pointer, at, distance, row_bytes):
    """The swizzle as it was, keyed by the lane's address in shared memory."""
    address = pointer + distance
    return address ^ (((address >> max(7, row_bytes.bit_length() - 1)) & 7) << 4)


CASES = [  # M, N, K, dtype, tiles
    (64, 64, 64, "float16", {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "stages": 3}),
    (128, 256, 64, "bfloat16", {"BM": 128, "BN": 64, "WM": 64, "WN": 32, "stages": 3, "group": 1}),
    (64, 128, 96, "bfloat16", {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "stages": 4}),  # K: 3 tiles
]
LONG_ROWS = {  # rows of A and B of 128, 256 and 512 bytes: M, N, K, tiles
    128: (32, 128, 128, {"BM": 32, "BN": 64, "BK": 64, "WM": 16, "WN": 32, "stages": 2}),
    256: (32, 128, 256, {"BM": 32, "BN": 128, "BK": 128, "WM": 32, "WN": 64, "stages": 2}),
    512: (16, 256, 512, {"BM": 16, "BN": 256, "BK": 256, "WM": 16, "WN": 128, "stages": 1}),  # (136 KiB)
}


def _interpreted_gemm(m, n, k, dtype, tiles, seed=9):
    """The largest error of the GEMM on the interpreter (its tiles at mma_lanes.TILE_START) against NumPy."""
    s, args = tensorcore.tensorcore_gemm(m, n, k, dtype, **tiles)
    f = ember.build(s, args, target="python", seed=4)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(NUMPY[dtype])
    b = rng.standard_normal((k, n)).astype(NUMPY[dtype])
    out = np.full((m, n), np.nan, np.float32)
    f(a, b, out)
    want = a.astype(np.float64) @ b.astype(np.float64)
    return np.abs(out - want).max() / np.abs(want).max()


@pytest.mark.parametrize("m, n, k, dtype, tiles", CASES)
def test_mma_gemm_on_the_interpreter(m, n, k, dtype, tiles):
    assert _interpreted_gemm(m, n, k, dtype, tiles) < 1e-5


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("row_bytes", sorted(LONG_ROWS))
def test_mma_gemm_of_long_rows(row_bytes, dtype):
    """Rows of A and B of 128, 256 and 512 bytes, the tiles 1 KiB + 128 bytes into the shared
    window (mma_lanes.TILE_START), as the interpreter places them: right, as on a GPU wherever a
    block's shared data starts."""
    assert mma_lanes.TILE_START % 1024 and mma_lanes.TILE_START % 16 == 0
    m, n, k, tiles = LONG_ROWS[row_bytes]
    assert _interpreted_gemm(m, n, k, dtype, tiles) < 1e-5


def test_a_swizzle_keyed_by_the_address_is_wrong_off_its_alignment(monkeypatch):
    """The swizzle keyed by the address in shared memory (the C code's before): right where the tile
    starts on a multiple of 8 rows (0 here), wrong 1 KiB + 128 bytes in, where the one keyed by the
    offset in the tile is right (test_mma_gemm_of_long_rows)."""
    monkeypatch.setattr(mma_lanes, "lane_address", _old_lane_address)
    m, n, k, tiles = LONG_ROWS[256]
    assert _interpreted_gemm(m, n, k, "float16", tiles) > 0.1
    monkeypatch.setattr(mma_lanes, "TILE_START", 0)
    assert _interpreted_gemm(m, n, k, "float16", tiles) < 1e-5


def test_tiles_stored_unswizzled_are_wrong(monkeypatch):
    """The interpreter reads the tiles as ldmatrix does: without the pass's swizzled stores into
    them, the products are of misplaced chunks."""
    monkeypatch.setattr(swizzle, "_swizzled", lambda store, *_: store.indices[0])
    m, n, k, dtype, tiles = CASES[0]
    assert _interpreted_gemm(m, n, k, dtype, tiles, seed=1) > 0.1


def test_mma_refuses_padding_and_other_rows():
    with pytest.raises(ScheduleError, match="swizzled shared tiles, whose rows are not padded"):
        tensorcore.tensorcore_gemm(128, 128, 64, pad=8, intrinsic="mma")
    with pytest.raises(ScheduleError, match='"mma" \\(mma.sync\\) or "wmma", not \'tf32\''):
        tensorcore.tensorcore_gemm(128, 128, 64, intrinsic="tf32")
    s, args = tensorcore.tensorcore_gemm(64, 96, 32, BM=64, BN=96, WM=32, WN=32, intrinsic="mma")  # rows of 192 bytes
    with pytest.raises(ScheduleError, match="power of two bytes, 16 or more, not 192"):
        ember.build(s, args, target="python")


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mma_gemm_compiles_for_sm90(dtype):
    """The default 128x128x32 tiles (B's rows of 256 bytes) on mma.sync, each call told where its
    pointers lie in their tiles; and rows of 512 bytes."""
    s, args = tensorcore.tensorcore_gemm(256, 256, 128, dtype)
    f = ember.build(s, args, target="cuda", arch="sm_90")
    src, ptx = f.source, {"float16": "f16", "bfloat16": "bf16"}[dtype]
    assert f.block == (32, 4, 1) and f.grid == (4, 1, 1) and 0 < f.registers <= 255
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in src and "ldmatrix.sync.aligned.m8n8.x4.trans" in src
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32" in src and "wmma" not in src.replace(
        "ember_wmma_acc", "").replace("EMBER_WMMA_ACC", "").replace("wmma_accumulator", "")
    # three stages of 128 rows of 32 (A) and of 32 rows of 128 (B), unpadded, on 128-byte lines: 48 KiB, static
    assert "__shared__ __align__(128) __half" in src.replace("__nv_bfloat16", "__half") and "A_shared[12288];" in src
    assert "B_shared[12288];" in src and f.shared == 0
    call = src[src.index(f"ember_mma_warp_64x64x16_{ptx}_f32((const void*)"):]
    call = call[:call.index(";")]
    # lda, ldb, then the pointers' offsets within the swizzle's period (1 KiB of A's 64-byte rows, 2 KiB of
    # B's 256-byte rows: 512 and 1024 halves): the stage (k_0 % 3 * 4096) and A's warp row drop out
    assert call.endswith(", 32, 128, 0, ax0_1_0_ax1_1_0_fused % 2 * 64)")
    assert "cp.async.wait_group 1;" in src and src.count("cp.async.cg.shared.global") == 6  # 2 ahead, 1 in the loop
    loop = src[src.index("for (int k_0"):]
    assert loop[:loop.index("ember_mma_store")].count("__syncthreads();") == 1  # the pipeline's one barrier
    s, args = tensorcore.tensorcore_gemm(64, 512, 512, dtype, BM=64, BN=256, BK=256, WM=32, WN=128, stages=1)
    assert 0 < ember.build(s, args, target="cuda", arch="sm_90").registers <= 255  # (rows of 512 bytes)


@needs_nvrtc
def test_stages_past_static_shared_memory_are_dynamic():
    """3 stages of 128x256x32 (72 KiB; B's rows of 512 bytes) are carved from dynamic shared memory,
    which the launch asks for and a saved kernel keeps; past what a block may opt in to, a
    ScheduleError."""
    s, args = tensorcore.tensorcore_gemm(256, 256, 128, BN=256)
    f = ember.build(s, args, target="cuda", arch="sm_90")
    assert f.shared == 73728 and f.to_json()["shared"] == 73728 and f.block == (32, 8, 1)
    assert "extern __shared__ __align__(128) unsigned char ember_dynamic_shared[];" in f.source
    assert "__shared__ __align__" not in f.source.replace("extern __shared__ __align__", "")
    assert "B_shared = reinterpret_cast<__half*>(ember_dynamic_shared + 0);" in f.source
    assert type(f).restore(f.to_json(), f.binary, f.source).shared == 73728
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


@needs_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("tiles", [{}, {"BM": 64, "BN": 256, "WM": 32, "WN": 128}], ids=["256B", "512B"])
def test_mma_gemm_of_long_rows_on_the_gpu(dtype, tiles):
    """B's rows of 256 bytes (the default 128x128x32 tiles) and of 512, their tiles wherever the
    block's shared data starts: against torch on the GPU."""
    import torch

    s, args = tensorcore.tensorcore_gemm(256, 512, 96, dtype, **tiles)
    f = ember.build(s, args, target="cuda")
    assert "mma.sync.aligned.m16n8k16" in f.source
    torch.manual_seed(0)
    a = torch.randn(256, 96, device="cuda").to(getattr(torch, dtype))
    b = torch.randn(96, 512, device="cuda").to(getattr(torch, dtype))
    out = torch.full((256, 512), float("nan"), device="cuda")
    f(a, b, out)
    torch.testing.assert_close(out, a.float() @ b.float(), rtol=1e-3, atol=1e-3)  # (fp32 products: TF32 off)

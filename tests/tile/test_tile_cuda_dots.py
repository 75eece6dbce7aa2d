"""tl.dot in and after a K loop of a kernel of its own, compiled for target "cuda" and interpreted
with GPU semantics (tile_cuda.py): on CUDA cores or the Tensor Cores, wmma beside mma.sync, the
loop's copies issued num_stages - 1 iterations ahead, none where the loop stores."""

import numpy as np
import pytest
from tile_cuda import needs_nvrtc

import ember.triton as triton
import ember.triton.language as tl
from ember.errors import TileError


@triton.jit
def dot_loop(a_ptr, b_ptr, c_ptr, K, M: tl.constexpr, N: tl.constexpr, BK: tl.constexpr,
             PRECISION: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, BK)
    acc = tl.zeros((M, N), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b, input_precision=PRECISION)  # (the tutorial's is `acc = tl.dot(a, b, acc)`)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    acc = tl.dot(a, b, acc, input_precision=PRECISION)  # outside the loop: its tiles from shared memory
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@needs_nvrtc
def test_mma_sync_beside_wmma(rng, on_cuda, monkeypatch):
    """EMBER_TILE_MMA=1 where one dot qualifies: the loop's (from tl.zeros) on mma.sync, the one
    after it, whose fragments are loaded from the block the first stored, on wmma."""
    monkeypatch.setenv("EMBER_TILE_MMA", "1")
    a, b = rng.standard_normal((16, 48)).astype(np.float16), rng.standard_normal((48, 16)).astype(np.float16)
    c = np.empty((16, 16), np.float32)
    dot_loop[(1,)](a, b, c, 48, M=16, N=16, BK=16, PRECISION="tf32", num_warps=1)
    a, b = a.astype(np.float64), b.astype(np.float64)
    want = a @ b + a[:, :16] @ b[:16]
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    (source,) = on_cuda
    assert source.count("ember_mma_warp_16x16x16_f16_f32(") == source.count("ember_mma_store(") == 1 + 1
    assert source.count("ember_wmma_warp_mma_16x16x16_f16_f32(") == source.count("ember_wmma_load(") == 1 + 1
    # K = 48: the specialization's multiple of 16 (Triton's divisibility), which the compiler may assume
    assert "__builtin_assume((K_value & 15) == 0);" in source


@needs_nvrtc
@pytest.mark.parametrize("dtype,precision", [("float32", "ieee"), ("float16", "tf32")])
def test_dot_in_and_after_a_loop(rng, on_cuda, dtype, precision, monkeypatch):
    """float32 as "ieee" on CUDA cores; float16 on the Tensor Cores, the loop's `acc +=` folded
    into its dot and the accumulator in fragments across the loop, the dot after it loading its
    tile from shared memory into fragments and storing it back, in one unit."""
    monkeypatch.setenv("EMBER_TILE_MMA", "0")  # (wmma: the fallback where a GPU finds mma.sync wrong)
    a, b = rng.standard_normal((16, 32)).astype(dtype), rng.standard_normal((32, 16)).astype(dtype)
    c = np.empty((16, 16), np.float32)
    dot_loop[(1,)](a, b, c, 32, M=16, N=16, BK=16, PRECISION=precision, num_warps=1)
    a, b = a.astype(np.float64), b.astype(np.float64)
    want = a @ b + a[:, :16] @ b[:16]
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    (source,) = on_cuda
    if dtype == "float32":
        assert "wmma" not in source
    else:  # each dot's fragments stored once, after the loop and after the last dot; the loop's start at
        # zero (acc's tl.zeros), the last dot's are loaded from shared memory
        assert source.count("ember_wmma_warp_mma_16x16x16_f16_f32(") == 2 + 1
        assert source.count("ember_wmma_store(") == 2 + 1
        assert source.count("ember_wmma_load(") == source.count("ember_wmma_zero(") == 1 + 1


@needs_nvrtc
@pytest.mark.parametrize("k,stages", [(16, 4), (80, 2)])
def test_num_stages_copies_ahead(rng, on_cuda, k, stages):
    """The loop's operand copies issued stages - 1 iterations ahead by cp.async into as many stages
    of each tile: more stages than iterations (one), or two stages over five; what the interpreter
    lands at each wait is what the dots read."""
    a, b = rng.standard_normal((16, k)).astype(np.float16), rng.standard_normal((k, 16)).astype(np.float16)
    c = np.empty((16, 16), np.float32)
    dot_loop[(1,)](a, b, c, k, M=16, N=16, BK=16, PRECISION="tf32", num_warps=1, num_stages=stages)
    a, b = a.astype(np.float64), b.astype(np.float64)
    want = a @ b + a[:, :16] @ b[:16]
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    (source,) = on_cuda
    assert f"cp.async.wait_group {stages - 2};" in source
    assert source.count("cp.async.commit_group") == stages  # (stages - 1 before the loop, one in it)


@triton.jit
def dot_loop_storing(a_ptr, b_ptr, c_ptr, K, BK: tl.constexpr):
    r, rk = tl.arange(0, 16), tl.arange(0, BK)
    acc = tl.zeros((16, 16), dtype=tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(tl.load(a_ptr + r[:, None] * K + (k + rk)[None, :]), tl.load(b_ptr + (k + rk)[:, None] * 16 + r),
                     acc)
        tl.store(c_ptr + r[:, None] * 16 + r, acc)  # (each step's sum: a loop that stores)


@needs_nvrtc
def test_a_loop_that_stores_is_not_pipelined(rng, on_cuda):
    """A copy issued iterations ahead would be read before the loop's stores: no cp.async there."""
    a, b = rng.standard_normal((16, 48)).astype(np.float16), rng.standard_normal((48, 16)).astype(np.float16)
    c = np.empty((16, 16), np.float32)
    dot_loop_storing[(1,)](a, b, c, 48, BK=16, num_warps=1)
    want = a.astype(np.float64) @ b
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert "cp.async" not in on_cuda[0]


def test_dot_precision_is_one_of_tritons(rng):
    a, c = np.ones((16, 16), np.float32), np.empty((16, 16), np.float32)
    with pytest.raises(TileError, match="input_precision 'tf16' is not one of tf32, tf32x3, ieee"):
        dot_loop[(1,)](a, a, c, 16, M=16, N=16, BK=16, PRECISION="tf16", target="cuda")

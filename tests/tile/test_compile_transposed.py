"""A block whose memory is contiguous along its first dimension (`k` of `tl.dot(q, k)` loaded
from a row-major K as (D, N)) is read by square register tiles transposed in shuffles: the
values are those of the interpreter and NumPy, full tiles and masked edges alike."""

import numpy as np
import pytest
from tile_modes import HAS_COMPILER, MODES, launch_mode

import ember.triton as triton
import ember.triton.language as tl

rng = np.random.default_rng()


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@triton.jit
def qk_kernel(q_ptr, k_ptr, out_ptr, kt_ptr, M, N, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + rm[:, None] * D + rd[None, :], mask=rm[:, None] < M, other=0.0)
    k = tl.load(k_ptr + rn[None, :] * D + rd[:, None], mask=rn[None, :] < N, other=0.0)  # K^T: (D, BN)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tl.dot(q, k), mask=(rm[:, None] < M) & (rn[None, :] < N))
    tl.store(kt_ptr + rd[:, None] * N + rn[None, :], tl.sum(k[None, :, :], axis=0), mask=rn[None, :] < N)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("M,N", [(64, 128), (50, 77)])
def test_transposed_operand(mode, dtype, M, N):
    D = 64
    q, k = (rng.standard_normal((n, D)).astype(dtype) for n in (M, N))
    out, kt = np.zeros((M, N), np.float32), np.zeros((D, N), dtype)
    with launch_mode(mode):
        qk_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 64))](q, k, out, kt, M, N, D=D, BM=32, BN=64)
    np.testing.assert_array_equal(kt, k.T)
    want = q.astype(np.float64) @ k.astype(np.float64).T
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.skipif(not HAS_COMPILER, reason="ember.triton.compiler is not in this tree")
def test_transposed_read_is_register_tiles():
    q, k = np.ones((64, 64), np.float32), np.ones((64, 64), np.float32)
    out, kt = np.zeros((64, 64), np.float32), np.zeros((64, 64), np.float32)
    c = qk_kernel.source(q, k, out, kt, 64, 64, D=64, BM=32, BN=64)
    assert "in registers" in c and "ember_column_" in c

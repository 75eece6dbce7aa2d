"""Flash attention's register steps on mma.sync's lanes (ember.intrinsics.mma_attention), their
NumPy twins against plain row-wise NumPy: the C tiles of two adjacent 16x8 halves are, register
for register, the A fragment of the 16x16 slice (what lets p stay in registers); two online softmax
steps (a row's max reduced across its 4 lanes) give each row's running max and sum, p and the
rescaled output; q's fragments loaded to registers and the scores and p v products match q k^T
and p v. The kernels made of them: tests/cuda/test_flash_attention.py."""

import struct

import numpy as np
import pytest

from ember.intrinsics import mma_attention as ma
from ember.intrinsics import mma_lanes
from ember.tir import dtype as dt

RNG = np.random.default_rng()


def to_lanes(m: np.ndarray) -> np.ndarray:
    """A (16, n) fp32 matrix as a register buffer's flat floats (tile j at 256 j + 8 lane)."""
    rows, cols = mma_lanes.c_layout()
    tiles = np.empty((m.shape[1] // 16, 32, 8), np.float32)
    for j in range(len(tiles)):
        for h in range(2):
            tiles[j, :, 4 * h:4 * h + 4] = m[rows, 16 * j + 8 * h + cols]
    return tiles.reshape(-1)


def from_lanes(flat: np.ndarray, n: int) -> np.ndarray:
    rows, cols = mma_lanes.c_layout()
    tiles, m = flat[:16 * n].reshape(n // 16, 32, 8), np.empty((16, n), np.float32)
    for j in range(len(tiles)):
        for h in range(2):
            m[rows, 16 * j + 8 * h + cols] = tiles[j, :, 4 * h:4 * h + 4]
    return m


def test_two_c_halves_are_the_a_fragment_of_their_slice():
    c = RNG.standard_normal((32, 8)).astype(np.float32)
    np.testing.assert_array_equal(ma.as_a_fragment(c), c)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_load_q_scores_softmax_pv_and_store_against_numpy(dtype):
    """One warp's loop over two tiles of 32 keys (the second past the 50 keys' end, causal from
    query 20), then its 16 rows stored from row 3 of a 30-row output (rows past 12 left alone)."""
    e, ev, bn, ld, keys, row0, scale = 32, 16, 32, 40, 50, 20, 0.3
    half = dt.to_numpy(dtype)
    q, k, v = (RNG.standard_normal(shape).astype(half) for shape in ((16, e), (2 * bn, e), (2 * bn, ev)))
    padded = lambda x: np.pad(x, ((0, 0), (0, ld - x.shape[1]))).reshape(-1)  # noqa: E731  (rows of ld)
    qf, s, o, state = (np.full(16 * n, np.nan, np.float32) for n in (ma.q_columns(e), bn, ev, 16))
    bits = struct.unpack("<i", struct.pack("<f", scale))[0]
    ma.load_q(e).emulate("body", [(padded(q), 0)], [(qf, 0)], [ld], [])
    ma.init(ev).emulate("body", [], [(state, 0), (o, 0)], [], [])
    for t in range(2):
        ma.scores(dtype, e, bn).emulate("body", [(padded(k[t * bn:(t + 1) * bn]), 0), (qf, 0)], [(s, 0)], [ld], [])
        np.testing.assert_allclose(from_lanes(s, bn), q.astype(np.float32) @ k[t * bn:(t + 1) * bn].astype(
            np.float32).T, rtol=1e-5, atol=1e-4)
        ma.softmax(dtype, bn, ev, True, None).emulate("body", [], [(s, 0), (state, 0), (o, 0)],
                                                       [bits, row0, t * bn, 64, keys, 1], [])
        ma.pv(dtype, bn, ev).emulate("body", [(padded(v[t * bn:(t + 1) * bn]), 0), (s, 0)], [(o, 0)], [ld], [])
    x = q.astype(np.float64) @ k.astype(np.float64).T * scale
    x[(np.arange(2 * bn) >= keys) | (np.arange(2 * bn) > row0 + np.arange(16)[:, None])] = -np.inf
    lanes_m = state.reshape(32, 8)[::4, :2].T.reshape(-1)  # rows g, then g + 8, of each group's first lane
    np.testing.assert_allclose(lanes_m, x.max(axis=1) * np.log2(np.e), rtol=1e-5)
    p = np.exp(x - x.max(axis=1, keepdims=True))
    out = np.full((30 * ev,), np.nan, half)
    ma.store(dtype, ev).emulate("body", [(state, 0), (o, 0)], [(out, 3 * ev)], [ev, 12], [])
    want = p @ v.astype(np.float64) / p.sum(axis=1, keepdims=True)
    got = out.reshape(30, ev).astype(np.float32)
    tol = {"float16": 2e-3, "bfloat16": 1.6e-2}[dtype]
    assert np.linalg.norm(got[3:15] - want[:12]) <= tol * np.linalg.norm(want[:12])
    assert np.isnan(got[:3]).all() and np.isnan(got[15:]).all()

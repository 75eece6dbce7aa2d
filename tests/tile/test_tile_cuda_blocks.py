"""A block's threads together, compiled for target "cuda" and interpreted with GPU semantics
(tile_cuda.py): reductions, arg reductions and scans across threads, a block read at other
threads' elements kept in shared memory, tl.debug_barrier as the block's barrier."""

import numpy as np
from tile_cuda import needs_nvrtc

import ember.triton as triton
import ember.triton.language as tl


@triton.jit
def rows_kernel(x_ptr, out_ptr, arg_ptr, cum_ptr, R: tl.constexpr, C: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    tl.store(out_ptr + tl.arange(0, C), tl.sum(x, axis=0))  # across rows: a thread per column
    tl.store(arg_ptr + tl.arange(0, R), tl.argmax(x, axis=1))
    tl.store(cum_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :], tl.cumsum(x, axis=1))
    tl.store(out_ptr + C, tl.max(tl.max(x, axis=1), axis=0))  # to a scalar: partials, then a fold


@needs_nvrtc
def test_reductions_arg_reductions_and_scans(rng, on_cuda):
    x = rng.standard_normal((8, 64), dtype=np.float32)
    out, arg, cum = np.zeros(65, np.float32), np.zeros(8, np.int32), np.zeros((8, 64), np.float32)
    rows_kernel[(1,)](x, out, arg, cum, R=8, C=64, num_warps=1)
    np.testing.assert_allclose(out[:64], x.sum(0), rtol=1e-5, atol=1e-5)
    assert out[64] == x.max()
    np.testing.assert_array_equal(arg, x.argmax(1))
    np.testing.assert_allclose(cum, np.cumsum(x, 1), rtol=1e-5, atol=1e-5)


@triton.jit
def other_elements(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs) * 2  # read back at its own elements and at others (the transpose, a row)
    tl.store(out_ptr + offs, x + tl.trans(x) + tl.sum(x, axis=0)[None, :])


@needs_nvrtc
def test_blocks_read_at_other_elements_stay_shared(rng, on_cuda):
    x = rng.standard_normal((32, 32), dtype=np.float32)
    out = np.empty_like(x)
    other_elements[(1,)](x, out, N=32, num_warps=2)
    np.testing.assert_allclose(out, 2 * (x + x.T + x.sum(0)), rtol=1e-5, atol=1e-5)
    assert "__syncthreads" in on_cuda[0]  # 2x is shared: other threads read it


@triton.jit
def reverse_through_memory(x_ptr, tmp_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(tmp_ptr + offs, tl.load(x_ptr + offs) * 2)
    tl.debug_barrier()  # the other threads' stores are seen after it
    tl.store(out_ptr + offs, tl.load(tmp_ptr + BLOCK - 1 - offs))


@needs_nvrtc
def test_debug_barrier_is_a_block_barrier(rng, on_cuda):
    x = rng.standard_normal(256, dtype=np.float32)
    tmp, out = np.zeros(256, np.float32), np.zeros(256, np.float32)
    reverse_through_memory[(1,)](x, tmp, out, BLOCK=256, num_warps=2)
    np.testing.assert_array_equal(out, 2 * x[::-1])
    assert on_cuda[0].count("__syncthreads()") == 1  # its own, and none besides (no shared block is reused)

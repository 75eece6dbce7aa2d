"""ember.triton's tutorials of examples/triton other than the matmul (tests/tile/test_tile_cuda_matmul.py)
compiled for target "cuda" and interpreted with GPU semantics (tile_cuda.py): vector add, fused
softmax, layer norm forward and backward, fused attention."""

import numpy as np
import pytest
from layer_norm_check import assert_layer_norm_as_torch
from tile_cuda import needs_nvrtc


@needs_nvrtc
@pytest.mark.parametrize("block", [256, 1024])
def test_vector_add(tutorials, rng, on_cuda, block):
    """Each thread's elements of x and y in its registers, from global memory to the sum: no
    shared block. Where the block is a whole number of chunks of 4 a thread (1024 on 128 threads),
    a chunk whose masks all hold is read and written 16 bytes at a time (the last of 1000 is not)."""
    x, y = rng.standard_normal(1000, dtype=np.float32), rng.standard_normal(1000, dtype=np.float32)
    out = tutorials["01_vector_add"].add(x, y, block_size=block)
    np.testing.assert_array_equal(out, x + y)
    (source,) = on_cuda
    assert "__launch_bounds__(128)" in source and "blockIdx.x" in source and "threadIdx.x" in source
    assert "dynamic shared memory 0 bytes" in source and "__syncthreads" not in source
    vectors = ("*reinterpret_cast<const float4*>(&x_ptr[", "*reinterpret_cast<float4*>(&output_ptr[")
    assert all((v in source) == (block == 1024) for v in vectors)


@needs_nvrtc
def test_fused_softmax(tutorials, rng, on_cuda):
    x = (3 * rng.standard_normal((5, 300))).astype(np.float32)  # a row of 300 in a block of 512
    y = tutorials["02_fused_softmax"].softmax(x)
    np.testing.assert_allclose(y, tutorials["02_fused_softmax"].reference(x), rtol=1e-5, atol=1e-7)
    assert on_cuda[0].count("__shfl_xor_sync") == 2 * 5  # each warp's share of the max and of the sum
    # the row and its exponentials in each thread's registers; in shared memory only the partials
    assert on_cuda[0].count("reinterpret_cast<float*>(ember_shared + ") == 2
    # a thread's 4 consecutive elements of the row read and written 16 bytes at a time where the row's start
    # (row * 300) is a multiple of 4 and the 4 are inside the row
    assert "*reinterpret_cast<const float4*>(&input_ptr[" in on_cuda[0]
    assert "*reinterpret_cast<float4*>(&output_ptr[" in on_cuda[0]


@needs_nvrtc
def test_layer_norm_forward_and_backward(tutorials, rng, on_cuda):
    ln = tutorials["04_layer_norm"]
    M, N = 9, 40
    x = rng.standard_normal((M, N), dtype=np.float32)
    w, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    dy = rng.standard_normal((M, N), dtype=np.float32)
    y, mean, rstd = ln.layer_norm_forward(x, w, b, block_size=32)
    dx, dw, db = ln.layer_norm_backward(dy, x, w, mean, rstd, group_size_m=4)
    assert_layer_norm_as_torch(x, w, b, dy, y, dx, dw, db)
    assert any("ember_fenced((__threadfence(), atomicCAS(" in s for s in on_cuda)  # the lock, acquire-release


@needs_nvrtc
@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention(tutorials, rng, on_cuda, causal):
    q, k, v = (rng.standard_normal((1, 2, 21, 16)).astype("float16") for _ in range(3))
    o = tutorials["05_fused_attention"].attention(q, k, v, causal, block_m=16, block_n=16)
    want = tutorials["05_fused_attention"].reference(q, k, v, causal)
    np.testing.assert_allclose(o.astype("float64"), want, rtol=5e-3, atol=5e-3)

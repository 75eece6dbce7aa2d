"""ember.triton on GPU arrays: where the arguments live chooses the target, or refuses the launch
before it runs; with a GPU, the tutorials of examples/triton on torch CUDA tensors."""

import numpy as np
import pytest
import torch
from tile_cuda import needs_nvrtc, tf32

import ember.triton as triton
import ember.triton.language as tl
from ember.errors import ArgumentTypeError

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here: the launches on CUDA tensors "
                                                                     "run where a GPU is lent")


@triton.jit
def scale(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * factor, mask=offs < n)


class FakeGPUArray:
    """A GPU array as __cuda_array_interface__ describes it (never dereferenced here)."""

    def __init__(self, n: int, device: int = 0):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (0x10000, False), "version": 3}
        self.device = type("Device", (), {"id": device})()


@needs_nvrtc
def test_host_arrays_and_a_second_gpu_are_refused_before_any_launch():
    x, out = np.ones(10, np.float32), np.empty(10, np.float32)
    with pytest.raises(ArgumentTypeError, match="argument 'x_ptr' is in host memory.*move it with .cuda"):
        scale[(1,)](x, out, 10, 2.0, BLOCK=16, target="cuda")
    with pytest.raises(ArgumentTypeError, match="argument 'out_ptr' is on cuda:1, the tensors before it on cuda:0"):
        scale[(1,)](FakeGPUArray(10), FakeGPUArray(10, device=1), 10, 2.0, BLOCK=16)  # the target follows them
    with pytest.raises(ArgumentTypeError, match="argument 'x_ptr' is in a GPU's memory.*target='cuda'"):
        scale[(1,)](FakeGPUArray(10), out, 10, 2.0, BLOCK=16, target="c")


def test_gpu_arguments_choose_the_cuda_target():
    assert scale.launch_target({}, [FakeGPUArray(4), 3]).kind == "cuda"
    assert scale.launch_target({}, [np.ones(4), 3]).kind == "c"
    assert scale.launch_target({"target": "c"}, [FakeGPUArray(4)]).kind == "c"


@pytest.fixture(scope="module")
def gpu():
    return torch.Generator(device="cuda").manual_seed(0) if torch.cuda.is_available() else None


@needs_gpu
def test_on_the_gpu_vector_add_and_softmax(tutorials, gpu):
    x, y = (torch.randn(5003, device="cuda", generator=gpu) for _ in range(2))
    out = torch.empty_like(x)
    tutorials["01_vector_add"].add_kernel[(triton.cdiv(5003, 1024),)](x, y, out, 5003, BLOCK_SIZE=1024)
    np.testing.assert_array_equal(out.cpu().numpy(), x.cpu().numpy() + y.cpu().numpy())
    for cols in (781, 784):  # rows whose starts are 16-byte aligned or not: float4 or lane by lane
        s = 3 * torch.randn(37, cols, device="cuda", generator=gpu)
        o = torch.empty_like(s)
        tutorials["02_fused_softmax"].softmax_kernel[(37,)](o, s, s.stride(0), o.stride(0), cols, BLOCK_SIZE=1024)
        want = tutorials["02_fused_softmax"].reference(s.cpu().numpy())
        np.testing.assert_allclose(o.cpu().numpy(), want, rtol=1e-5, atol=1e-7)


@needs_gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float16, 2e-3), (torch.float32, 1e-4)])
def test_on_the_gpu_matmul_autotuned(tutorials, gpu, dtype, tol):
    M, N, K = 300, 260, 200
    a = torch.randn(M, K, device="cuda", generator=gpu).to(dtype)
    b = torch.randn(K, N, device="cuda", generator=gpu).to(dtype)
    c = torch.empty(M, N, device="cuda", dtype=dtype)
    mm = tutorials["03_matmul"]
    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)  # noqa: E731
    mm.matmul_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), ACTIVATION="")
    a, b = a.cpu().numpy(), b.cpu().numpy()
    want = mm.reference(*((tf32(a), tf32(b)) if dtype == torch.float32 else (a, b)))  # TF32: Triton's default
    np.testing.assert_allclose(c.float().cpu().numpy(), want, rtol=tol, atol=tol * 10)


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("block_n, warps", [(64, 4), (128, 8)])  # (B's rows of 128 and 256 bytes)
def test_on_the_gpu_matmul_on_mma_sync(tutorials, gpu, monkeypatch, dtype, block_n, warps):
    """EMBER_TILE_MMA=1: the tutorial's dot on ldmatrix and mma.sync from swizzled tiles, masks at
    every edge, against the same product in float64."""
    monkeypatch.setenv("EMBER_TILE_MMA", "1")
    M, N, K = 300, 260, 200
    a = torch.randn(M, K, device="cuda", generator=gpu).to(dtype)
    b = torch.randn(K, N, device="cuda", generator=gpu).to(dtype)
    c = torch.empty(M, N, device="cuda", dtype=dtype)
    compiled = tutorials["03_matmul"].matmul_kernel.base_fn[(triton.cdiv(M, 128) * triton.cdiv(N, block_n),)](
        a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BLOCK_SIZE_M=128, BLOCK_SIZE_N=block_n,
        BLOCK_SIZE_K=32, GROUP_SIZE_M=8, ACTIVATION="", num_warps=warps, num_stages=3)
    assert "mma.sync.aligned.m16n8k16" in compiled.source
    want = a.double() @ b.double()
    tol = 2.0 ** -8 if dtype == torch.float16 else 2.0 ** -6
    torch.testing.assert_close(c.double(), want, rtol=tol, atol=tol * want.abs().max().item())


@needs_gpu
def test_on_the_gpu_layer_norm_and_attention(tutorials, gpu):
    M, N = 203, 77
    x = torch.randn(M, N, device="cuda", generator=gpu)
    w, b = torch.randn(N, device="cuda", generator=gpu), torch.randn(N, device="cuda", generator=gpu)
    y, mean, rstd = torch.empty_like(x), torch.empty(M, device="cuda"), torch.empty(M, device="cuda")
    tutorials["04_layer_norm"]._layer_norm_fwd_fused[(M,)](x, y, w, b, mean, rstd, x.stride(0), N, 1e-5,
                                                           BLOCK_SIZE=128)
    want = torch.nn.functional.layer_norm(x.double(), (N,), w.double(), b.double(), eps=1e-5)
    np.testing.assert_allclose(y.cpu().numpy(), want.cpu().numpy(), rtol=1e-4, atol=1e-4)
    q, k, v = (torch.randn(2, 2, 75, 32, device="cuda", generator=gpu).half() for _ in range(3))
    o = torch.empty_like(q)
    tutorials["05_fused_attention"]._attn_fwd[(triton.cdiv(75, 32), 4)](
        q, k, v, o, 32 ** -0.5, *q.stride(), *k.stride(), *v.stride(), *o.stride(), 2, 75, HEAD_DIM=32, BLOCK_M=32,
        BLOCK_N=16, CAUSAL=True)
    want = tutorials["05_fused_attention"].reference(q.cpu().numpy(), k.cpu().numpy(), v.cpu().numpy(), True)
    np.testing.assert_allclose(o.double().cpu().numpy(), want, rtol=5e-3, atol=5e-3)

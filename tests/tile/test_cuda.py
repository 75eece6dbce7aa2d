"""ember.triton on the GPU: the tutorials of examples/triton compiled for target "cuda".

Without a GPU each launch is compiled as on one (the GPU's Emitter, CUDA C, NVRTC to an sm_90
cubin) and its loop IR (programs bound to blocks, block statements to threads, with its scopes
and barriers) is run by the interpreter with GPU semantics (ember.cuda.simt: blocks and threads
in a shuffled order, a race or a barrier not every thread reaches is an error). With a GPU the
same tutorials run on torch CUDA tensors."""

import importlib
import importlib.util

import numpy as np
import pytest
import torch

import ember.triton as triton
import ember.triton.language as tl
from ember.codegen.python import load_python
from ember.cuda.codegen import SYNC, launch_dims
from ember.cuda.kernel import prepare
from ember.cuda.simt import SimtRenderer, run_grid
from ember.errors import ArgumentTypeError, TileError
from ember.target import GPU, Target, as_target
from ember.tir.expr import as_int
from ember.tir.functor import stmt_children
from ember.tir.lower import lower
from ember.tir.stmt import Evaluate, For, IfThenElse
from ember.triton import compiler
from ember.triton.args import TensorArg

L = importlib.import_module("ember.triton.compiler.launch")
CUDA = as_target("cuda")
HAS_NVRTC = importlib.util.find_spec("cuda.bindings") is not None
needs_nvrtc = pytest.mark.skipif(not HAS_NVRTC, reason="NVRTC (cuda-bindings) is not installed")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here: the launches on CUDA tensors "
                                                                     "run where a GPU is lent")




def interpret_cuda(jit_fn, grid, bound, options, target):
    """A launch compiled for the GPU (NVRTC included) whose loop IR runs on the interpreter with
    GPU semantics, the grid's blocks as the launch gives them."""
    launch, sources, target = interpret_cuda.launch, interpret_cuda.sources, interpret_cuda.target
    compiled, runtime = L.prepare(jit_fn, bound, options, target)
    assert b"ELF" in compiled.cfunc.binary[:4] and compiled.cfunc.arch == target.gpu.arch  # (sm_90 without a GPU)
    sources.append(compiled.source)
    debug = L.debug_mode(jit_fn, options)
    spec, _ = L.specialize(jit_fn, bound, debug, target, options.get("num_warps") or 4,
                           options.get("num_stages") or 3)
    func, _, _ = L.build_func(jit_fn, spec, debug, target)
    lowered = prepare(lower(func, skip=("hoist_init", "compact_buffers"), passes=target.backend.loop_passes))
    check_barriers(lowered)
    dims = {**launch_dims(lowered), "blockIdx.x": grid[0] * grid[1] * grid[2]}
    thread = load_python(SimtRenderer(lowered, dims).render(), lowered)
    arrays, spans = [], []
    for _, v in runtime:
        if isinstance(v, TensorArg):
            assert v.span[0] == 0
            arrays.append(v.flat())
            spans += v.span
    scalar_dtypes = iter(compiled.scalar_dtypes)
    arrays += [np.array([v], dtype=next(scalar_dtypes)) for _, v in runtime if not isinstance(v, TensorArg)]
    meta = np.array(spans or [0], dtype=np.int64)
    status = np.zeros(1, dtype=np.int64)
    run_grid(thread, lowered.name, [*arrays, meta, status, *grid], dims, seed=len(launch))
    assert status[0] == 0
    launch.append(grid)
    return compiled


def check_barriers(func) -> None:
    """Every barrier is reached by every thread of the block: none in a thread loop shorter than
    the block's dimension, nor under a branch inside a thread loop."""
    dims = launch_dims(func)

    def walk(s, threads: bool, divergent: bool):
        if isinstance(s, Evaluate) and getattr(s.value, "name", None) == SYNC:
            assert not divergent, f"a barrier not every thread reaches in {func.name}"
            found.append(s)
        if isinstance(s, For) and (s.thread_tag or "").startswith("threadIdx"):
            threads, divergent = True, divergent or as_int(s.extent) < dims[s.thread_tag]
        if isinstance(s, IfThenElse) and threads:
            divergent = True
        for c in stmt_children(s):
            walk(c, threads, divergent)

    found: list = []
    walk(func.body, False, False)


@pytest.fixture
def on_cuda(monkeypatch):
    """Launches compiled for "cuda" (interpret_cuda.target: the default GPU's unless a test names
    another) and interpreted; the CUDA C of each in the returned list."""
    interpret_cuda.launch, interpret_cuda.sources, interpret_cuda.target = [], [], CUDA
    monkeypatch.setattr(compiler, "launch", interpret_cuda)
    monkeypatch.delenv("EMBER_INTERPRET", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    return interpret_cuda.sources


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


def tf32(x: np.ndarray) -> np.ndarray:
    """float32 rounded to TF32 as the Tensor Cores take it (cvt.rna: to nearest, ties away from 0)."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = ((bits & 0x7FFFFFFF) + 0x1000) & 0xFFFFE000
    return (rounded | (bits & 0x80000000)).view(np.float32)


def operands(rng, dtype, shape):
    if dtype == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
    return rng.standard_normal(shape).astype(dtype)


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
    grid = (triton.cdiv(M, 32) * triton.cdiv(N, 32),)
    tutorials["03_matmul"].matmul_kernel.base_fn[grid](
        a, b, c, M, N, K, K, 1, N, 1, N, 1, BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=16, GROUP_SIZE_M=2,
        ACTIVATION="", num_warps=2)  # two of the four 16x16 tiles a warp
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
    tutorials["03_matmul"].matmul_kernel.base_fn[(triton.cdiv(M, 32) * triton.cdiv(N, 32),)](
        a, b, c, M, N, K, K, 1, N, 1, N, 1, BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=16, GROUP_SIZE_M=2,
        ACTIVATION="", num_warps=2)
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
    tutorials["03_matmul"].matmul_kernel.base_fn[(triton.cdiv(M, 64) * triton.cdiv(N, 64),)](
        a, b, c, M, N, K, K, 1, N, 1, N, 1, BLOCK_SIZE_M=64, BLOCK_SIZE_N=64, BLOCK_SIZE_K=32, GROUP_SIZE_M=1,
        ACTIVATION="", num_warps=4, num_stages=1)
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
    tutorials["03_matmul"].matmul_kernel.base_fn[(triton.cdiv(M, 64) * triton.cdiv(N, block_n),)](
        a, b, c, M, N, K, K, 1, N, 1, N, 1, BLOCK_SIZE_M=64, BLOCK_SIZE_N=block_n, BLOCK_SIZE_K=32, GROUP_SIZE_M=1,
        ACTIVATION="", num_warps=4)
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
    tutorials["03_matmul"].matmul_kernel.base_fn[(triton.cdiv(M, 64) * triton.cdiv(N, 64),)](
        a, b, c, M, N, K, K, 1, N, 1, N, 1, BLOCK_SIZE_M=64, BLOCK_SIZE_N=64, BLOCK_SIZE_K=32, GROUP_SIZE_M=1,
        ACTIVATION=activation, num_warps=4)
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
    tutorials["03_matmul"].matmul_kernel.base_fn[(triton.cdiv(M, 128) * triton.cdiv(N, 128),)](
        a, b, c, M, N, K, K, 1, N, 1, N, 1, BLOCK_SIZE_M=128, BLOCK_SIZE_N=128, BLOCK_SIZE_K=32, GROUP_SIZE_M=8,
        ACTIVATION="", num_warps=8, num_stages=4)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=2.0 ** -7, atol=2.0 ** -7 * np.abs(want).max())
    (source,) = on_cuda
    assert source.count("ember_mma_warp_64x32x16_bf16_f32(") == 1 + 1 and "cp.async.wait_group 2;" in source
    assert "__builtin_assume((K_value & 15) == 0);" in source and "wmma." not in source
    assert ", 32, 128, kk * 16, ty" in source  # the offsets in the swizzle's period: no stage, no warp row of A


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


@needs_nvrtc
def test_layer_norm_forward_and_backward(tutorials, rng, on_cuda):
    ln = tutorials["04_layer_norm"]
    M, N = 9, 40
    x = rng.standard_normal((M, N), dtype=np.float32)
    w, b = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    dy = rng.standard_normal((M, N), dtype=np.float32)
    y, mean, rstd = ln.layer_norm_forward(x, w, b, block_size=32)
    dx, dw, db = ln.layer_norm_backward(dy, x, w, mean, rstd, group_size_m=4)
    tx, tw, tb = (torch.from_numpy(v).double().requires_grad_() for v in (x, w, b))
    ty = torch.nn.functional.layer_norm(tx, (N,), tw, tb, eps=1e-5)
    ty.backward(torch.from_numpy(dy).double())
    for got, want in ((y, ty), (dx, tx.grad), (dw, tw.grad), (db, tb.grad)):
        want = want.detach().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * (1 + np.abs(want).max()))
    assert any("ember_fenced((__threadfence(), atomicCAS(" in s for s in on_cuda)  # the lock, acquire-release


@needs_nvrtc
@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention(tutorials, rng, on_cuda, causal):
    q, k, v = (rng.standard_normal((1, 2, 21, 16)).astype("float16") for _ in range(3))
    o = tutorials["05_fused_attention"].attention(q, k, v, causal, block_m=16, block_n=16)
    want = tutorials["05_fused_attention"].reference(q, k, v, causal)
    np.testing.assert_allclose(o.astype("float64"), want, rtol=5e-3, atol=5e-3)


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

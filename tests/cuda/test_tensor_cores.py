"""Tensor Cores: the wmma intrinsics (ember.intrinsics.wmma) as the loop-IR interpreter runs
them (a GEMM of fp16 or bf16 tiles tensorized onto the 16x16x16 product, its reset where the
reduction starts, its update at each 16-wide step of k; the store of 16x16 tiles), and the
Tensor Core GEMM schedule (ember.cuda.tensorcore.tensorcore_gemm) on the interpreter, compiled by
NVRTC for sm_90, and on a GPU where there is one, each against NumPy."""

import ml_dtypes
import numpy as np
import pytest
from gpu_kernels import needs_gpu, needs_nvrtc

import ember
from ember import te
from ember.cuda import fragments, tensorcore
from ember.errors import LowerError, ScheduleError
from ember.intrinsics import wmma

NUMPY = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _gemm(dtype: str, m: int = 32, n: int = 48, k: int = 64):
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype("float32") * B[r, j].astype("float32"), axis=r),
                   name="C")
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=16)
    jo, ji = s[C].split(j, factor=16)
    ro, ri = s[C].split(r, factor=16)
    s[C].reorder(io, jo, ro, ii, ji, ri)
    return s, [A, B, C], ii


@pytest.mark.parametrize("dtype", wmma.DTYPES)
def test_mma_matches_numpy(dtype):
    s, args, inner = _gemm(dtype)
    s[args[2]].tensorize(inner, wmma.MMA[dtype])
    assert "ember_wmma_mma_" in str(ember.lower(s, args))
    f = ember.build(s, args, target="python")
    rng = np.random.default_rng(7)
    a = rng.standard_normal((32, 64)).astype(NUMPY[dtype])
    b = rng.standard_normal((64, 48)).astype(NUMPY[dtype])
    out = np.full((32, 48), np.nan, np.float32)
    f(a, b, out)
    expected = a.astype(np.float64) @ b.astype(np.float64)  # the inputs exact, the fp32 sums within rounding
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    assert np.abs(out).max() > 1.0


def test_tf32_step_rounds_operands_to_nearest_ties_away():
    """The TF32 product (Triton's input_precision="tf32") keeps 10 bits of each operand's mantissa
    as cvt.rna does: a tie goes away from zero (nearest-even would keep 1.0), signs kept."""
    from ember.codegen.python import run_tensor_intrin

    ulp = 2.0 ** -10  # of TF32 at 1.0
    x = np.array([1 + ulp / 2, -(1 + ulp / 2), 1 + ulp / 2 - 2.0 ** -23, 1 + 3 * ulp / 2, 3.0], np.float32)
    want = np.array([1 + ulp, -(1 + ulp), 1.0, 1 + 2 * ulp, 3.0], np.float32)  # ties away; below a tie down
    a, b = np.zeros((16, 16), np.float32), np.zeros((16, 16), np.float32)
    a[:len(x), 0], b[0, 0] = x, 1.0  # c[i, 0] = tf32(x[i]) * 1
    c = np.zeros((16, 16), np.float32)
    it = wmma.MMA["float32"]
    run_tensor_intrin({"intrin": it.name, "role": "update", "c_scalars": 0}, [(a.reshape(-1), 0), (b.reshape(-1), 0)],
                      [(c.reshape(-1), 0)], [16, 1] * 3)
    np.testing.assert_array_equal(c[:len(x), 0], want)


def test_store_copies_tiles():
    c = te.placeholder((32, 48), "float32", name="c")
    out = te.compute((32, 48), lambda i, j: c[i, j], name="out")
    s = te.create_schedule(out.op)
    i, j = s[out].op.axis
    io, ii = s[out].split(i, factor=16)
    jo, ji = s[out].split(j, factor=16)
    s[out].reorder(io, jo, ii, ji)
    s[out].tensorize(ii, wmma.STORE)
    f = ember.build(s, [c, out], target="python")
    x = np.random.default_rng(3).standard_normal((32, 48)).astype(np.float32)
    y = np.full_like(x, np.nan)
    f(x, y)
    np.testing.assert_array_equal(y, x)


def test_inputs_of_another_type_are_refused():
    s, args, inner = _gemm("float16")
    with pytest.raises(ScheduleError, match="bfloat16"):
        s[args[2]].tensorize(inner, wmma.MMA["bfloat16"])


def _inputs(dtype: str, m: int, n: int, k: int, seed: int = 5):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(NUMPY[dtype])
    b = rng.standard_normal((k, n)).astype(NUMPY[dtype])
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("dtype", wmma.DTYPES)
def test_tensorcore_gemm_on_the_interpreter(dtype):
    s, args = tensorcore.tensorcore_gemm(64, 256, 64, dtype, BM=64, BN=128, WM=32, WN=64, intrinsic="wmma",
                                        stages=2)
    text = str(ember.lower(s, args, target="cuda"))
    assert "scope='wmma.accumulator'" in text and "alloc((64, 40)" in text  # A's tile, compacted, rows padded
    f = ember.build(s, args, target="python")
    a, b, expected = _inputs(dtype, 64, 256, 64)
    out = np.full((64, 256), np.nan, np.float32)
    f(a, b, out)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@needs_nvrtc
@pytest.mark.parametrize("dtype", wmma.DTYPES)
def test_tensorcore_gemm_compiles_for_sm90(dtype):
    s, args = tensorcore.tensorcore_gemm(256, 256, 128, dtype, intrinsic="wmma", stages=2)
    f = ember.build(s, args, target="cuda")
    assert f.arch.startswith("sm_") and len(f.binary) > 0
    assert f.block == (32, 4, 1) and f.grid == (4, 1, 1)
    src = f.source
    assert "wmma.mma.sync.aligned.row.row.m16n16k16" in src and "#include <mma.h>" not in src
    assert "C_wmma_accumulator[16];" in src  # 4x4 fragments a warp
    # each k step loads a warp's 4 fragments of A and 4 of B once, then makes its 16 products
    assert "ember_wmma_warp_mma_64x64x16_" in src and src.count("wmma.load.a.sync") == 1
    assert "A_shared[10240];" in src  # two stages of 128 rows of 32 + 8 (ember.cuda.pipeline)
    assert "__shared__ __align__(32)" in src and "__syncthreads();" in src
    assert "cp.async.cg.shared.global" in src  # 8 halves copied a thread at a time, asynchronously
    # the calls run in every lane: no fragment index depends on a loop (registers, not local memory)
    assert "C_wmma_accumulator[(0) / 1024" in src


@needs_gpu
@pytest.mark.parametrize("dtype", wmma.DTYPES)
def test_tensorcore_gemm_on_the_gpu(dtype):
    s, args = tensorcore.tensorcore_gemm(256, 384, 96, dtype, BK=32, intrinsic="wmma", stages=2)
    f = ember.build(s, args, target="cuda")
    a, b, expected = _inputs(dtype, 256, 384, 96, seed=11)
    out = np.full((256, 384), np.nan, np.float32)
    f(a, b, out)
    np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-3)


def test_tensorcore_gemm_refuses_tiles_that_do_not_divide():
    with pytest.raises(ScheduleError, match="must divide"):
        tensorcore.tensorcore_gemm(100, 128, 64)
    with pytest.raises(ScheduleError, match="float16"):
        tensorcore.tensorcore_gemm(128, 128, 64, "float32")


def test_warp_calls_need_32_lanes():
    """A warp's call made by a launch whose threadIdx.x is not the 32 lanes would compute
    garbage or hang: a LowerError before anything is compiled."""
    s, args = tensorcore.tensorcore_gemm(128, 128, 32)
    func = ember.lower(s, args, target="cuda")
    fragments.check_warps(func.body, {"threadIdx.x": 32, "threadIdx.y": 8}, func.name)
    with pytest.raises(LowerError, match="threadIdx.x must be the 32 lanes, not 64"):
        fragments.check_warps(func.body, {"threadIdx.x": 64, "threadIdx.y": 4}, func.name)

"""Software pipelining (ember.cuda.pipeline): a K loop's next tiles copied into the other half of
double-buffered shared memory while this one's products run, by cp.async from sm_80; checked for
its numbers on the interpreter (which lands a thread's asynchronous copies at its wait, so a
missing wait shows), and compiled by NVRTC with and without cp.async."""

import re
from dataclasses import replace

import gpu_kernels as kernels
import numpy as np
import pytest
from gpu_kernels import needs_nvrtc

import ember
from ember import te
from ember.cuda import nvrtc, schedules, staged_copies, tensorcore
from ember.cuda.pipeline import STAGED, WAIT
from ember.cuda.simt import SimtKernel
from ember.errors import LowerError
from ember.graph.core import TensorType
from ember.ops.registry import infer_types
from ember.schedules.apply import node_kernel
from ember.target import Target
from ember.tir.expr import Call
from ember.tir.functor import mutate_stmt
from ember.tir.stmt import SYNC, Evaluate, For, SeqStmt

RNG = np.random.default_rng(31)


def _gemm(stages=2):
    return kernels.gemm(64, 64, 32, BM=32, BN=32, BK=8, TM=4, TN=4, vector=4, stages=stages)


def _inputs():
    return RNG.standard_normal((64, 32), dtype="float32"), RNG.standard_normal((32, 64), dtype="float32")


def test_a_pipelined_gemm_is_right_on_the_interpreter():
    s, args, reference = _gemm()
    a, b = _inputs()
    out = np.full((64, 64), np.nan, "float32")
    ember.build(s, args, target="python", seed=3)(a, b, out)
    np.testing.assert_allclose(out, reference(a, b), rtol=1e-5, atol=1e-5)


def test_without_its_wait_the_tiles_are_read_before_they_land():
    s, args, _ = _gemm()
    kernel = ember.build(s, args, target="python")
    no_wait = mutate_stmt(kernel.func.body, f_stmt=lambda x: SeqStmt(())
                          if isinstance(x, Evaluate) and isinstance(x.value, Call) and x.value.name == WAIT else None)
    broken = SimtKernel(replace(kernel.func, body=no_wait))
    assert "_cp.wait(" in kernel.source and "_cp.wait(" not in broken.source
    a, b = _inputs()
    out = np.zeros((64, 64), "float32")
    broken(a, b, out)
    assert np.isnan(out).all()  # the shared tiles were never written: NaN, as a block's shared memory starts


def test_three_stages_wait_for_one_group_behind_one_barrier():
    """With 3 stages, the loop waits until one group is in flight, then its one barrier (the
    interpreter's yield); without that barrier a thread reads tiles the others have not copied."""
    s, args, reference = _gemm(stages=3)
    kernel = ember.build(s, args, target="python", seed=2)
    a, b = _inputs()
    out = np.full((64, 64), np.nan, "float32")
    kernel(a, b, out)
    np.testing.assert_allclose(out, reference(a, b), rtol=1e-5, atol=1e-5)
    assert "_cp.wait(1)" in kernel.source

    def unsynced(x):
        if isinstance(x, For) and x.annotation(STAGED):
            return replace(x, body=SeqStmt(tuple(y for y in x.body.stmts if not (
                isinstance(y, Evaluate) and isinstance(y.value, Call) and y.value.name == SYNC))))
        return None

    broken = SimtKernel(replace(kernel.func, body=mutate_stmt(kernel.func.body, f_stmt=unsynced)))
    assert broken.source.count("yield") == kernel.source.count("yield") - 1
    out = np.zeros((64, 64), "float32")
    broken(a, b, out)
    assert np.isnan(out).any()  # tiles read before their copies landed: NaN, as shared memory starts


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_90", "sm_75"])
def test_cp_async_from_sm80(arch):
    s, args, _ = _gemm()
    src = ember.build(s, args, target="cuda", arch=arch).source
    uses = "cp.async.cg.shared.global" in src
    assert uses == (arch == "sm_90")
    assert ("cp.async.wait_group 0;" in src) == uses and ("cp.async.commit_group;" in src) == uses
    assert "float A_shared[512];" in src  # two stages of 32 x 8


@needs_nvrtc
def test_the_tensor_core_gemm_is_pipelined():
    s, args = tensorcore.tensorcore_gemm(128, 128, 64, "float16", BM=64, BN=64, WM=32, WN=32, intrinsic="wmma",
                                        stages=2)
    src = ember.build(s, args, target="cuda", arch="sm_90").source
    assert src.count("cp.async.cg.shared.global") == 4  # A's and B's tiles, before the loop and in it
    assert "__half A_shared[5120];" in src  # two stages of 64 rows of 32 + 8


@needs_nvrtc
def test_a_convolutions_columns_are_loaded_into_registers_before_the_products_and_stored_after():
    """(ember.cuda.staged_copies; ember.cuda.half_elements renders the zero-filled elements as halves)"""
    types = [TensorType((1, 16, 6, 6), "float16"), TensorType((8, 144), "float16")]
    attrs = {"kernel": (3, 3), "padding": (1, 1, 1, 1)}
    bound, outs = infer_types("conv2d_gemm", types, attrs)
    s, args = node_kernel("conv2d_gemm", types, bound, outs, target=Target("cuda"))
    src = ember.build(s, args, target="cuda", arch="sm_90").source
    loop = src[src.index("cp.async.wait_group"):]  # (the K loop: its copies of the next tiles, then the products)
    regs = re.search(r"__half (\w+_regs)\[(\d+)\];", src)
    assert regs and int(regs[2]) <= staged_copies.MAX_REGISTERS
    load, product = loop.index(f"{regs[1]}["), loop.index("ember_mma_warp")
    assert load < product < loop.index(f"= {regs[1]}[")  # the columns computed first, stored after the products
    assert "cp.async.cg.shared.global" in loop  # the weights' tile stays a cp.async
    # a column's element copied as its half bits where it is inside the image and the tile, else zero
    filled = re.search(rf"{regs[1]}\[[^\]]*\] = (.*);", loop)[1]
    assert filled.endswith(": __ushort_as_half((unsigned short)0)") and "__float2half_rn" not in filled
    (used,) = nvrtc.resources(src, "sm_90").values()  # ptxas's report: the registers hold the columns, nothing spills
    assert 0 < used.registers <= 128 and used.spill_stores == used.spill_loads == 0 and used.shared > 0


def test_a_loop_that_does_not_copy_first_is_refused():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    outer, inner = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(inner, te.thread_axis("threadIdx.x"))
    s[B].pragma(outer, "software_pipeline", 2)
    with pytest.raises(LowerError, match="loop i_0: software pipelining takes a body that allocates shared buffers, "
                                         "copies tiles into them, then computes from them"):
        ember.build(s, [A, B], target="python")


def test_a_k_loop_of_symbolic_trip_count_is_pipelined_its_first_copies_guarded():
    n = te.var("n")
    A, B = te.placeholder((32, n), name="A"), te.placeholder((n, 32), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((32, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    schedules.gemm(s, A, B, C, BM=32, BN=32, BK=8, TM=4, TN=4, stages=2)
    f = ember.build(s, [A, B, C], target="python", seed=5)
    assert "if (0 < _floordiv((n + 7), 8)):" in f.source  # (the loop may not run: no copies before it then)
    assert "if ((k_0 + 1) < _floordiv((n + 7), 8)):" in f.source
    for size in (1, 20):  # one partial panel; two whole and a partial one
        a, b = RNG.standard_normal((32, size), dtype="float32"), RNG.standard_normal((size, 32), dtype="float32")
        out = np.full((32, 32), np.nan, "float32")
        f(a, b, out)
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)

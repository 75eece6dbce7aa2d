"""GPU semantics on the interpreter (ember.cuda.simt): blocks in any order, a block's threads as
phases between barriers, shared memory per block; a missing barrier is a RaceError naming the
buffer and the threads, and so is a barrier that not every thread reaches."""

from dataclasses import replace

import gpu_kernels as kernels
import numpy as np
import pytest

import ember
from ember.cuda.codegen import SYNC
from ember.cuda.scopes import infer_scopes
from ember.cuda.simt import SimtKernel, run_grid
from ember.cuda.sync import BARRIER, insert_syncs
from ember.errors import RaceError
from ember.tir.expr import Buffer, Call, Const, Var
from ember.tir.functor import mutate_stmt
from ember.tir.stmt import THREAD_BINDING, BufferStore, Evaluate, For, PrimFunc, SeqStmt

RNG = np.random.default_rng(11)


def _gemm_func():
    s, args, reference = kernels.gemm(32, 32, 16, BM=32, BN=32, BK=8, TM=4, TN=4)
    return insert_syncs(infer_scopes(ember.lower(s, args, target="python"))), reference


def _without(func, keep):
    """func with the barriers `keep(barrier's enclosing statement list)` says to drop removed."""
    def on_stmt(s):
        if isinstance(s, SeqStmt) and any(x is BARRIER for x in s.stmts) and not keep(s):
            return SeqStmt(tuple(x for x in s.stmts if x is not BARRIER))
        return None

    return replace(func, body=mutate_stmt(func.body, f_stmt=on_stmt))


def test_blocks_and_threads_run_in_a_shuffled_order():
    order = []

    def thread(ix, tid, block):
        order.append((block.index, tid))
        yield 0
        order.append((block.index, tid))

    run_grid(thread, "k", [], {"blockIdx.x": 4, "threadIdx.x": 8}, seed=3)
    blocks = [b for b, _ in order[::16]]
    assert sorted(blocks) == [(b, 0, 0) for b in range(4)] and blocks != sorted(blocks)
    first, second = [t for _, t in order[:8]], [t for _, t in order[8:16]]
    assert sorted(first) == sorted(second) == list(range(8)) and first != second  # phase by phase


@pytest.mark.parametrize("seed", [0, 5])
def test_a_gemm_with_its_barriers_is_right_in_any_order(seed):
    func, reference = _gemm_func()
    a, b = RNG.standard_normal((32, 16), dtype="float32"), RNG.standard_normal((16, 32), dtype="float32")
    out = np.full((32, 32), np.nan, "float32")
    SimtKernel(func, seed)(a, b, out)
    np.testing.assert_allclose(out, reference(a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kept", ["the loop's last", "the one before the reads"])
def test_a_missing_barrier_is_a_race(kept):
    """Without the barrier before the reads, a thread reads a tile's element before (or after)
    another writes it; without the loop's last, a thread's next copy overwrites what another
    still reads. Whichever thread runs first, a race."""
    func, _ = _gemm_func()
    broken = _without(func, keep=lambda seq: (seq.stmts[-1] is BARRIER) == (kept == "the loop's last"))
    a, b = RNG.standard_normal((32, 16), dtype="float32"), RNG.standard_normal((16, 32), dtype="float32")
    race = (r"kernel main, block \(0, 0, 0\): thread \d+ (reads|writes) [AB]_shared\[\d+\], which (thread \d+|"
            r"other threads) (wrote|read) since the last barrier \(a missing __syncthreads\(\)\?\)")
    with pytest.raises(RaceError, match=race):
        SimtKernel(broken)(a, b, np.zeros((32, 32), "float32"))


def test_a_barrier_some_threads_skip_is_an_error():
    out = Buffer("out", (Const(64, "int64"),), "float32")
    bx, tx, half = Var("bx"), Var("tx"), Var("half")

    def bound(v, n, tag, body):
        return For(v, Const(0, "int64"), Const(n, "int64"), THREAD_BINDING, body, (("thread_tag", tag),))

    body = bound(bx, 1, "blockIdx.x", SeqStmt((
        bound(tx, 64, "threadIdx.x", BufferStore(out, Const(1.0, "float32"), (tx,))),
        bound(half, 32, "threadIdx.x", Evaluate(Call(SYNC, (), "int32"))))))
    f = SimtKernel(PrimFunc("skips", (out,), body))
    with pytest.raises(RaceError, match=r"kernel skips, block \(0, 0, 0\): the threads stopped some at a barrier, "
                                        r"the others finished"):
        f(np.zeros(64, "float32"))


def test_an_element_several_threads_store_is_a_race():
    """Every thread of a block storing the block's one output (a block reduction's old store): on
    a GPU any of the stores may land last, and one may overwrite an input that another thread
    still reads where the output takes that input's buffer."""
    out = Buffer("out", (Const(4, "int64"),), "float32")
    bx, tx = Var("bx"), Var("tx")
    body = For(bx, Const(0, "int64"), Const(4, "int64"), THREAD_BINDING,
               For(tx, Const(0, "int64"), Const(32, "int64"), THREAD_BINDING,
                   BufferStore(out, Const(1.0, "float32"), (bx,)), (("thread_tag", "threadIdx.x"),)),
               (("thread_tag", "blockIdx.x"),))
    f = SimtKernel(PrimFunc("every_thread", (out,), body))
    with pytest.raises(RaceError, match=r"kernel every_thread, block \(\d, 0, 0\): thread \d+ stores out\[\d\], which "
                                        r"thread \d+ stored since the last barrier"):
        f(np.zeros(4, "float32"))

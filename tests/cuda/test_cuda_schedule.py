"""GPU schedules: bind in both schedule APIs (traced and replayed), shared caches, the barriers
the sync pass places, the target's limits as ScheduleErrors, and what the C target refuses."""

import gpu_kernels as kernels
import numpy as np
import pytest
from gpu_kernels import needs_nvrtc

import ember
from ember import te, tir
from ember.cuda.sync import BARRIER, insert_syncs
from ember.errors import LowerError, ScheduleError
from ember.testing import verify_trace_roundtrip
from ember.tir.stmt import SeqStmt

RNG = np.random.default_rng(5)


def _vadd(n=1024):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    return A, B, te.create_schedule(B.op)


def test_loop_ir_bind_is_traced_and_replays():
    A, B, s = _vadd()
    sch = tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    bx, tx = sch.split(i, factors=[None, 256])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    assert "sch.bind(l2, thread='threadIdx.x')" in sch.trace.as_python()
    assert "thread_binding(256, thread_tag='threadIdx.x')" in str(sch.mod)
    verify_trace_roundtrip(sch)


def test_te_bind_takes_a_thread_axis():
    A, B, s = _vadd()
    bx, tx = s[B].split(B.op.axis[0], factor=128)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    text = str(ember.lower(s, [A, B], target="cuda"))
    assert "thread_binding(8, thread_tag='blockIdx.x')" in text
    with pytest.raises(ScheduleError, match="te.thread_axis"):
        s[B].bind(bx, "threadIdx.x")


def test_unknown_thread_index_is_refused():
    with pytest.raises(ScheduleError, match="unknown thread index 'threadIdx.w'"):
        te.thread_axis("threadIdx.w")
    A, B, s = _vadd()
    sch = tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    with pytest.raises(ScheduleError, match="unknown thread index"):
        sch.bind(i, "warp.x")


def test_binding_a_reduction_axis_is_refused():
    A = te.placeholder((64, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((64,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(ScheduleError, match="cannot bind loop k"):
        s[B].bind(k, te.thread_axis("threadIdx.x"))


def test_c_target_refuses_a_bound_loop():
    A, B, s = _vadd()
    bx, tx = s[B].split(B.op.axis[0], factor=128)
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    with pytest.raises(LowerError, match="bound to threadIdx.x: GPU indices are for target 'cuda'"):
        ember.build(s, [A, B])


@needs_nvrtc
def test_too_many_threads_per_block_names_the_limit():
    A, B, s = _vadd(4096)
    bx, tx = s[B].split(B.op.axis[0], factor=2048)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match=r"2048 threads per block .*limit of 1024 threads per block \(sm_90\)"):
        ember.build(s, [A, B], target="cuda", arch="sm_90")
    with pytest.raises(ScheduleError, match="2048 threads per block"):  # the interpreter checks the same
        ember.build(s, [A, B], target="python")


def test_too_much_shared_memory_names_the_limit():
    s, args, _ = kernels.gemm(256, 256, 128, BM=128, BN=128, BK=64, TM=8, TN=8)  # 2 x 32 KiB panels
    with pytest.raises(ScheduleError, match=r"65536 bytes of shared memory .*limit of 49152 bytes of static shared "
                                            r"memory per block \(sm_90\)"):
        ember.build(s, args, target="cuda", arch="sm_90")


@needs_nvrtc
def test_arrays_past_the_local_memory_of_a_thread_name_the_limit():
    n = 140_000  # a stage left whole in every thread: 560 000 bytes each, which the driver refuses to launch
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=256)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match=r"560000 bytes of arrays per thread \(B\): past the limit of 524288 "
                                            r"bytes of local memory per thread \(sm_90\)"):
        ember.build(s, [A, C], target="cuda", arch="sm_90")
    s[B].compute_at(s[C], tx)  # an element of B at the thread that reads it
    assert "float B[1];" in ember.build(s, [A, C], target="cuda", arch="sm_90").source


@needs_nvrtc
def test_a_cubin_says_how_many_registers_a_thread_takes():
    s, args, _ = kernels.gemm(128, 128, 64)
    f = ember.build(s, args, target="cuda", arch="sm_90")
    assert 32 <= f.registers <= 255  # a 4x4 register tile and its operands
    assert ember.build(s, args, target="cuda", arch="sm_90", ptx=True).registers is None


def test_shared_cache_covers_the_block_tile():
    s, args, _ = kernels.gemm(128, 128, 64)
    text = str(ember.lower(s, args, target="cuda"))
    assert "A_shared = alloc((64, 8), 'float32', scope='shared')" in text
    assert "B_shared = alloc((8, 64), 'float32', scope='shared')" in text
    assert "C_local = alloc((4, 4), 'float32', scope='local')" in text


def test_sync_pass_places_barriers_at_the_hazards():
    s, args, _ = kernels.gemm(128, 128, 64)
    func = insert_syncs(ember.lower(s, args, target="cuda"))
    text = str(func)
    assert text.count("cuda.syncthreads") == 2
    # the k loop's body ends with a barrier: the next panels overwrite the ones just read
    found = []
    tir.functor.visit_stmt(func.body, lambda x: found.append(x) if isinstance(x, tir.stmt.For)
                           and x.loop_var.name == "k_0" else None)
    (k_loop,) = found
    assert isinstance(k_loop.body, SeqStmt) and k_loop.body.stmts[-1] is BARRIER


def test_scratch_gets_the_scope_of_where_it_is_written():
    from ember.cuda.scopes import infer_scopes

    s, args, _ = kernels.row_softmax(16, 1024, 128, per_block=True)
    text = str(infer_scopes(ember.lower(s, args, target="cuda")))
    assert "mx_rf = alloc((1, 128), 'float32', scope='shared')" in text  # the threads' partials
    assert "mx = alloc((1), 'float32', scope='local')" in text  # every thread's own total


def test_scratch_written_by_the_threads_of_every_block_is_refused():
    from ember.cuda.scopes import infer_scopes

    A = te.placeholder((1024,), name="A")
    B = te.compute((1024,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((1024,), lambda i: B[1023 - i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    for t in (B, C):
        bx, tx = s[t].split(t.op.axis[0], factor=128)
        s[t].bind(bx, te.thread_axis("blockIdx.x"))
        s[t].bind(tx, te.thread_axis("threadIdx.x"))
    with pytest.raises(LowerError, match="buffer B is written by bound threads outside the loop over blocks"):
        infer_scopes(ember.lower(s, [A, C], target="cuda"))


def test_sync_pass_leaves_kernels_without_shared_memory_alone():
    s, args, _ = kernels.row_softmax()
    func = ember.lower(s, args, target="cuda")
    assert insert_syncs(func) is func


def test_cuda_kernel_checks_its_arguments():
    from ember.cuda.kernel import _check
    from ember.errors import ArgumentTypeError, ShapeError

    s, args, _ = kernels.elementwise(1024)
    buf = ember.lower(s, args, target="cuda").params[0]
    want = ((1024,), buf.dtype, buf.name)  # (what a kernel works out of each parameter at its first call)
    with pytest.raises(ShapeError, match="argument 0 \\(A\\) has shape \\(1000,\\), expected \\(1024,\\)"):
        _check(want, (1000,), "float32", True, 0, "main")
    with pytest.raises(ArgumentTypeError, match="is float64, expected float32"):
        _check(want, (1024,), "float64", True, 0, "main")


def test_without_the_cuda_packages_a_build_says_what_to_install(monkeypatch):
    import sys

    from ember.cuda import nvrtc
    from ember.errors import DeviceError

    monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # as if cuda-bindings were not installed
    nvrtc.nvrtc_version.cache_clear()
    try:
        A, B, s = _vadd()
        bx, tx = s[B].split(B.op.axis[0], factor=128)
        s[B].bind(bx, te.thread_axis("blockIdx.x"))
        s[B].bind(tx, te.thread_axis("threadIdx.x"))
        with pytest.raises(DeviceError, match=r"NVRTC is not installed .*pip install 'ember\[cuda\]'"):
            ember.build(s, [A, B], target="cuda", arch="sm_90")
    finally:
        nvrtc.nvrtc_version.cache_clear()


def _padded_gemm():
    s, args, reference = kernels.gemm(64, 64, 32, BM=32, BN=32, BK=8, TM=4, TN=4)
    return s, args, reference


def test_storage_align_pads_the_rows_in_both_apis():
    s, args, reference = _padded_gemm()
    s.sch.storage_align(s.sch.get_block("A_shared"), buffer_index=0, axis=0, factor=8, offset=1)
    BS = s.stage_named("B_shared")
    BS.storage_align(BS.op.axis[0], 32, 4)
    text = str(ember.lower(s, args, target="python"))
    assert "A_shared = alloc((32, 9), 'float32', scope='shared')" in text  # rows 9 floats apart
    assert "B_shared = alloc((8, 36), 'float32', scope='shared')" in text
    assert "storage_align(b" in s.sch.trace.as_python()
    verify_trace_roundtrip(s.sch)
    a, b = RNG.standard_normal((64, 32), dtype="float32"), RNG.standard_normal((32, 64), dtype="float32")
    out = np.full((64, 64), np.nan, "float32")
    ember.build(s, args, target="python")(a, b, out)
    np.testing.assert_allclose(out, reference(a, b), rtol=1e-5, atol=1e-5)


def test_storage_align_refuses_what_it_cannot_pad():
    s, args, _ = _padded_gemm()
    with pytest.raises(ScheduleError, match=r"storage_align pads the row stride \(axis 0 of A_shared, a 2-D buffer\), "
                                            r"not axis 1"):
        s.sch.storage_align(s.sch.get_block("A_shared"), buffer_index=0, axis=1, factor=8, offset=1)
    with pytest.raises(ScheduleError, match="storage_align pads scratch buffers; C is an argument of the kernel"):
        s.sch.storage_align(s.sch.get_block("C_local"), buffer_index=0, axis=0, factor=8, offset=1)  # (it writes C)
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] + 1.0, name="B")
    sch = tir.Schedule(te.create_prim_func([A, B]))
    with pytest.raises(ScheduleError, match="storage_align pads scratch buffers; B is an argument of the kernel"):
        sch.storage_align(sch.get_block("B"), buffer_index=0, axis=0, factor=8, offset=1)
    with pytest.raises(ScheduleError, match="0 <= offset < factor, got 8, 8"):
        s.sch.storage_align(s.sch.get_block("A_shared"), buffer_index=0, axis=0, factor=8, offset=8)

"""Every schedule primitive, in the loop-IR spelling and the stage spelling, on both targets,
checked against NumPy; every illegal directive raises a ScheduleError that says why."""

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import ScheduleError
from ember.testing import check_schedule, verify_trace_roundtrip
from ember.tir import Schedule, Trace

TARGETS = ("c", "python")


def gemm(m=24, n=20, k=12, dtype="float32"):
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


def gemm_relu(m=24, n=20, k=12):
    A, B, C = gemm(m, n, k)
    D = te.compute((m, n), lambda i, j: te.max(C[i, j], 0.0), name="D")
    return A, B, C, D


def mm_ref(a, b):
    return a @ b


def relu_mm_ref(a, b):
    return np.maximum(a @ b, 0)


def tir_sched(tensors):
    return Schedule(te.create_prim_func(tensors))


def test_split_reorder_fuse_parallel_vectorize_unroll_tir():
    A, B, C = gemm()
    sch = tir_sched([A, B, C])
    blk = sch.get_block("C")
    i, j, k = sch.get_loops(blk)
    io, ii = sch.split(i, factors=[None, 8])
    jo, ji = sch.split(j, factors=[3, None])  # nparts
    ko, ki = sch.split(k, factors=[None, 5])  # 5 does not divide 12
    sch.reorder(io, jo, ko, ii, ki, ji)
    f = sch.fuse(io, jo)
    sch.parallel(f)
    sch.vectorize(ji)
    sch.unroll(ki)
    check_schedule(sch, None, mm_ref, targets=TARGETS, rtol=1e-5, atol=1e-5)
    assert "parallel" in str(sch.mod) and "vectorized" in str(sch.mod)


def test_stage_split_tile_fuse_with_tails():
    A, B, C = gemm(100, 77, 33)
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 32, 16)
    fused = s[C].fuse(io, jo)
    s[C].parallel(fused)
    s[C].vectorize(ji)
    ko, ki = s[C].split(C.op.reduce_axis[0], nparts=4)
    s[C].unroll(ki)
    check_schedule(s, [A, B, C], mm_ref, targets=TARGETS, rtol=1e-5, atol=1e-5)


def test_unroll_limit_annotation():
    A, B, C = gemm(16, 16, 8)
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    s[C].pragma(jo, "auto_unroll_max_step", 16)
    lowered = str(ember.lower(s, [A, B, C]))
    assert "for k" not in lowered  # 8 iterations <= 16: unrolled away
    assert "for j_1" in lowered  # 4 * 8 iterations > 16: kept
    check_schedule(s, [A, B, C], mm_ref, targets=TARGETS)


def test_add_unit_loop_gives_a_scalar_a_loop_to_bind():
    """A 0-d output (a whole sum) has no loop; add_unit_loop makes one of one iteration around its
    block, which replays from the trace and leaves the result as it was."""
    x = te.placeholder((7, 5), name="X")
    k, m = te.reduce_axis((0, 7), name="k"), te.reduce_axis((0, 5), name="m")
    total = te.compute((), lambda: te.sum(x[k, m], axis=[k, m]), name="total")
    sch = tir_sched([x, total])
    loop = sch.add_unit_loop(sch.get_block("total"))
    assert [f.extent.value for f in sch.loops_of(sch.get_block("total"))] == [1, 7, 5]
    sch.unroll(loop)  # (a loop like any other)
    verify_trace_roundtrip(sch)
    check_schedule(sch, None, lambda a: np.asarray(a.sum(), dtype=np.float32), targets=TARGETS, rtol=1e-5, atol=1e-5)


def test_compute_inline_and_reverse_compute_inline():
    A, B, C, D = gemm_relu()
    x = te.placeholder((24, 20), name="X")
    P = te.compute((24, 20), lambda i, j: x[i, j] * 2.0, name="P")
    E = te.compute((24, 20), lambda i, j: P[i, j] + 1.0, name="E")
    sch = tir_sched([x, E])
    sch.compute_inline(sch.get_block("P"))
    assert "P" not in [r.block.name for r in sch.all_realizes()]
    check_schedule(sch, None, lambda a: a * 2 + 1, targets=TARGETS)

    sch = tir_sched([x, E])
    sch.reverse_compute_inline(sch.get_block("E"))
    assert [r.block.name for r in sch.all_realizes()] == ["P"]
    check_schedule(sch, None, lambda a: a * 2 + 1, targets=TARGETS)


def test_reverse_compute_inline_needs_the_only_consumer():
    """E feeds both the copy E_local (cache_read for S) and Y: folding the copy into E would leave
    Y reading a tensor nobody computes any more."""
    x = te.placeholder((4, 10), name="X")
    E = te.compute((4, 10), lambda i, j: te.exp(x[i, j]), name="E")
    k = te.reduce_axis((0, 10), name="k")
    S = te.compute((4,), lambda i: te.sum(E[i, k], axis=k), name="S")
    Y = te.compute((4, 10), lambda i, j: E[i, j] / S[i], name="Y")
    sch = tir_sched([x, Y])
    sch.cache_read(sch.get_block("S"), 0, "local")
    before = sch.mod
    with pytest.raises(ScheduleError, match=r"E is also read by block\(s\) \['Y'\]"):
        sch.reverse_compute_inline(sch.get_block("E_local"))
    assert sch.mod is before
    check_schedule(sch, None, lambda a: np.exp(a) / np.exp(a).sum(1, keepdims=True), targets=TARGETS,
                   rtol=1e-5, atol=1e-6)


def test_compute_at_and_reverse_compute_at():
    A, B, C, D = gemm_relu()
    sch = tir_sched([A, B, D])
    i, j = sch.get_loops(sch.get_block("D"))
    io, ii = sch.split(i, factors=[None, 8])
    sch.compute_at(sch.get_block("C"), io)
    check_schedule(sch, None, relu_mm_ref, targets=TARGETS, rtol=1e-5, atol=1e-5)

    sch = tir_sched([A, B, D])
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=[None, 8])
    sch.reverse_compute_at(sch.get_block("D"), io)
    check_schedule(sch, None, relu_mm_ref, targets=TARGETS, rtol=1e-5, atol=1e-5)
    lowered = ember.lower(sch)
    assert "alloc((8, 20)" in str(lowered)  # C shrinks to one tile of rows


def test_compute_root_after_compute_at():
    A, B, C, D = gemm_relu()
    s = te.create_schedule(D.op)
    io, ii = s[D].split(D.op.axis[0], factor=8)
    s[C].compute_at(s[D], io)
    s[C].compute_root()
    check_schedule(s, [A, B, D], relu_mm_ref, targets=TARGETS, rtol=1e-5, atol=1e-5)


def test_cache_read_and_cache_write():
    A, B, C = gemm(16, 32, 8)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "local", [C])
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    s[CC].compute_at(s[C], jo)
    s[AA].compute_at(s[CC], s[CC].op.reduce_axis[0])
    kk = s[CC].op.reduce_axis[0]
    mc, nc = s[CC].op.axis
    s[CC].reorder(kk, mc, nc)
    s[CC].vectorize(nc)
    check_schedule(s, [A, B, C], mm_ref, targets=TARGETS, rtol=1e-5, atol=1e-5)
    text = str(ember.lower(s, [A, B, C]))
    assert "C_local = alloc((4, 16)" in text


def test_rfactor_and_parallel_reduction():
    n, m = 8, 64
    X = te.placeholder((n, m), name="X")
    r = te.reduce_axis((0, m), name="r")
    S = te.compute((n,), lambda i: te.sum(X[i, r], axis=r), name="S")
    sch = tir_sched([X, S])
    i, rr = sch.get_loops(sch.get_block("S"))
    ro, ri = sch.split(rr, factors=[None, 16])
    rf = sch.rfactor(ri, factor_axis=1)
    i2, ro2, ri2 = sch.get_loops(rf)
    sch.reorder(ri2, ro2)
    sch.vectorize(ri2)
    check_schedule(sch, None, lambda x: x.sum(axis=1), targets=TARGETS, rtol=1e-5, atol=1e-5)

    s = te.create_schedule(S.op)
    ko, ki = s[S].split(S.op.reduce_axis[0], factor=16)
    SF = s.rfactor(S, ki)
    i_axis, rf_axis = s[SF].op.axis  # the rfactor axis is data parallel now
    s[SF].reorder(rf_axis, i_axis)
    s[SF].parallel(rf_axis)
    check_schedule(s, [X, S], lambda x: x.sum(axis=1), targets=TARGETS, rtol=1e-5, atol=1e-5)


def test_rfactor_of_a_write_back_names_its_partials_apart():
    """The write-back of an rfactor is named like the reduction it replaced; factoring it again
    made a second block and buffer `S_rf`, and handles by name found the first. Each now has a
    name of its own, and the te views point at their own stages."""
    n, m = 4, 128
    X = te.placeholder((n, m), name="X")
    r = te.reduce_axis((0, m), name="r")
    S = te.compute((n,), lambda i: te.sum(X[i, r], axis=r), name="S")
    s = te.create_schedule(S.op)
    _, ki = s[S].split(S.op.reduce_axis[0], factor=16)
    first = s.rfactor(S, ki, factor_axis=1)  # first[i, 16], S the write-back over its 16
    _, lane = s[S].split(s[S].op.reduce_axis[0], factor=4)
    second = s.rfactor(S, lane, factor_axis=1)  # second[i, 4] from first, S over second's 4
    names = [s[first].name, s[second].name, s[S].name]
    assert names == ["S_rf", "S_rf1", "S"]
    assert (first.buffer.name, second.buffer.name) == ("S_rf", "S_rf1")
    assert first.buffer is not second.buffer
    s[second].vectorize(s[second].op.axis[-1])
    check_schedule(s, [X, S], lambda x: x.sum(axis=1), targets=TARGETS, rtol=1e-5, atol=1e-5)
    verify_trace_roundtrip(s.sch)


def test_decompose_reduction():
    A, B, C = gemm()
    sch = tir_sched([A, B, C])
    blk = sch.get_block("C")
    i, j, k = sch.get_loops(blk)
    init = sch.decompose_reduction(blk, k)
    assert sch.block_name(init) == "C_init"
    check_schedule(sch, None, mm_ref, targets=TARGETS, rtol=1e-5, atol=1e-5)

    s = te.create_schedule(C.op)
    init_stage = s[C].decompose_reduction(C.op.reduce_axis[0])
    assert init_stage.name == "C_init"
    check_schedule(s, [A, B, C], mm_ref, targets=TARGETS, rtol=1e-5, atol=1e-5)


def test_trace_prints_serializes_and_replays():
    A, B, C, D = gemm_relu()
    s = te.create_schedule(D.op)
    io, jo, ii, ji = s[D].tile(D.op.axis[0], D.op.axis[1], 8, 4)
    s[C].compute_at(s[D], jo)
    s[D].vectorize(ji)
    text = s.trace.as_python()
    assert "sch.split(" in text and "sch.compute_at(" in text
    replayed = verify_trace_roundtrip(s)
    again = Trace.from_json(replayed.trace.to_json())
    assert again.to_json() == s.trace.to_json()
    f1 = ember.build(replayed, target="c")
    a, b = np.random.rand(24, 12).astype("float32"), np.random.rand(12, 20).astype("float32")
    out = np.empty((24, 20), "float32")
    f1(a, b, out)
    np.testing.assert_allclose(out, relu_mm_ref(a, b), rtol=1e-5, atol=1e-5)


# -- illegal directives ------------------------------------------------------------------------


def test_parallel_reduction_axis_is_rejected():
    A, B, C = gemm()
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="reduction axis"):
        s[C].parallel(C.op.reduce_axis[0])
    with pytest.raises(ScheduleError, match="reduction axis"):
        s[C].vectorize(C.op.reduce_axis[0])


def test_consumed_axis_is_rejected():
    A, B, C = gemm()
    sch = tir_sched([A, B, C])
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(i, factors=[None, 4])
    with pytest.raises(ScheduleError, match="consumed by split"):
        sch.parallel(i)
    a, b = sch.get_loops(sch.get_block("C"))[2:4]
    sch.fuse(a, b)
    with pytest.raises(ScheduleError, match="consumed by fuse"):
        sch.vectorize(b)
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=4)
    with pytest.raises(ScheduleError, match="already split"):
        s[C].split(C.op.axis[0], factor=2)


def test_reorder_axes_of_another_stage_is_rejected():
    A, B, C, D = gemm_relu()
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match="not an axis of stage 'D'"):
        s[D].reorder(D.op.axis[1], C.op.axis[0])
    sch = tir_sched([A, B, D])
    ci = sch.get_loops(sch.get_block("C"))[0]
    di = sch.get_loops(sch.get_block("D"))[0]
    with pytest.raises(ScheduleError, match="not in the same loop nest"):
        sch.reorder(di, ci)


def test_compute_at_non_consumer_is_rejected():
    A, B, C, D = gemm_relu()
    X = te.placeholder((24, 20), name="X")
    E = te.compute((24, 20), lambda i, j: X[i, j] + 1.0, name="E")
    s = te.create_schedule([D.op, E.op])
    with pytest.raises(ScheduleError, match="nothing under loop"):
        s[C].compute_at(s[E], E.op.axis[0])


def test_other_illegal_directives():
    A, B, C, D = gemm_relu()
    sch = tir_sched([A, B, D])
    with pytest.raises(ScheduleError, match="argument of the function"):
        sch.compute_inline(sch.get_block("D"))
    with pytest.raises(ScheduleError, match="reduction"):
        sch.compute_inline(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="no block named 'Z'"):
        sch.get_block("Z")
    i, j, k = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="at most one factor"):
        sch.split(i, factors=[None, None])
    with pytest.raises(ScheduleError, match="cover"):
        sch.split(i, factors=[2, 3])
    with pytest.raises(ScheduleError, match="only consecutive"):
        sch.fuse(i, k)
    with pytest.raises(ScheduleError, match="own loops"):
        sch.compute_at(sch.get_block("C"), j)
    with pytest.raises(ScheduleError, match="is not around"):
        sch.decompose_reduction(sch.get_block("C"), sch.get_loops(sch.get_block("D"))[0])
    with pytest.raises(ScheduleError, match="reduction axis of exactly one block"):
        sch.rfactor(i)
    with pytest.raises(ScheduleError, match="storage scope"):
        sch.cache_write(sch.get_block("C"), 0, "shared_memory")


def test_storage_align_pads_a_scratch_tile_on_every_target():
    A, B, C, D = gemm_relu()
    s = te.create_schedule(D.op)
    i, j = s[D].op.axis
    io, ii = s[D].split(i, factor=8)
    s[C].compute_at(s[D], io)
    s[C].storage_align(s[C].op.axis[0], 16, 3)  # C's 8 x 20 tile, its rows 35 apart
    assert "C = alloc((8, 35), 'float32'" in str(ember.lower(s, [A, B, D]))
    check_schedule(s, [A, B, D], relu_mm_ref, targets=TARGETS, rtol=1e-5, atol=1e-5)

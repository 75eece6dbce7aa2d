"""Property-based tests: random sequences of schedule directives on GEMM, conv2d and softmax.

Each drawn directive is either rejected with a ScheduleError (leaving the schedule unchanged)
or accepted; whatever was accepted must compute what the unscheduled function computes, and
its trace must replay to the same function. Directives known to be illegal must be rejected.
"""

import contextlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.errors import ScheduleError
from ember.testing import random_array, verify_trace_roundtrip
from ember.tir import Schedule
from ember.tir.stmt import For


def gemm():
    A = te.placeholder((6, 5), name="A")
    B = te.placeholder((5, 7), name="B")
    k = te.reduce_axis((0, 5), name="k")
    C = te.compute((6, 7), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((6, 7), lambda i, j: te.max(C[i, j], 0.0), name="D")
    return [A, B, D]


def conv2d():
    X = te.placeholder((1, 2, 6, 6), name="X")
    W = te.placeholder((3, 2, 3, 3), name="W")
    P = te.compute((1, 2, 8, 8), lambda n, c, h, w: te.if_then_else(
        te.all(h >= 1, h < 7, w >= 1, w < 7), X[n, c, h - 1, w - 1], 0.0), name="P")
    rc = te.reduce_axis((0, 2), name="rc")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    Y = te.compute((1, 3, 6, 6), lambda n, f, y, x: te.sum(
        P[n, rc, y + ry, x + rx] * W[f, rc, ry, rx], axis=[rc, ry, rx]), name="Y")
    return [X, W, Y]


def softmax():
    X = te.placeholder((4, 10), name="X")
    k1 = te.reduce_axis((0, 10), name="k1")
    M = te.compute((4,), lambda i: te.max(X[i, k1], axis=k1), name="M")
    E = te.compute((4, 10), lambda i, j: te.exp(X[i, j] - M[i]), name="E")
    k2 = te.reduce_axis((0, 10), name="k2")
    S = te.compute((4,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    Y = te.compute((4, 10), lambda i, j: E[i, j] / S[i], name="Y")
    return [X, Y]


WORKLOADS = {"gemm": gemm, "conv2d": conv2d, "softmax": softmax}
KINDS = ["split", "fuse", "reorder", "parallel", "vectorize", "unroll", "compute_at", "reverse_compute_at",
         "compute_inline", "reverse_compute_inline", "cache_write", "cache_read", "decompose_reduction",
         "rfactor", "annotate", "compute_root"]


def run(func, inputs, target):
    kernel = ember.build(func, target=target)
    out = [random_array(tuple(int(d.value) for d in b.shape), b.dtype) for b in func.params[len(inputs):]]
    kernel(*inputs, *out)
    return out


def apply_random(sch: Schedule, data) -> None:
    """Draw one directive with random operands and apply it (it may be rejected)."""
    blocks = [r.block.name for r in sch.all_realizes()]
    kind = data.draw(st.sampled_from(KINDS))
    b = sch.get_block(data.draw(st.sampled_from(blocks)))
    loops = sch.get_loops(b)
    if not loops:
        return
    pick = lambda: data.draw(st.sampled_from(loops))  # noqa: E731
    other = lambda: sch.get_block(data.draw(st.sampled_from(blocks)))  # noqa: E731
    match kind:
        case "split":
            f = data.draw(st.sampled_from([None, 2, 3, 4]))
            sch.split(pick(), factors=[None, f or 2] if data.draw(st.booleans()) else [f or 2, None])
        case "fuse":
            k = data.draw(st.integers(0, max(0, len(loops) - 2)))
            sch.fuse(*loops[k:k + 2])
        case "reorder":
            chosen = data.draw(st.permutations(loops))[: data.draw(st.integers(2, max(2, len(loops))))]
            sch.reorder(*chosen)
        case "parallel":
            sch.parallel(pick())
        case "vectorize":
            sch.vectorize(pick())
        case "unroll":
            sch.unroll(pick())
        case "annotate":
            sch.annotate(pick(), "pragma_auto_unroll_max_step", data.draw(st.sampled_from([4, 16, 64])))
        case "compute_at":
            sch.compute_at(b, sch.get_loops(other())[0] if data.draw(st.booleans()) else pick())
        case "reverse_compute_at":
            target_loops = sch.get_loops(other())
            sch.reverse_compute_at(b, data.draw(st.sampled_from(target_loops)) if target_loops else pick())
        case "compute_inline":
            sch.compute_inline(b)
        case "reverse_compute_inline":
            sch.reverse_compute_inline(b)
        case "compute_root":
            sch.compute_root(b)
        case "cache_write":
            sch.cache_write(b, 0, data.draw(st.sampled_from(["local", "global"])))
        case "cache_read":
            sch.cache_read(b, 0, "local")
        case "decompose_reduction":
            sch.decompose_reduction(b, pick())
        case "rfactor":
            sch.rfactor(pick(), factor_axis=0)


def check_random_schedule(name, data, target, steps):
    tensors = WORKLOADS[name]()
    func = te.create_prim_func(tensors)
    n_in = sum(1 for t in tensors if not isinstance(t.op, te.ComputeOp))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    inputs = [random_array(tuple(int(d.value) for d in b.shape), b.dtype, rng) for b in func.params[:n_in]]
    expected = run(func, inputs, "python")
    sch = Schedule(func)
    for _ in range(data.draw(st.integers(1, steps))):
        before = sch.mod
        try:
            apply_random(sch, data)
        except ScheduleError:
            assert sch.mod is before  # a rejected directive changes nothing
    got = run(sch.mod, inputs, target)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5, err_msg=f"trace:\n{sch.trace}")
    verify_trace_roundtrip(sch)


def check_against_unscheduled(sch: Schedule, tensors, seed: int) -> None:
    func = te.create_prim_func(tensors)
    rng = np.random.default_rng(seed)
    n_in = sum(1 for t in tensors if not isinstance(t.op, te.ComputeOp))
    inputs = [random_array(tuple(int(d.value) for d in b.shape), b.dtype, rng) for b in func.params[:n_in]]
    expected = run(func, inputs, "python")
    for target in ("python", "c"):
        for g, e in zip(run(sch.mod, inputs, target), expected):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5, err_msg=f"{target}, trace:\n{sch.trace}")
    verify_trace_roundtrip(sch)


def test_rfactor_under_a_loop_fused_from_spatial_and_reduction_axes_is_rejected():
    """A trace found by the property below: after fusing the spatial x with the reduction rc,
    rfactor made the fused loop a reduction axis of Y_rf that also fed its spatial x, so Y_rf's
    init ran only where the fused loop was 0 and most of Y_rf was read uninitialised. rfactor
    now refuses such a nest and changes nothing; the rest of the trace stays correct."""
    sch = Schedule(te.create_prim_func(conv2d()))
    b0 = sch.get_block(name="Y")
    l0, l1, l2, l3, l4, l5, l6 = sch.get_loops(b0)
    sch.annotate(l4, key="pragma_auto_unroll_max_step", value=16)
    b1 = sch.get_block(name="P")
    l7, l8, l9, l10 = sch.get_loops(b1)
    sch.parallel(l9)
    b2 = sch.get_block(name="Y")
    l11, l12, l13, l14, l15, l16, l17 = sch.get_loops(b2)
    sch.fuse(l14, l15)
    b3 = sch.get_block(name="Y")
    l19, l20, l21, l22, l23, l24 = sch.get_loops(b3)
    before = sch.mod
    with pytest.raises(ScheduleError, match="x_rc_fused runs over both a spatial and a reduction axis of 'Y'"):
        sch.rfactor(l24, factor_axis=0)
    assert sch.mod is before
    b5 = sch.get_block(name="P")
    sch.cache_read(b5, read_buffer_index=0, storage_scope="local")
    check_against_unscheduled(sch, conv2d(), seed=0)


def test_rfactor_of_conv2d_without_fusion_is_accepted():
    """The rejection above is about the fused loop only: the same rfactor on the unfused nest,
    with the factored loop moved out over the spatial ones, computes the convolution."""
    sch = Schedule(te.create_prim_func(conv2d()))
    _, _, _, _, _, _, rx = sch.get_loops(sch.get_block("Y"))
    rf = sch.rfactor(rx, factor_axis=0)
    sch.cache_read(sch.get_block("P"), read_buffer_index=0, storage_scope="local")
    _, f, y, x, rc, ry, rx = sch.get_loops(rf)
    sch.reorder(f, rx, y, x, rc, ry)  # rx is data parallel in the partial results
    check_against_unscheduled(sch, conv2d(), seed=1)



def test_reverse_compute_at_ahead_of_a_decomposed_init_is_rejected():
    """A trace found by the property below: after decompose_reduction, moving the sum S under E's
    loop put its updates ahead of S_init, which then zeroed the sums (Y = E / 0 = inf). The
    update's read of S is left out of its regions, so reverse_compute_at did not see the
    dependence; it now refuses and changes nothing. Without the decomposition the move is fine."""
    sch = Schedule(te.create_prim_func(softmax()))
    b0 = sch.get_block(name="S")
    l0, l1 = sch.get_loops(b0)
    sch.decompose_reduction(b0, loop=l0)
    b2 = sch.get_block(name="S")
    b3 = sch.get_block(name="E")
    l4, l5 = sch.get_loops(b3)
    before = sch.mod
    with pytest.raises(ScheduleError, match="'S_init' writes S before block 'S' does but not before loop i"):
        sch.reverse_compute_at(b2, loop=l4)
    assert sch.mod is before
    check_against_unscheduled(sch, softmax(), seed=2)

    sch = Schedule(te.create_prim_func(softmax()))
    i, _ = sch.get_loops(sch.get_block("E"))
    sch.reverse_compute_at(sch.get_block("S"), loop=i)
    check_against_unscheduled(sch, softmax(), seed=3)



def test_cache_write_of_a_tensor_cached_for_reading_is_rejected():
    """A trace found by the property below: cache_read(Y) made P_local under P's loop; a
    cache_write of P named its buffer and copy block P_local as well, took the first P_local for
    itself when looking for P's readers in that loop, and so put the copy into P after the loop,
    after P_local had read P (garbage in C). A name in use is now refused and nothing changes."""
    sch = Schedule(te.create_prim_func(conv2d()))
    sch.cache_read(sch.get_block(name="Y"), read_buffer_index=0, storage_scope="local")
    _, l16, l17, l18 = sch.get_loops(sch.get_block(name="P"))
    sch.reorder(l16, l18, l17)
    _, _, l25, _ = sch.get_loops(sch.get_block(name="P"))
    sch.reverse_compute_at(sch.get_block(name="P_local"), loop=l25)
    before = sch.mod
    with pytest.raises(ScheduleError, match="a block or buffer named 'P_local' exists already"):
        sch.cache_write(sch.get_block(name="P"), write_buffer_index=0, storage_scope="local")
    assert sch.mod is before
    sch.cache_write(sch.get_block(name="P"), write_buffer_index=0, storage_scope="global")
    l38, l39, l40, l41, l42, l43, l44 = sch.get_loops(sch.get_block(name="Y"))
    sch.parallel(l38)
    sch.fuse(l41, l42)
    check_against_unscheduled(sch, conv2d(), seed=4)


def test_compute_root_of_a_read_cache_whose_producer_shares_its_readers_nest_is_rejected():
    """C computed at D's row loop, then C's local copy for D computed at the root: the copy would
    have to follow C's updates and precede D's reads, both inside the one row loop, so no top-level
    place is right (it went before the loop, reading C unwritten)."""
    sch = Schedule(te.create_prim_func(gemm()))
    sch.compute_at(sch.get_block("C"), sch.get_loops(sch.get_block("D"))[0])
    sch.decompose_reduction(sch.get_block("C"), sch.get_loops(sch.get_block("C"))[0])
    sch.cache_read(sch.get_block("D"), 0, "local")
    before = sch.mod
    with pytest.raises(ScheduleError, match="compute_root: block 'C_local' reads C"):
        sch.compute_root(sch.get_block("C_local"))
    assert sch.mod is before
    check_against_unscheduled(sch, gemm(), seed=5)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(WORKLOADS)), data=st.data())
def test_random_legal_schedules_keep_results_interpreter(name, data):
    check_random_schedule(name, data, "python", steps=8)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(WORKLOADS)), data=st.data())
def test_random_legal_schedules_keep_results_c(name, data):
    check_random_schedule(name, data, "c", steps=8)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(WORKLOADS)), data=st.data())
def test_illegal_directives_raise(name, data):
    """Parallelizing or vectorizing a loop over a reduction axis, reusing a consumed loop, and
    computing a block at a loop of its own nest are always rejected, after any legal prefix."""
    sch = Schedule(te.create_prim_func(WORKLOADS[name]()))
    for _ in range(data.draw(st.integers(0, 4))):
        with contextlib.suppress(ScheduleError):
            apply_random(sch, data)
    reductions = [r for r in sch.all_realizes() if r.block.is_reduction]
    illegal = data.draw(st.sampled_from(["parallel_reduce", "consumed", "own_loop"]))
    if illegal == "parallel_reduce" and reductions:
        r = data.draw(st.sampled_from(reductions))
        b = sch.get_block(r.block.name)
        rvars = {v for iv, val in zip(r.block.iter_vars, r.iter_values) if iv.kind == "reduce"
                 for v in ember.tir.functor.free_vars(val)}
        cands = [lp for lp in sch.get_loops(b) if sch.loop_var(lp) in rvars]
        if cands:
            lp = data.draw(st.sampled_from(cands))
            verb = data.draw(st.sampled_from([sch.parallel, sch.vectorize]))
            before = sch.mod
            try:
                verb(lp)
            except ScheduleError as e:
                assert "reduction axis" in str(e)
                assert sch.mod is before
            else:
                raise AssertionError("a loop over a reduction axis was parallelized/vectorized")
    elif illegal == "consumed":
        b = sch.get_block(data.draw(st.sampled_from([r.block.name for r in sch.all_realizes()])))
        lp = sch.get_loops(b)[0]
        if isinstance(sch.get_for(lp), For) and not (isinstance(sch.get_for(lp).extent, ember.tir.expr.Const)
                                                     and sch.get_for(lp).extent.value < 2):
            sch.split(lp, factors=[None, 2])
            try:
                sch.unroll(lp)
            except ScheduleError as e:
                assert "consumed by split" in str(e)
            else:
                raise AssertionError("a consumed loop was accepted")
    else:
        r = data.draw(st.sampled_from(sch.all_realizes()))
        b = sch.get_block(r.block.name)
        loops = sch.get_loops(b)
        if loops:
            try:
                sch.compute_at(b, data.draw(st.sampled_from(loops)))
            except ScheduleError:
                pass
            else:
                raise AssertionError("compute_at to one of the block's own loops was accepted")

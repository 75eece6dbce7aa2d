"""Property-based tests: random sequences of schedule directives on GEMM, conv2d and softmax.

Each drawn directive is either rejected with a ScheduleError (leaving the schedule unchanged)
or accepted; whatever was accepted must compute what the unscheduled function computes, and
its trace must replay to the same function. Directives known to be illegal must be rejected.
"""

import contextlib

import numpy as np
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

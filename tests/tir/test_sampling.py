"""Sampling primitives: decisions recorded in the trace, exact replay, replay with a changed
decision, seeds."""

import numpy as np
import pytest

import ember
from ember import te
from ember.errors import ScheduleError
from ember.te.to_tir import create_prim_func
from ember.tir.schedule import Schedule, Trace
from ember.tir.schedule.sampling import divisors, random_perfect_tile
from ember.tir.structural import structural_equal


def gemm_func(n=48):
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return create_prim_func([A, B, C])


def sampled(func, seed):
    sch = Schedule(func, seed=seed)
    b = sch.get_block("C")
    i, j, _ = sch.get_loops(b)
    i0, i1, i2 = sch.split(i, sch.sample_perfect_tile(i, n=3, max_innermost_factor=8))
    j0, j1 = sch.split(j, sch.sample_perfect_tile(j, n=2, max_innermost_factor=16))
    sch.annotate(i0, "pragma_auto_unroll_max_step", sch.sample_categorical([0, 16, 64], [0.2, 0.4, 0.4]))
    sch.parallel(sch.sample_loop([i0, i1]))
    sch.vectorize(j1)
    return sch


def run(sch, n=48):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    ember.build(sch, target="python")(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_random_perfect_tile_multiplies_to_extent():
    import random

    rng = random.Random(0)
    for extent in (1, 7, 48, 1024, 1000):
        for n in (2, 3, 4):
            f = random_perfect_tile(rng, extent, n, 16)
            assert len(f) == n and np.prod(f) == extent and f[-1] <= 16
    assert divisors(12) == [1, 2, 3, 4, 6, 12]


def test_decisions_are_recorded_and_replay_exactly():
    func = gemm_func()
    sch = sampled(func, seed=1)
    decisions = sch.trace.decisions()
    assert len(decisions) == 4
    again = Schedule(func)
    Trace.from_json(sch.trace.to_json()).apply_to(again)
    assert structural_equal(again.mod, sch.mod)
    assert again.trace.decisions() == decisions
    run(again)


def test_same_seed_same_schedule_other_seed_other():
    func = gemm_func()
    assert sampled(func, 5).trace.decisions() == sampled(func, 5).trace.decisions()
    assert len({str(sampled(func, s).trace.decisions()) for s in range(8)}) > 1


def test_changed_decision_reaches_every_use():
    func = gemm_func()
    sch = sampled(func, seed=2)
    index = next(k for k, i in enumerate(sch.trace) if i.kind == "sample_perfect_tile")
    mutated = sch.trace.with_decision(index, (3, 2, 8))
    fresh = Schedule(func)
    mutated.apply_to(fresh)
    split = next(i for i in fresh.trace if i.kind == "split")
    assert "factors" in dict(split.inputs)  # the split reads the sampled values
    extents = [f.extent.value for f in fresh.loops_of(fresh.get_block("C"))][:3]
    assert extents == [3, 2, 8]
    run(fresh)
    # a decision left out is sampled anew when replayed
    Trace(sch.trace.with_decision(index, None).instructions).apply_to(Schedule(func, seed=9))


def test_illegal_decisions_are_rejected():
    func = gemm_func()
    sch = Schedule(func)
    i = sch.get_loops(sch.get_block("C"))[0]
    with pytest.raises(ScheduleError, match="not 3 factors of 48"):
        sch.sample_perfect_tile(i, n=3, decision=(2, 2, 2))
    with pytest.raises(ScheduleError, match="innermost factor 48 exceeds 16"):
        sch.sample_perfect_tile(i, n=2, decision=(1, 48))
    with pytest.raises(ScheduleError, match="not an index"):
        sch.sample_categorical([1, 2], [1, 1], decision=2)
    assert len(sch.trace) == 2  # rejected samples leave no instruction


def test_trace_prints_one_element_lists_as_lists():
    """Whether an instruction's outputs are a list comes from the primitive's definition, so a
    one-element list (a one-loop nest, a tiling into one factor) prints as the unpacking a user writes."""
    A = te.placeholder((12,), "float32", name="A")
    B = te.compute((12,), lambda i: A[i] * 2, name="B")
    sch = Schedule(create_prim_func([A, B]), seed=0)
    (i,) = sch.get_loops(sch.get_block("B"))
    (factor,) = sch.sample_perfect_tile(i, n=1)
    sch.vectorize(sch.fuse(*sch.split(i, [None, factor])))
    lines = sch.trace.as_python().splitlines()
    assert lines[0].startswith("b0 = sch.get_block(")
    assert lines[1].startswith("l0, = sch.get_loops(")
    assert lines[2].startswith("v0, = sch.sample_perfect_tile(")
    assert lines[3].startswith("l1, l2 = sch.split(")
    assert lines[4].startswith("l3 = sch.fuse(")

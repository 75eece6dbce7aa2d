"""Measurement: candidates that crash, hang, fail to build or compute a wrong answer are recorded
as failed among good ones, which are measured; the runner stays usable afterwards.

A planted candidate is an impostor task: it claims a real workload's key but computes something
else (reads far out of bounds, loops for minutes, transposes an operand). That is what a
miscompiled schedule looks like to the runner: a kernel for a workload whose outputs, or whose
behaviour, differ from the workload's reference.
"""

import math

import numpy as np
import pytest

from ember import te
from ember.tir.schedule import Trace
from ember.tune import LocalRunner, MeasureInput, MeasureResult, task_from_tensors
from ember.tune.worker import WrongResult, compare, last_level_cache_bytes

N = 64


def gemm(body=lambda A, B, k: lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), extent=N):
    A = te.placeholder((N, N), name="A")
    B = te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, extent), name="k")
    C = te.compute((N, N), body(A, B, k), name="C")
    return task_from_tensors([A, B, C], "gemm")


def impostor(task, body, extent=N):
    fake = gemm(body, extent)
    fake.__dict__["key"] = task.key  # Task.key is a cached property: claim the workload's key
    return MeasureInput(fake, fake.schedule().trace)


def tiled(task):
    sch = task.schedule()
    i, j, k = sch.get_loops(sch.get_block("C"))
    io, ii = sch.split(i, factors=[None, 8])
    jo, ji = sch.split(j, factors=[None, 16])
    sch.reorder(io, jo, k, ii, ji)
    sch.parallel(io)
    sch.vectorize(ji)
    return sch.trace


def test_planted_failures_are_recorded_and_the_good_candidates_measured():
    task = gemm()
    good = MeasureInput(task, tiled(task))
    crash = impostor(task, lambda A, B, k: lambda i, j: te.sum(A[i, k] * B[k + 100_000_000, j], axis=k))
    hang = impostor(task, lambda A, B, k: lambda i, j: te.sum(A[i, j] * B[i, j], axis=k), extent=1 << 30)
    wrong = impostor(task, lambda A, B, k: lambda i, j: te.sum(A[i, k] * B[j, k], axis=k))
    unbuildable = MeasureInput(task, Trace.from_json(good.trace.to_json().replace('"C"', '"missing"')))
    inputs = [good, crash, MeasureInput(task, task.schedule().trace), hang, wrong, unbuildable, good]
    with LocalRunner(workers=2, timeout_s=2.0, repeats=3, min_repeat_s=0.001) as runner:
        results = runner.measure(inputs)
        assert [r.ok for r in results] == [True, False, True, False, False, False, True], [r.error for r in results]
        assert results[1].error.startswith("crashed: signal 11"), results[1].error
        assert results[3].error.startswith("timed out after 2.0 s"), results[3].error
        assert results[4].error.startswith("wrong result: max abs error"), results[4].error
        assert results[5].error.startswith("build failed: ScheduleError"), results[5].error
        assert "missing" in results[5].error
        for r in (results[0], results[2], results[6]):
            assert len(r.latencies_s) == 3 and all(0 < t < 1 for t in r.latencies_s)
            assert r.median_s == sorted(r.latencies_s)[1] and math.isfinite(r.cv)
            assert r.build_s > 0 and r.run_s > 0
        # still usable: the replaced workers build and measure the next batch
        again = runner.measure([good, good, wrong])
        assert [r.ok for r in again] == [True, True, False]


def test_unchecked_runs_time_even_a_wrong_candidate():
    task = gemm()
    wrong = impostor(task, lambda A, B, k: lambda i, j: te.sum(A[i, k] * B[j, k], axis=k))
    with LocalRunner(check=False, flush_cache=False, repeats=2, min_repeat_s=0.001) as runner:
        [result] = runner.measure([wrong])
    assert result.ok and len(result.latencies_s) == 2
    with pytest.raises(RuntimeError, match="closed"):
        runner.measure([wrong])


def test_result_statistics():
    r = MeasureResult((3e-3, 1e-3, 2e-3), None, 0.5, 0.1)
    assert r.ok and r.median_s == 2e-3
    assert r.cv == pytest.approx(np.std([1, 2, 3], ddof=1) / 2)
    failed = MeasureResult((), "crashed: signal 11 (SIGSEGV) while running")
    assert not failed.ok and failed.median_s == math.inf and math.isnan(failed.cv)


def test_comparison_is_relative_to_the_magnitude_of_the_output():
    rng = np.random.default_rng(1)
    ref = (rng.standard_normal((32, 32)) * 100).astype(np.float32)
    close = ref + np.float32(0.05)  # 0.05 off: within 1e-3 + 1e-3 * max|ref| (about 0.3)
    compare([close], [ref], ["C"])
    with pytest.raises(WrongResult, match=r"wrong result: max abs error 1 in C"):
        compare([ref + np.float32(1.0)], [ref], ["C"])
    unwritten = ref.copy()
    unwritten[3, 4] = np.nan
    with pytest.raises(WrongResult, match=r"max abs error inf in C at \(3, 4\)"):
        compare([unwritten], [ref], ["C"])
    ints = rng.integers(-8, 8, size=(16,)).astype(np.int32)
    off = ints.copy()
    off[5] += 1
    with pytest.raises(WrongResult, match=r"at \(5,\)"):
        compare([off], [ints], ["D"])


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="workers >= 1"):
        LocalRunner(workers=0)
    assert last_level_cache_bytes() >= 1 << 20


def test_a_cutoff_times_slow_candidates_by_one_call_and_limits_their_run():
    task = gemm()
    good = MeasureInput(task, tiled(task))
    hang = impostor(task, lambda A, B, k: lambda i, j: te.sum(A[i, j] * B[i, j], axis=k), extent=1 << 30)
    with LocalRunner(workers=1, timeout_s=30.0, repeats=3, min_repeat_s=0.001) as runner:
        limit = runner.run_limit_s(0.001)
        assert 1.0 < limit < 1.1 and runner.run_limit_s(None) == 30.0 and runner.run_limit_s(100.0) == 30.0
        full, screened, stopped = runner.measure([good], cutoff_s=1.0) + \
            runner.measure([good], cutoff_s=0.0) + runner.measure([hang], cutoff_s=0.001)
    assert full.ok and len(full.latencies_s) == 3
    assert screened.ok and len(screened.latencies_s) == 1 and screened.median_s > 0
    assert stopped.error == f"timed out after {limit} s while running"
    assert stopped.run_s < 5.0

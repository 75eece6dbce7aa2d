"""Tuning end to end: a kernel tuned into a database, resumed, its winner applied; a model's
tasks extracted, tuned and compiled with the database; the scheduler and the report."""

import numpy as np
import pytest

import ember
from ember import te
from ember.target import Target
from ember.tir.structural import structural_equal
from ember.tune import Database, LocalRunner, MeasureResult, search
from ember.tune.extract import extract_tasks
from ember.tune.report import plot_tuning_curves, tuning_curve, tuning_report
from ember.tune.scheduler import GradientScheduler
from ember.tune.space import design_space, sample
from ember.tune.tune_model import tune_model
from ember.tune.tuner import tune


def gemm(n=64):
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


@pytest.fixture(scope="module")
def runner():
    with LocalRunner(workers=2, timeout_s=20, repeats=3, min_repeat_s=0.002) as r:
        yield r


@pytest.fixture
def small_search(monkeypatch):
    """A population of 12, not 48, seeded with the 6 best measured, not 16 (so random samples
    still join them): these tests check what the tuner does with the search's proposals (counts,
    database, resuming, stopping), not how good they are, and building and featurizing the
    population is most of a round's time."""
    monkeypatch.setattr(search, "POPULATION", 12)
    monkeypatch.setattr(search, "ELITE", 6)


def test_tune_a_kernel_resume_and_replay(tmp_path, runner, small_search):
    db = Database(tmp_path / "tuning.db")
    best = tune(gemm(), trials=8, database=db, seed=0, runner=runner, batch=4)
    assert np.isfinite(best.latency_s) and best.trials == 8 and best.gflops > 0
    assert [h[0] for h in best.history] == [4, 8]
    records = db.records(best.task.key, Target().key)
    assert len(records) == 9  # 8 trials and the winner, re-measured with its spread
    assert records[-1].trace.to_json() == best.trace.to_json() and np.isfinite(records[-1].cv)
    assert structural_equal(best.task.schedule(records[-1].trace).mod, best.task.schedule(best.trace).mod)
    f = best.build()
    a, b = np.random.default_rng(0).standard_normal((2, 64, 64), dtype=np.float32)
    c = np.empty((64, 64), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    # resuming: the search knows what was measured and measures only new candidates
    more = tune(gemm(), trials=4, database=db, seed=1, runner=runner, batch=4)
    traces = [r.trace.to_json() for r in db.records(best.task.key, Target().key)[:8]]
    new = [r.trace.to_json() for r in db.records(more.task.key, Target().key)[9:13]]
    assert len(new) == 4 and not set(new) & set(traces)
    assert more.trials == 4 and np.isfinite(more.latency_s)


class FlatRunner:
    """Every candidate takes the same time: nothing after the first batch is an improvement."""

    def measure(self, inputs, repeats=None, cutoff_s=None):
        return [MeasureResult((1e-3,)) for _ in inputs]


def test_early_stop_ends_a_search_that_stopped_improving(small_search):
    best = tune(gemm(), trials=100, runner=FlatRunner(), batch=4, early_stop=8)
    assert best.trials == 12 and [h[0] for h in best.history] == [4, 8, 12]
    assert best.latency_s == 1e-3
    # without early_stop the same search runs every trial asked for, past where early_stop=8 ends it
    plain = tune(gemm(), trials=16, runner=FlatRunner(), batch=4)
    assert plain.trials == 16 and [h[0] for h in plain.history] == [4, 8, 12, 16]


class ScriptedRunner:
    """The task's own schedule is timed 5 ms at first (an unlucky timing) and 1 ms when re-measured
    with more repeats; every searched candidate takes 2 ms."""

    def __init__(self, default):
        self.default = default.to_json()

    def measure(self, inputs, repeats=None, cutoff_s=None):
        return [MeasureResult((2e-3,) if i.trace.to_json() != self.default else (1e-3,) if repeats else (5e-3,))
                for i in inputs]


def test_the_winner_and_the_own_schedule_are_re_measured_side_by_side(tmp_path, small_search):
    from dataclasses import replace

    from ember.tune.tuner import TaskTuner

    plain = ember.tune.task_from_tensors(gemm(), "gemm")
    sch = plain.schedule()
    sch.parallel(sch.get_loops(sch.get_block("C"))[0])
    task = replace(plain, default_trace=sch.trace)
    db = Database(tmp_path / "t.db")
    tuner = TaskTuner(task, runner=ScriptedRunner(sch.trace), database=db)
    assert tuner.measure_default() == 5e-3
    tuner.step(4)
    assert tuner.best_latency_s == 2e-3
    result = tuner.result()
    assert result.latency_s == 1e-3 and result.trace.to_json() == sch.trace.to_json()
    assert tuner.baseline_s == 1e-3
    assert db.best(task.key, Target().key).trace.to_json() == sch.trace.to_json()
    assert len(db.records(task.key, Target().key)) == 1 + 4 + 2


def test_compile_applies_the_best_record(tmp_path):
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU()).eval()
    x = torch.randn(4, 32)
    [task] = [t for t in extract_tasks(model, (x,)) if "gemm" in t.name or "matmul" in t.name or "linear" in t.name]
    assert task.weight == 1 and task.default_trace is not None
    sch = sample(task, design_space(task)[0], seed=3)
    db = Database(tmp_path / "t.db")
    db.commit_workload(task, Target().key)
    db.add(task.key, Target().key, sch.trace, MeasureResult((1e-9,), None))
    tuned = ember.compile(model, (x,), database=db)
    plain = ember.compile(model, (x,))
    assert tuned.source != plain.source
    assert "C_local" in tuned.source or "local" in tuned.source
    np.testing.assert_allclose(tuned(x.numpy()), model(x).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_tune_model_spreads_trials_and_reports(tmp_path, runner, small_search):
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).eval()
    x = torch.randn(8, 64)
    db = Database(tmp_path / "m.db")
    report = tune_model(model, (x,), database=db, trials=8, batch=4, runner=runner, progress=False)
    assert report.trials == 8 and len(report.results) >= 2
    assert all(np.isfinite(b) for b in report.baseline_s)
    assert report.estimated_latency_s <= report.estimated_baseline_s * 1.0001
    assert "estimated model latency" in str(report)
    cm = ember.compile(model, (x,), database=db)
    np.testing.assert_allclose(cm(x.numpy()), model(x).detach().numpy(), rtol=1e-4, atol=1e-4)
    text = tuning_report(db)
    assert len(text.splitlines()) == 1 + len(db.workloads())
    png = plot_tuning_curves(db, tmp_path / "curve.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tuning_curve_is_best_so_far():
    class R:
        def __init__(self, t):
            self.ok, self.median_s = t is not None, t if t is not None else float("inf")

    assert tuning_curve([R(None), R(2e-3), R(4e-3), R(1e-3)], 2_000_000) == [0.0, 1.0, 1.0, 2.0]


def test_scheduler_warms_up_then_follows_the_gradient():
    s = GradientScheduler([1, 10], seed=0)
    assert s.next_task() == 0
    s.record(0, 8, 1e-3)
    assert s.next_task() == 1
    s.record(1, 8, 1e-3)
    # task 1 runs ten times per model call: its trials are worth more
    picks = [s.next_task() for _ in range(50)]
    assert picks.count(1) > 40
    assert {s.next_task(exclude={1}) for _ in range(20)} == {0}  # an exhausted task gets no more

"""The tuning database: records round-trip, the best is the fastest that did not fail, a file
resumes where it stopped, targets are kept apart, several processes write at once, and a stored
trace replays to the function that was measured."""

import math
import multiprocessing
import sqlite3

import pytest

import ember
from ember import te
from ember.target import Target
from ember.tir.structural import structural_equal
from ember.tune import Database, MeasureResult, task_from_tensors

TARGET = "c | test CPU | avx2 fma"


def gemm_task():
    A = te.placeholder((64, 64), name="A")
    B = te.placeholder((64, 64), name="B")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return task_from_tensors([A, B, C], "gemm")


def schedules(task):
    """Traces of three different schedules of the task, with the functions they build."""
    out = []
    for factor in (4, 8, 16):
        sch = task.schedule()
        i, j, k = sch.get_loops(sch.get_block("C"))
        io, ii = sch.split(i, factors=[None, factor])
        sch.reorder(io, k, ii, j)
        sch.parallel(io)
        sch.vectorize(j)
        out.append((sch.trace, sch.mod))
    return out


def test_records_round_trip_and_the_best_is_the_fastest_that_did_not_fail():
    task = gemm_task()
    (t4, _), (t8, _), (t16, _) = schedules(task)
    with Database(":memory:") as db:
        db.commit_workload(task, TARGET)
        db.commit_workload(task, TARGET)  # once only
        added = [db.add(task.key, TARGET, t4, MeasureResult((3e-4, 2e-4, 2.5e-4))),
                 db.add(task.key, TARGET, t8, MeasureResult((1e-4, 1.2e-4, 1.1e-4))),
                 db.add(task.key, TARGET, t16, MeasureResult((), "crashed: signal 11 (SIGSEGV) while running"))]
        assert len(db) == 3
        records = db.records(task.key, TARGET)
        assert [r.trace.to_json() for r in records] == [t.to_json() for t in (t4, t8, t16)]
        for record, stored in zip(added, records):
            assert (stored.key, stored.target, stored.latencies_s, stored.error, stored.version) == \
                (record.key, record.target, record.latencies_s, record.error, ember.__version__)
            assert stored.created == record.created
        assert records[0].median_s == 2.5e-4 and records[0].cv == pytest.approx(0.2)
        assert records[2].median_s == math.inf and math.isnan(records[2].cv) and not records[2].ok
        best = db.best(task.key, TARGET)
        assert best.trace.to_json() == t8.to_json() and best.median_s == 1.1e-4
        [workload] = db.workloads()
        assert (workload.key, workload.target, workload.name, workload.flops) == \
            (task.key, TARGET, "gemm", 2 * 64 ** 3)
        assert "axis.R(64" in workload.func


def test_a_re_measurement_supersedes_a_lucky_first_timing():
    task = gemm_task()
    (t4, _), (t8, _), _ = schedules(task)
    with Database(":memory:") as db:
        db.commit_workload(task, TARGET)
        db.add(task.key, TARGET, t4, MeasureResult((1e-4,)))  # lucky
        db.add(task.key, TARGET, t8, MeasureResult((2e-4,)))
        assert db.best(task.key, TARGET).trace.to_json() == t4.to_json()
        db.add(task.key, TARGET, t4, MeasureResult((3e-4, 3e-4, 3.1e-4)))  # re-measured
        assert db.best(task.key, TARGET).trace.to_json() == t8.to_json()
        db.add(task.key, TARGET, t8, MeasureResult((), "timed out after 1.0 s while running"))
        assert db.best(task.key, TARGET).trace.to_json() == t4.to_json()


def test_a_file_resumes_and_keeps_targets_apart(tmp_path):
    task = gemm_task()
    (t4, _), (t8, _), _ = schedules(task)
    path = tmp_path / "tuning.db"
    with Database(path) as db:
        db.commit_workload(task, TARGET)
        db.add(task.key, TARGET, t4, MeasureResult((2e-4,)))
    with Database(path) as db:  # reopened: the records are there, and tuning goes on
        assert len(db) == 1 and db.best(task.key, TARGET).trace.to_json() == t4.to_json()
        db.commit_workload(task, "c | another CPU | sse2")
        db.add(task.key, "c | another CPU | sse2", t8, MeasureResult((1e-4,)))
        db.add(task.key, TARGET, t8, MeasureResult((3e-4,)))
        assert db.best(task.key, TARGET).trace.to_json() == t4.to_json()
        assert db.best(task.key, "c | another CPU | sse2").trace.to_json() == t8.to_json()
        assert db.best(task.key, Target().key) is None
        assert len(db.records(task.key, TARGET)) == 2 and len(db.records(task.key)) == 3
        assert db.best("no such workload", TARGET) is None


def test_stored_traces_replay_to_the_measured_function(tmp_path):
    task = gemm_task()
    with Database(tmp_path / "tuning.db") as db:
        db.commit_workload(task, TARGET)
        for trace, _ in schedules(task):
            db.add(task.key, TARGET, trace, MeasureResult((1e-4,)))
    with Database(tmp_path / "tuning.db") as db:
        for record, (_, mod) in zip(db.records(task.key, TARGET), schedules(task)):
            assert structural_equal(task.schedule(record.trace).mod, mod)


def _add_records(path: str, writer: int, count: int) -> None:
    task = gemm_task()
    trace, _ = schedules(task)[0]
    with Database(path) as db:
        db.commit_workload(task, TARGET)
        for k in range(count):
            db.add(task.key, TARGET, trace, MeasureResult(((writer * 1000 + k + 1) * 1e-6,)))


def test_several_processes_add_to_one_file(tmp_path):
    path = str(tmp_path / "tuning.db")
    context = multiprocessing.get_context("forkserver")
    writers = [context.Process(target=_add_records, args=(path, w, 40)) for w in range(2)]
    for p in writers:
        p.start()
    for p in writers:
        p.join(60)
    assert [p.exitcode for p in writers] == [0, 0]
    with Database(path) as db:
        medians = sorted(r.median_s for r in db.records(gemm_task().key, TARGET))
        assert len(db) == 80 and len(db.workloads()) == 1
        assert medians == pytest.approx(sorted((w * 1000 + k + 1) * 1e-6 for w in range(2) for k in range(40)))


def test_errors_name_what_is_wrong(tmp_path):
    task = gemm_task()
    trace, _ = schedules(task)[0]
    with Database(":memory:") as db, pytest.raises(KeyError, match="commit_workload"):
        db.add(task.key, TARGET, trace, MeasureResult((1e-4,)))
    path = tmp_path / "future.db"
    Database(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(ValueError, match="schema version 99"):
        Database(path)


def test_target_key_names_the_cpu_and_its_simd_features():
    key = Target().key
    assert key == Target().key and key.startswith("c | ")
    features = key.split(" | ")[2].split()
    assert features == sorted(features)
    if Target().vector_bytes >= 32:
        assert "avx" in features or "sve" in features

"""The Ray runner, on a local Ray instance: candidates are built and timed on the node's
workers, a crashing one is recorded as failed, the others are measured."""

import sys

import pytest

from ember import te
from ember.tune import MeasureInput, RayRunner, task_from_tensors

ray = pytest.importorskip("ray")


@pytest.fixture
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()


def gemm(read_b=lambda B, k, j: B[k, j]):
    A = te.placeholder((32, 32), name="A")
    B = te.placeholder((32, 32), name="B")
    k = te.reduce_axis((0, 32), name="k")
    C = te.compute((32, 32), lambda i, j: te.sum(A[i, k] * read_b(B, k, j), axis=k), name="C")
    return task_from_tensors([A, B, C], "gemm")


def test_candidates_are_measured_on_the_cluster(local_ray):
    task = gemm()
    sch = task.schedule()
    i, _, _ = sch.get_loops(sch.get_block("C"))
    sch.parallel(i)
    crash = gemm(lambda B, k, j: B[k + 100_000_000, j])  # an impostor of the workload that segfaults
    crash.__dict__["key"] = task.key
    inputs = [MeasureInput(task, sch.trace), MeasureInput(crash, crash.schedule().trace),
              MeasureInput(task, task.schedule().trace)]
    with RayRunner(timeout_s=5.0, repeats=3, min_repeat_s=0.001) as runner:
        results = runner.measure(inputs)
        assert [r.ok for r in results] == [True, False, True]
        assert results[1].error.startswith("crashed: signal 11"), results[1].error
        assert all(len(r.latencies_s) == 3 and r.median_s > 0 for r in (results[0], results[2]))
        [again] = runner.measure(inputs[:1])
        assert again.ok
    assert ray.is_initialized()  # the runner leaves alone the Ray instance it did not start


def test_a_missing_ray_is_named_with_its_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install ember\[ray\]"):
        RayRunner()

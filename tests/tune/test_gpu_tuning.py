"""Tuning for target "cuda" without a GPU: the GPU sketches (block and thread tiles, shared
staging, vector width, pipeline depth; threads and unrolling of reductions) give candidates that
NVRTC builds and the interpreter with GPU semantics checks; a candidate past the GPU's limits is
recorded invalid and the search goes on; the winner is correct on the interpreter. The runner's
device path (compiler processes, then one device process that checks and times) runs on the
stand-in driver (gpu_stand_in.py); on a GPU it times on device arrays with CUDA events (skipped
here with the reason)."""

import sys
from pathlib import Path

import numpy as np
import pytest

from ember import te
from ember.cuda import schedules
from ember.cuda.launch_shape import launch_dims, threads_per_block
from ember.cuda.limits import check_limits
from ember.errors import ScheduleError
from ember.kernel import lower
from ember.target import GPU, Target
from ember.tune import Database, MeasureInput, Task, search, task_from_tensors, tune
from ember.tune.gpu_features import GPU_FEATURE_LENGTH, gpu_features
from ember.tune.gpu_measure import GPURunner
from ember.tune.gpu_space import gemm_candidate, gpu_design_space
from ember.tune.space import sample
from ember.tune.tuner import TaskTuner

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cuda"))
from gpu_kernels import needs_gpu, needs_nvrtc  # noqa: E402

pytestmark = needs_nvrtc


def matmul(m: int, n: int, k: int):
    A, B = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return task_from_tensors([A, B, C], "matmul")


def test_each_kind_of_task_gets_its_gpu_sketch_and_features():
    A = te.placeholder((4, 300), name="A")
    k = te.reduce_axis((0, 300), name="k")
    rows = task_from_tensors([A, te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="S")], "rows")
    exp = task_from_tensors([A, te.compute((4, 300), lambda i, j: te.exp(A[i, j]), name="E")], "exp")
    for task, name in ((matmul(32, 32, 16), "gpu-gemm"), (rows, "gpu-reduce"), (exp, "gpu-elementwise")):
        [sketch] = gpu_design_space(task)
        assert sketch.name == name
        features = [gpu_features(sample(task, sketch, seed).mod) for seed in range(3)]
        assert all(f.shape == (GPU_FEATURE_LENGTH,) and np.isfinite(f).all() for f in features)
        assert len({f.tobytes() for f in features}) > 1  # the decisions show in the features


@pytest.fixture(scope="module")
def runner():
    with GPURunner(simulate=True) as r:
        yield r


def hand_made(m: int, n: int, k: int, **tiles):
    """The trace of a gemm of these tiles, made by hand (outside the sketch's space)."""
    A, B = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    schedules.gemm(s, A, B, C, **tiles)
    return s.trace


def past_the_limits(m: int, n: int, k: int):
    """A block of 32 x 64 threads, past every GPU's 1024."""
    return hand_made(m, n, k, BM=32, BN=64, BK=4, TM=1, TN=1)


def test_a_candidate_past_the_limits_is_invalid_and_the_others_are_measured(runner):
    task = matmul(64, 64, 16)
    fine = gemm_candidate(task, BM=32, BN=32, BK=16, TM=4, TN=4, stages=2)  # 16 bytes a copy, pipelined
    bad, good = runner.measure([MeasureInput(task, past_the_limits(64, 64, 16)), MeasureInput(task, fine.trace)])
    assert not bad.ok and "ScheduleError" in bad.error and "threads per block" in bad.error
    assert good.ok and good.median_s > 0


def test_blocks_grouped_down_the_columns_compute_the_product():
    task = matmul(64, 64, 16)
    sch = gemm_candidate(task, BM=16, BN=32, BK=8, TM=2, TN=4, stages=2, group=4)
    kernel = task.build(sch.trace, target="cuda")
    assert kernel.grid == (8, 1, 1) and "blockIdx.y" in kernel.source  # 2 columns x 4 rows, 1 group
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((64, 16), np.float32), rng.standard_normal((16, 64), np.float32)
    c = np.full((64, 64), np.nan, np.float32)
    task.build(sch.trace, target="python")(a, b, c)  # the interpreter with GPU semantics
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_the_space_of_a_large_product_holds_the_default_and_leaves_out_what_spills():
    task = matmul(4096, 4096, 4096)
    default = gemm_candidate(task, BM=64, BN=64, BK=16, TM=4, TN=4, stages=2)  # ember.schedules.gpu.matmul's
    assert gemm_candidate(task, BM=128, BN=128, BK=16, TM=8, TN=8, stages=3).trace.decisions()  # 48 KiB
    assert len(default.trace.decisions()) == 8  # BM, BN, BK, TM, TN, stages, group, unroll
    with pytest.raises(ScheduleError, match="legal values"):  # 1024 threads of 64 accumulators each
        gemm_candidate(task, BM=256, BN=256, BK=16, TM=8, TN=8, stages=1)
    with pytest.raises(ScheduleError, match="legal values"):  # 2 x 48 KiB of panels: past the shared memory
        gemm_candidate(task, BM=256, BN=128, BK=32, TM=8, TN=8, stages=2)
    A = te.placeholder((64, 64), name="A")
    exp = task_from_tensors([A, te.compute((64, 64), lambda i, j: te.exp(A[i, j]), name="E")], "exp")
    with pytest.raises(ScheduleError, match="not a float32 product"):
        gemm_candidate(exp, BM=64, BN=64, BK=16, TM=4, TN=4, stages=2)


def test_the_gemm_sketch_draws_within_the_limits_every_gpu_shares():
    task = matmul(128, 64, 32)
    [sketch] = gpu_design_space(task)
    for seed in range(10):
        func = lower(sample(task, sketch, seed), target="cuda")
        dims = launch_dims(func)
        assert 32 <= threads_per_block(dims) <= 1024
        check_limits(func, dims, GPU())  # threads, shared and local memory


def test_the_search_runs_end_to_end_and_its_best_is_correct_on_the_interpreter(runner, monkeypatch):
    monkeypatch.setattr(search, "POPULATION", 4)  # a small search: what is checked is that it runs through
    monkeypatch.setattr(search, "GENERATIONS", 1)
    task = matmul(16, 32, 8)
    result = tune(task, trials=2, batch=2, runner=runner, target=Target("cuda"), seed=1)
    assert result.trials == 2 and np.isfinite(result.latency_s)
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((16, 8), np.float32), rng.standard_normal((8, 32), np.float32)
    c = np.full((16, 32), np.nan, np.float32)
    result.build(target="python")(a, b, c)  # the interpreter with GPU semantics
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    assert "__global__" in result.build(target="cuda").source


def test_without_a_gpu_the_device_runner_records_why_and_replaces_its_device_process():
    from gpu_kernels import gpu_missing

    if gpu_missing() is None:
        pytest.skip("this machine has a GPU")
    task = matmul(16, 16, 8)
    [sketch] = gpu_design_space(task)
    with GPURunner(check=False) as gpu:
        before = gpu._device.process(0)
        [result] = gpu.measure([MeasureInput(task, sample(task, sketch, 0).trace)])
        assert not result.ok and "DeviceError" in result.error
        assert gpu._device.process(0) != before  # its context may be lost: a fresh process for the next


def test_on_the_stand_in_driver_one_device_process_checks_and_times_every_candidate(monkeypatch):
    """Compilers build (no driver touched), one device process holds the reference and times:
    a candidate past the limits and one whose launch fails are invalid and the next is measured;
    a search of 8 trials started from the default, every candidate it measured valid also right
    on the interpreter against NumPy."""
    monkeypatch.setattr(search, "POPULATION", 6)
    monkeypatch.setattr(search, "GENERATIONS", 1)
    plain = matmul(32, 64, 8)
    default = gemm_candidate(plain, BM=16, BN=32, BK=8, TM=2, TN=4, stages=2)
    task = Task(plain.name, plain.func, default_trace=default.trace)
    failing = hand_made(32, 64, 8, BM=16, BN=64, BK=8, TM=2, TN=1)  # 64 x 8 threads: no draw of the sketch's
    monkeypatch.setenv("STAND_IN_FAILING_BLOCK", "64,8,1")  # its launch fails (gpu_stand_in.py)
    with GPURunner(workers=2, repeats=1, min_repeat_s=0.0, device_preload=("gpu_stand_in",)) as gpu:
        inputs = [past_the_limits(32, 64, 8), failing, default.trace]
        bad, lost, good = gpu.measure([MeasureInput(task, trace) for trace in inputs])
        assert not bad.ok and "threads per block" in bad.error
        assert not lost.ok and "CUDA_ERROR_ILLEGAL_ADDRESS" in lost.error
        assert good.ok  # on a fresh device process (its context may be lost), its reference computed again
        device = gpu._device.process(0)
        with Database(":memory:") as db:
            tuner = TaskTuner(task, runner=gpu, database=db, target=Target("cuda"), seed=3)
            assert np.isfinite(tuner.measure_default())
            assert len(tuner.search.measured) == 1  # the default, told to the search
            while tuner.trials < 8:
                assert tuner.step(4) == 4
            records = db.records(task.key, tuner.target)
        assert gpu._device.process(0) == device  # one context for every candidate
    valid = [r for r in records if np.isfinite(r.median_s)]
    assert len(records) == 9 and len(valid) == 9 - sum(tuner.failures.values()) > 1
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((32, 8), np.float32), rng.standard_normal((8, 64), np.float32)
    for record in valid:
        c = np.full((32, 64), np.nan, np.float32)
        plain.build(record.trace, target="python")(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@needs_gpu
def test_on_the_gpu_candidates_are_timed_with_cuda_events():
    task = matmul(256, 256, 64)
    [sketch] = gpu_design_space(task)
    with GPURunner() as gpu:
        results = gpu.measure([MeasureInput(task, sample(task, sketch, seed).trace) for seed in range(4)])
    assert any(r.ok for r in results)
    assert all(r.median_s < 0.01 for r in results if r.ok)

"""Tuning for target "cuda" without a GPU: the GPU sketches (block and thread tiles, shared
staging, vector width, pipeline depth; threads and unrolling of reductions) give candidates that
NVRTC builds and the interpreter with GPU semantics checks; a candidate past the GPU's limits is
recorded invalid and the search goes on; the winner is correct on the interpreter. On a GPU the
runner's workers time on device arrays with CUDA events (skipped here with the reason)."""

import sys
from pathlib import Path

import numpy as np
import pytest

from ember import te
from ember.cuda import schedules
from ember.cuda.codegen import launch_dims, threads_per_block
from ember.cuda.limits import GPULimits, check_limits
from ember.kernel import lower
from ember.target import Target
from ember.tune import MeasureInput, search, task_from_tensors, tune
from ember.tune.gpu_features import GPU_FEATURE_LENGTH, gpu_features
from ember.tune.gpu_measure import GPURunner
from ember.tune.gpu_space import gpu_design_space
from ember.tune.space import apply_sketch, sample

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


def test_a_candidate_past_the_limits_is_invalid_and_the_others_are_measured(runner):
    task = matmul(64, 64, 16)
    [sketch] = gpu_design_space(task)
    A, B = te.placeholder((64, 16), name="A"), te.placeholder((16, 64), name="B")
    r = te.reduce_axis((0, 16), name="r")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    schedules.gemm(s, A, B, C, BM=64, BN=64, BK=4, TM=1, TN=1)  # 64x64 threads a block: a hand-made trace
    # decisions: indices into BM, BN (16, 32, 64), BK (4, ...), TM, TN, vector, stages (unroll sampled)
    fine = apply_sketch(task, sketch, [1, 1, 1, 2, 2, 1, 1])  # 8x8 threads of 4x4, 16 bytes a copy, pipelined
    bad, good = runner.measure([MeasureInput(task, s.trace), MeasureInput(task, fine.trace)])
    assert not bad.ok and "ScheduleError" in bad.error and "threads per block" in bad.error
    assert good.ok and good.median_s > 0


def test_the_gemm_sketch_draws_within_the_limits_every_gpu_shares():
    task = matmul(256, 128, 64)
    [sketch] = gpu_design_space(task)
    for seed in range(40):
        func = lower(sample(task, sketch, seed), target="cuda")
        dims = launch_dims(func)
        assert 32 <= threads_per_block(dims) <= 1024
        check_limits(func, dims, GPULimits("sm_90"))  # threads, shared and local memory


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


def test_without_a_gpu_the_device_runner_records_why_and_replaces_its_worker():
    from gpu_kernels import gpu_missing

    if gpu_missing() is None:
        pytest.skip("this machine has a GPU")
    task = matmul(16, 16, 8)
    [sketch] = gpu_design_space(task)
    with GPURunner(check=False) as gpu:
        before = gpu._pool.process(0)
        [result] = gpu.measure([MeasureInput(task, sample(task, sketch, 0).trace)])
        assert not result.ok and "DeviceError" in result.error
        assert gpu._pool.process(0) != before  # its context may be lost: a fresh process for the next


@needs_gpu
def test_on_the_gpu_candidates_are_timed_with_cuda_events():
    task = matmul(256, 256, 64)
    [sketch] = gpu_design_space(task)
    with GPURunner() as gpu:
        results = gpu.measure([MeasureInput(task, sample(task, sketch, seed).trace) for seed in range(4)])
    assert any(r.ok for r in results)
    assert all(r.median_s < 0.01 for r in results if r.ok)

"""The cost model: features of scheduled kernels (finite, fixed length, deterministic, telling
schedules apart, footprints as counted by hand) and the XGBoost ranking model trained on a
recorded data set (benchmarks/record_cost_data.py), which must rank held-out candidates far
better than random. Features are extracted afresh from the replayed traces, so the data set
outlives changes to the features."""

import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ember.backends.c import CBackend
from ember.errors import ConfigError
from ember.target import Target, as_target
from ember.tir.schedule import Trace
from ember.tune import (
    FEATURE_LENGTH,
    RandomCostModel,
    XGBCostModel,
    extract_features,
    rank_correlation,
    task_from_tensors,
)
from ember.tune.cost_model import normalized_throughput
from ember.tune.features import feature_names

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.record_cost_data import TASKS, gemm, sample_schedule, task_named  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "cost_data.json"
NAMES = feature_names()


def feature(vector, name):
    return float(vector[NAMES.index(name)])


def log2p(x):
    """log2(1 + x) in float32, as the features hold it."""
    return float(np.float32(np.log2(1 + x)))


@pytest.mark.parametrize("name", list(TASKS))
def test_features_are_finite_fixed_length_and_deterministic(name):
    task = task_named(name)
    assert len(NAMES) == len(set(NAMES)) == FEATURE_LENGTH
    vectors = [extract_features(task.schedule())]
    for seed in range(3):
        sch = sample_schedule(task, seed)
        f = extract_features(sch.mod)
        replayed = extract_features(task.schedule(Trace.from_json(sch.trace.to_json())))
        assert f.dtype == np.float32 and f.shape == (FEATURE_LENGTH,) and np.isfinite(f).all()
        np.testing.assert_array_equal(f, replayed)
        vectors.append(f)
    assert len({v.tobytes() for v in vectors}) == len(vectors)


def gemm_schedule(n: int, vectorize: bool):
    task = task_from_tensors(gemm(n), "gemm")
    sch = task.schedule()
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, k, i1, j1)
    sch.reverse_compute_at(sch.cache_write(block, 0, "local"), j0)
    sch.parallel(i0)
    if vectorize:
        sch.vectorize(j1)
    return sch


def test_vectorized_and_scalar_schedules_differ():
    vec, scalar = (extract_features(gemm_schedule(64, v)) for v in (True, False))
    assert not np.array_equal(vec, scalar)
    assert feature(vec, "store0.vector_lanes") == log2p(16) and feature(vec, "store0.vector_innermost") == 1
    assert feature(scalar, "store0.vector_lanes") == log2p(1) and feature(scalar, "store0.vector_innermost") == 0


def test_footprints_strides_and_reuse_of_a_tiled_gemm():
    n = 64
    f = extract_features(gemm_schedule(n, True))
    # the most expensive store: C_local[4 x 16 tile] += A[i, k] * B[k, j] in loops i0, j0, k, i1, j1
    assert feature(f, "store0.iterations") == log2p(n**3)
    assert feature(f, "store0.float_fma") == log2p(n**3)
    assert feature(f, "store0.parallel_extent") == log2p(n // 4)
    assert feature(f, "store0.accumulates") == 1
    # the accumulator: a local 4 x 16 tile, read and written at every iteration
    assert feature(f, "store0.write.local") == 1 and feature(f, "store0.write.reads") == 1
    assert feature(f, "store0.write.bytes") == log2p(2 * n**3 * 4)
    assert feature(f, "store0.write.unique_bytes") == log2p(4 * 16 * 4)
    assert feature(f, "store0.write.contiguous") == 1
    # reused across k: 64 elements (4 x 16) between two uses, the whole tile of all three buffers
    assert feature(f, "store0.write.reuse_count") == log2p(n)
    assert feature(f, "store0.write.reuse_distance_iterations") == log2p(4 * 16)
    assert feature(f, "store0.write.reuse_distance_bytes") == log2p((4 * 16 + 4 + 16) * 4)
    # A[i, k] does not move along the vectorized j1 (broadcast), B[k, j] does (contiguous);
    # both are read whole (n * n elements, 64 bytes a line), each element n times
    reads = {feature(f, f"store0.read{k}.broadcast"): k for k in (0, 1)}
    b = f"store0.read{reads[0]}"
    assert feature(f, f"{b}.contiguous") == 1 and feature(f, f"{b}.stride") == log2p(1)
    for buf in (f"store0.read{k}" for k in (0, 1)):
        assert feature(f, f"{buf}.unique_bytes") == log2p(n * n * 4)
        assert feature(f, f"{buf}.unique_lines") == log2p(n * n * 4 // 64)
        assert feature(f, f"{buf}.reuse_ratio") == pytest.approx(log2p(n))
    assert feature(f, "func.flops") == log2p(2 * n**3)


def test_sliding_window_footprint_counts_the_halo():
    from ember import te

    A = te.placeholder((1, 64), name="A")
    r = te.reduce_axis((0, 3), name="r")
    B = te.compute((1, 62), lambda i, j: te.sum(A[i, j + r], axis=r), name="B")
    f = extract_features(task_from_tensors([A, B]).schedule())
    assert feature(f, "store0.accumulates") == 1
    assert feature(f, "store0.read0.unique_bytes") == log2p(64 * 4)  # A[j + r]: 62 + 3 - 1 elements


def test_rank_correlation_is_spearman_with_ties_averaged():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 6, 200).astype(float)
    latencies = rng.integers(1, 8, 200) * 1e-3
    expected = scipy_stats.spearmanr(scores, 1 / latencies).statistic
    assert rank_correlation(scores, latencies) == pytest.approx(expected, abs=1e-12)
    lat = np.array([1.0, 2.0, np.inf, 4.0])
    assert rank_correlation([4, 3, 1, 2], lat) == pytest.approx(1.0)  # the failed one ranks last
    assert rank_correlation([1, 2, 4, 3], lat) == pytest.approx(-1.0)
    assert rank_correlation([1, 1, 1, 1], lat) == 0.0


def test_normalized_throughput_and_bad_input():
    t = normalized_throughput([2.0, 1.0, np.inf, 5.0, 10.0], ["a", "a", "a", "b", "b"])
    np.testing.assert_allclose(t, [0.5, 1.0, 0.0, 1.0, 0.5])
    model = XGBCostModel()
    with pytest.raises(ValueError, match="latencies must be positive"):
        model.update([np.zeros(4)] * 2, [1.0, -1.0], ["a", "a"])
    with pytest.raises(ValueError, match="must match"):
        model.update([np.zeros(4)] * 2, [1.0], ["a", "a"])
    np.testing.assert_array_equal(model.predict([np.zeros(4)] * 3), np.zeros(3))


def test_missing_xgboost_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "xgboost", None)
    with pytest.raises(ImportError, match=r"pip install ember\[tune\]"):
        XGBCostModel().update([np.ones(4), np.zeros(4)], [1.0, 2.0], ["a", "a"])


@pytest.fixture(scope="module")
def recorded():
    """(features, latencies, task names) of the recorded candidates, features extracted from
    the replayed traces."""
    data = json.loads(DATA.read_text())
    features, latencies, groups = [], [], []
    start = time.perf_counter()
    for entry in data["tasks"]:
        task = task_named(entry["name"])
        for trace, latency in entry["candidates"]:
            features.append(extract_features(task.schedule(Trace.from_json(json.dumps(trace)))))
            latencies.append(np.inf if latency is None else latency)
            groups.append(entry["name"])
    seconds = time.perf_counter() - start
    print(f"\nreplayed and extracted {len(features)} candidates in {seconds:.1f} s")
    return np.stack(features), np.array(latencies), np.array(groups)


def held_out_correlations(model, recorded, seed=0):
    """Trained on a random 70% of the candidates: Spearman's rho on the other 30%, per task."""
    x, lat, groups = recorded
    rng = np.random.default_rng(seed)
    train = rng.random(len(lat)) < 0.7
    model.update(list(x[train]), list(lat[train]), list(groups[train]))
    scores = model.predict(list(x[~train]))
    return {str(g): rank_correlation(scores[groups[~train] == g], lat[~train][groups[~train] == g])
            for g in np.unique(groups)}


def test_xgboost_ranks_held_out_candidates_far_better_than_random(recorded):
    learned = held_out_correlations(XGBCostModel(seed=0), recorded)
    random = held_out_correlations(RandomCostModel(seed=0), recorded)
    print("rank correlation on held-out candidates, XGBCostModel:",
          {k: round(v, 3) for k, v in learned.items()}, "RandomCostModel:", {k: round(v, 3) for k, v in random.items()})
    assert min(learned.values()) > 0.5
    assert max(abs(v) for v in random.values()) < 0.35


def test_update_and_predict_are_fast_and_save_load_round_trips(recorded, tmp_path):
    x, lat, groups = recorded
    rng = np.random.default_rng(1)
    pick = rng.choice(len(lat), size=500, replace=len(lat) < 500)
    model = XGBCostModel(seed=0)
    start = time.perf_counter()
    model.update(list(x[pick]), list(lat[pick]), list(groups[pick]))
    update_s = time.perf_counter() - start
    many = list(x[rng.choice(len(lat), size=1000)])
    start = time.perf_counter()
    scores = model.predict(many)
    predict_s = time.perf_counter() - start
    print(f"\nupdate on 500: {update_s:.3f} s, predict 1000: {predict_s:.3f} s")
    assert update_s < 2 and predict_s < 2
    assert scores.shape == (1000,) and np.isfinite(scores).all()
    model.save(tmp_path / "model")
    loaded = XGBCostModel().load(tmp_path / "model")
    np.testing.assert_array_equal(loaded.predict(many), scores)
    loaded.update(list(x[:10]), list(lat[:10]), list(groups[:10]))  # retrains on the saved data and the new
    assert len(loaded.latencies) == 510


def test_heap_allocations_are_counted_past_the_backend_s_stack_limit(monkeypatch):
    sch = gemm_schedule(64, True)  # its accumulator: a local 4 x 16 float32 tile, 256 bytes
    on_stack = extract_features(sch)
    rules = as_target("c").backend.tuner
    monkeypatch.setattr(CBackend, "tuner", dataclasses.replace(rules, stack_limit=255))
    on_heap = extract_features(sch)
    # allocated once per (i0, j0) tile: 16 x 4 times
    assert feature(on_stack, "func.heap_allocations") == 0
    assert feature(on_heap, "func.heap_allocations") == log2p(16 * 4)
    with pytest.raises(ConfigError, match="target 'python' is not tuned"):
        extract_features(sch, Target("python"))

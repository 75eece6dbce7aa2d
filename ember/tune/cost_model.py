"""Cost models: predict which candidate schedules run fastest from their features
(ember.tune.features), so that the search measures only the promising ones.

A model learns from every measurement so far (`update`) and scores new candidates (`predict`:
higher is predicted faster). Scores only rank the candidates of one task: what is learned is
the order of candidates within a task (each task's latencies are normalized by its fastest
candidate), which carries over between tasks of different sizes where absolute times do not.
`rank_correlation` says how well a model ranks measured candidates.
"""

from __future__ import annotations

import json
from typing import Protocol

import numpy as np


class CostModel(Protocol):
    def update(self, features: list[np.ndarray], latencies_s: list[float], groups: list[str]) -> None:
        """Learn from measured candidates: their features, latencies (inf: failed) and the key
        of the task each belongs to."""

    def predict(self, features: list[np.ndarray]) -> np.ndarray:
        """A score per candidate, higher for faster; comparable within one task."""


def _xgboost():
    try:
        import xgboost
    except ImportError as e:
        raise ImportError("XGBCostModel needs xgboost; install it with `pip install ember[tune]`") from e
    return xgboost


def normalized_throughput(latencies_s, groups) -> np.ndarray:
    """Per candidate: the fastest latency of its group divided by its own (1 for the fastest),
    0 for a failed candidate (an infinite latency)."""
    lat = np.asarray(latencies_s, dtype=np.float64)
    if np.isnan(lat).any() or (lat <= 0).any():
        raise ValueError("latencies must be positive (inf for a failed candidate)")
    groups = np.asarray(groups)
    out = np.zeros(len(lat))
    for g in np.unique(groups):
        members = groups == g
        finite = members & np.isfinite(lat)
        if finite.any():
            out[finite] = lat[finite].min() / lat[finite]
    return out


class XGBCostModel:
    """Gradient-boosted trees (xgboost) with a pairwise ranking objective: each task is a query
    group, ranked by normalized throughput. Retrained from all the data on every update, with
    a capped number of rounds (3000 samples train in under a second). One
    thread by default: training overlaps the measurements, and on a busy machine OpenMP
    threads waiting for each other made it twenty times slower."""

    def __init__(self, seed: int = 0, rounds: int = 60, max_depth: int = 6, learning_rate: float = 0.2,
                 nthread: int = 1):
        self.params = {"seed": seed, "rounds": rounds, "max_depth": max_depth, "learning_rate": learning_rate,
                       "nthread": nthread}
        self.features = np.zeros((0, 0), dtype=np.float32)
        self.latencies = np.zeros(0)
        self.groups = np.zeros(0, dtype=str)
        self.booster = None

    def update(self, features: list[np.ndarray], latencies_s: list[float], groups: list[str]) -> None:
        if not len(features) == len(latencies_s) == len(groups):
            raise ValueError(f"update: {len(features)} feature vectors, {len(latencies_s)} latencies and "
                             f"{len(groups)} groups; they must match")
        if not len(features):
            return
        x = np.stack([np.asarray(f, dtype=np.float32) for f in features])
        normalized_throughput(latencies_s, groups)  # checks the latencies
        if self.features.size and x.shape[1] != self.features.shape[1]:
            raise ValueError(f"update: feature vectors of length {x.shape[1]}, the model has {self.features.shape[1]}")
        self.features = np.concatenate([self.features, x]) if self.features.size else x
        self.latencies = np.concatenate([self.latencies, np.asarray(latencies_s, dtype=np.float64)])
        self.groups = np.concatenate([self.groups, np.asarray(groups, dtype=str)])
        self._train()

    def _train(self) -> None:
        xgb = _xgboost()
        _, qid = np.unique(self.groups, return_inverse=True)
        order = np.argsort(qid, kind="stable")  # xgboost wants each query group contiguous
        labels = normalized_throughput(self.latencies, self.groups)
        p = self.params
        # the matrix built on the model's threads too (by default xgboost's OpenMP takes every core
        # for it, beside the OpenMP runtimes of torch and of ember's kernels in the same process)
        data = xgb.DMatrix(self.features[order], label=labels[order], qid=qid[order], nthread=p["nthread"])
        # pairs drawn at random within each task, 32 per candidate (xgboost's default pairs only
        # the top candidates of a task, and learns less about the middle, which the search must
        # also sort); 32 bins per feature: as good as 256 here, and three times faster
        params = {"objective": "rank:pairwise", "lambdarank_pair_method": "mean", "lambdarank_num_pair_per_sample": 32,
                  "eta": p["learning_rate"], "max_depth": p["max_depth"], "max_bin": 32, "seed": p["seed"],
                  "nthread": p["nthread"], "tree_method": "hist", "verbosity": 0}
        self.booster = xgb.train(params, data, num_boost_round=p["rounds"])

    def predict(self, features: list[np.ndarray]) -> np.ndarray:
        """Scores (higher: predicted faster); all zero before the first update."""
        if self.booster is None or not len(features):
            return np.zeros(len(features))
        x = np.stack([np.asarray(f, dtype=np.float32) for f in features])
        return self.booster.predict(_xgboost().DMatrix(x, nthread=self.params["nthread"])).astype(np.float64)

    def save(self, path) -> None:
        """The trained trees and the data they were trained on (an update after load retrains
        on all of it), in one NumPy .npz file at `path`."""
        booster = np.frombuffer(bytes(self.booster.save_raw("ubj")), dtype=np.uint8) if self.booster else \
            np.zeros(0, dtype=np.uint8)
        with open(path, "wb") as f:
            np.savez_compressed(f, features=self.features, latencies=self.latencies, groups=self.groups,
                                booster=booster, params=np.array(json.dumps(self.params)))

    def load(self, path) -> XGBCostModel:
        """Replace this model by the one saved at `path`; returns it."""
        with np.load(path, allow_pickle=False) as z:
            self.params = json.loads(str(z["params"]))
            self.features, self.latencies, self.groups = z["features"], z["latencies"], z["groups"]
            raw = z["booster"].tobytes()
        self.booster = None
        if raw:
            self.booster = _xgboost().Booster(model_file=bytearray(raw))
            self.booster.set_param({"nthread": self.params["nthread"]})
        return self


class RandomCostModel:
    """Random scores: the baseline a learned model must beat, and pure exploration."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def update(self, features: list[np.ndarray], latencies_s: list[float], groups: list[str]) -> None:
        pass

    def predict(self, features: list[np.ndarray]) -> np.ndarray:
        return self.rng.random(len(features))


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks from 0, ties given the mean of the ranks they span."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def rank_correlation(predicted_scores, measured_latencies) -> float:
    """Spearman's rho between predicted scores and measured throughput (1 / latency, 0 for a
    failed candidate): 1 when the scores order the candidates exactly as measured, about 0 for
    random scores; 0 when either side is constant."""
    scores = np.asarray(predicted_scores, dtype=np.float64)
    lat = np.asarray(measured_latencies, dtype=np.float64)
    if scores.shape != lat.shape or scores.ndim != 1:
        raise ValueError(f"rank_correlation: {scores.shape} scores and {lat.shape} latencies; they must match")
    with np.errstate(divide="ignore"):
        throughput = np.where(np.isfinite(lat), 1.0 / lat, 0.0)
    a, b = _ranks(scores), _ranks(throughput)
    a, b = a - a.mean(), b - b.mean()
    denom = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / denom) if denom > 0 else 0.0

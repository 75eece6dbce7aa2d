"""Calibration: the range [lo, hi] each quantized activation is given, from the values it took on
calibration data. An `Observer` sees every batch of one activation and keeps its exact minimum
and maximum and a sample of at most SAMPLE values (a fixed-size reservoir, so that a few batches
of real-sized inputs cost a bounded memory); `range(method)` then chooses:

- "minmax": the whole range seen;
- "percentile": the `percentile`-th and (100 - `percentile`)-th percentiles of the sample, so that
  a few outliers do not stretch the 256 steps over a mostly empty range;
- "entropy": the range whose 255-step quantization of the sample's histogram (HISTOGRAM bins)
  loses the least information, as the Kullback-Leibler divergence between the histogram clipped
  to the range (the mass outside folded into its edge bins) and the quantized copy of the part
  inside it (TensorRT's calibration: clipping costs the mass it moves, coarse steps the detail
  they merge); candidate ranges shrink the seen range in HISTOGRAM / 128 steps, from the side
  with more room beyond zero.

Every range is widened to hold 0, so that zero (padding, ReLU's floor) is exact.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError

METHODS = ("minmax", "percentile", "entropy")
SAMPLE = 1 << 16
HISTOGRAM = 2048
LEVELS = 256


class Observer:
    def __init__(self, seed: int = 0):
        self.lo, self.hi = np.inf, -np.inf
        self.sample = np.empty(0, np.float32)
        self.seen = 0
        self._rng = np.random.default_rng(seed)

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float32).reshape(-1)
        if x.size == 0:
            return
        self.lo, self.hi = min(self.lo, float(x.min())), max(self.hi, float(x.max()))
        # a reservoir over all batches: each value seen is kept with the same probability
        self.seen += x.size
        keep = min(SAMPLE, self.seen)
        share = int(round(keep * x.size / self.seen))
        old = self.sample[self._rng.permutation(self.sample.size)[:keep - share]] if self.sample.size else self.sample
        new = x[self._rng.choice(x.size, size=min(share, x.size), replace=False)] if share < x.size else x
        self.sample = np.concatenate([old, new])

    def range(self, method: str = "minmax", percentile: float = 99.99) -> tuple[float, float]:
        if self.seen == 0:
            raise ConfigError("calibration saw no values: calibration_data holds no batches")
        if method == "minmax":
            lo, hi = self.lo, self.hi
        elif method == "percentile":
            lo, hi = (float(v) for v in np.percentile(self.sample, [100 - percentile, percentile]))
        elif method == "entropy":
            lo, hi = _entropy_range(self.sample, self.lo, self.hi)
        else:
            raise ConfigError(f"method must be one of {METHODS}, got {method!r}")
        return min(lo, 0.0), max(hi, 0.0)


def _entropy_range(sample: np.ndarray, lo: float, hi: float) -> tuple[float, float]:
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi - lo <= 0:
        return lo, hi
    counts, edges = np.histogram(sample, bins=HISTOGRAM, range=(lo, hi))
    counts = counts.astype(np.float64)
    zero = int(np.clip(np.searchsorted(edges, 0.0) - 1, 0, HISTOGRAM - 1))
    best, best_kl = (0, HISTOGRAM), np.inf
    step = HISTOGRAM // 128
    for shrink in range(0, HISTOGRAM - LEVELS, step):
        # shrink the side with more room beyond zero (a ReLU's output shrinks from the top only)
        below, above = zero, HISTOGRAM - zero
        cut_lo = min(zero, shrink * below // (below + above))
        cut_hi = HISTOGRAM - (shrink - cut_lo)
        if cut_hi - cut_lo < LEVELS:
            break
        kl = _kl(counts, cut_lo, cut_hi)
        if kl < best_kl:
            best, best_kl = (cut_lo, cut_hi), kl
    return float(edges[best[0]]), float(edges[best[1]])


def _kl(counts: np.ndarray, a: int, b: int) -> float:
    """KL(P || Q): P the histogram restricted to bins [a, b) with the mass outside folded into its
    edge bins, Q the bins inside merged into LEVELS - 1 steps and spread back over each step's
    nonzero bins."""
    inside = counts[a:b]
    p = inside.copy()
    p[0] += counts[:a].sum()
    p[-1] += counts[b:].sum()
    q = np.zeros_like(p)
    for g in np.array_split(np.arange(p.size), LEVELS - 1):
        nonzero = inside[g] > 0
        if nonzero.any():
            q[g[nonzero]] = inside[g].sum() / nonzero.sum()
    mask = p > 0
    ps, qs = p[mask] / p.sum(), q[mask] / max(q.sum(), 1.0)
    return float(np.sum(ps * np.log(ps / np.maximum(qs, 1e-12))))  # (an edge bin's folded mass has no q)


def activation_params(lo: float, hi: float) -> tuple[np.float32, int]:
    """(scale, zero point) of asymmetric uint8 over [lo, hi] (which holds 0)."""
    scale = np.float32((hi - lo) / (LEVELS - 1)) if hi > lo else np.float32(1.0)
    zero = int(np.clip(np.rint(-lo / scale), 0, LEVELS - 1))
    return scale, zero


def weight_params(w: np.ndarray, per_channel: bool) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 weights of w (K, N) in [-127, 127]: (weights, float32 scale per column, or
    one for all repeated per column)."""
    top = np.abs(w).max(axis=0) if per_channel else np.full(w.shape[1], np.abs(w).max())
    scale = np.where(top > 0, top / 127, 1.0).astype(np.float32)
    return np.clip(np.rint(w / scale), -127, 127).astype(np.int8), scale

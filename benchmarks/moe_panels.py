"""Mixture-of-experts grouped_matmul (ember.ops.moe) with its expert weights read in place (E, K, N)
and in panels (E, N / P, K, P) as ember.passes.pack_experts packs constant ones: both kernels
built in one process and timed in alternation, round after round (the same load for both), on one
thread by default; the table shows the median over rounds of each round's best run, and the
speed-up. Tokens are routed evenly over the experts (S = tokens x top-k rows, sorted by expert).
Sizes: S x K x N with E experts; Mixtral's full dims (4096 x 14336, 8 experts) and the reduced
ones the suite's hub models use.

    EMBER_NUM_THREADS=1 python benchmarks/moe_panels.py [--rounds 5] [--sizes S,K,N,E ...]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ember.graph.core import TensorType
from ember.ops.moe import expert_panels
from ember.passes.pack_weights import panel_width
from ember.target import Target
from ember.testing import build_op

SIZES = ["256,768,2048,8", "256,2048,768,8", "64,768,2048,8", "16,4096,14336,8", "64,4096,14336,8", "64,14336,4096,8"]


def _best(kernel, inputs, outs, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        kernel(*inputs, *outs)
        best = min(best, time.perf_counter() - start)
    return best


def bench(s: int, k: int, n: int, e: int, rounds: int, repeat: int) -> tuple[float, float, float]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((s, k)).astype("float32")
    w = (rng.standard_normal((e, k, n)) / np.sqrt(k)).astype("float32")
    offsets = np.cumsum(np.full(e, s // e)).astype("int32")
    width = panel_width(s, n, Target().lanes("float32"))
    packed = np.ascontiguousarray(expert_panels(w, width))
    cases = []
    for weights, attrs in ((w, {}), (packed, {"w_panels": width})):
        types = [TensorType(a.shape, str(a.dtype)) for a in (x, weights, offsets)]
        op = build_op("grouped_matmul", types, attrs)
        out = np.empty((s, n), "float32")
        cases.append((op.kernel, [x, weights, offsets], [out]))
    plain, panels = (c[2][0] for c in cases)
    for kernel, inputs, outs in cases:
        kernel(*inputs, *outs)
    err = float(np.abs(plain - panels).max() / np.abs(plain).max())
    times = [[], []]
    for _ in range(rounds):
        for i, (kernel, inputs, outs) in enumerate(cases):
            times[i].append(_best(kernel, inputs, outs, repeat))
    return float(np.median(times[0])), float(np.median(times[1])), err


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", nargs="+", default=SIZES, help="S,K,N,E")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    print(f"{'S x K x N, E':>24} {'in place ms':>12} {'panels ms':>10} {'speed-up':>9} {'max rel diff':>13}")
    for size in a.sizes:
        s, k, n, e = (int(v) for v in size.split(","))
        plain, panels, err = bench(s, k, n, e, a.rounds, a.repeat)
        print(f"{f'{s} x {k} x {n}, {e}':>24} {plain * 1e3:12.2f} {panels * 1e3:10.2f} {plain / panels:9.2f}x "
              f"{err:13.1e}", flush=True)


if __name__ == "__main__":
    main()

"""fp32 GEMM tuned by ember's auto-tuner (no template: the design space comes from the
computation), next to NumPy's BLAS measured in the same process.

    python benchmarks/tune_gemm.py [--sizes 1024 2048] [--trials 1000] [--minutes 15] [--early-stop 256]
                                   [--db gemm.db]

For each size: tune (live progress on stderr), then time the winner and NumPy's BLAS here, in
alternating blocks, medians of repeated runs; report GFLOP/s, the ratio, the trials and the tuning
time, and where that time went. The tuning curves go to a PNG next to the database.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

BLOCKS = 5  # alternating timing blocks of ember and NumPy


def gemm(n: int):
    from ember import te

    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    return [A, B, te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--minutes", type=float, default=15.0, help="time budget per size")
    ap.add_argument("--early-stop", type=int, default=256, help="stop after this many trials without improvement")
    ap.add_argument("--db", default="tune_gemm.db")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    import ember
    from ember.tune import Database
    from ember.tune.report import plot_tuning_curves

    db = Database(args.db)
    rows = []
    for n in args.sizes:
        start = time.perf_counter()
        task = ember.tune.task_from_tensors(gemm(n), f"gemm{n}")
        best = ember.tune.tune(task, trials=args.trials, database=db, seed=args.seed,
                               time_budget_s=args.minutes * 60, early_stop=args.early_stop, progress=True)
        tuning_s = time.perf_counter() - start
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((2, n, n), dtype=np.float32)
        c = np.empty((n, n), np.float32)
        f = best.build()
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-2)
        # alternating blocks of calls, not single calls: BLAS's and OpenMP's worker threads spin
        # for a while after a call and would slow the other's next call
        blocks = [(ember.bench(f, a, b, c, repeat=5).median, ember.bench(np.matmul, a, b, repeat=5).median)
                  for _ in range(BLOCKS)]
        t_ember, t_numpy = (statistics.median(times) for times in zip(*blocks))
        flops = 2 * n**3
        rows.append((n, flops / t_ember / 1e9, flops / t_numpy / 1e9, best.trials, tuning_s, best.time))
    print(f"\n{'size':>6} {'ember GFLOP/s':>14} {'numpy':>8} {'ember/numpy':>12} {'trials':>7} {'tuning s':>9}")
    for n, ge, gn, trials, secs, _ in rows:
        print(f"{n:6d} {ge:14.1f} {gn:8.1f} {ge / gn:12.2f} {trials:7d} {secs:9.0f}")
    for n, *_, spent in rows:
        print(f"  {n}: {spent}")
    png = plot_tuning_curves(db, os.path.splitext(args.db)[0] + "_curve.png")
    print(f"tuning curves: {png}")


if __name__ == "__main__":
    main()

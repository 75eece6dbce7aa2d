"""A zoo model (ResNet-18 by default) tuned by ember within a time budget, then its end-to-end
latency next to untuned ember, torch eager, torch.compile and onnxruntime, each in its own process
(compare.compare_model).

    python benchmarks/tune_model.py [--model resnet18] [--minutes 30] [--trials 3000] [--db resnet18.db]
                                    [--compare-only]

Tuning prints its progress on stderr and a per-task report; the comparison table follows
(best medians of repeated runs; ratio = torch eager latency / latency), and the tuning curves are
written to a PNG next to the database. --compare-only skips tuning and compares with the database as it is.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--trials", type=int, default=3000)
    ap.add_argument("--db", default=None)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compare-only", action="store_true", help="no tuning: compare with the database as it is")
    args = ap.parse_args(argv)
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    import torch

    import ember
    from benchmarks.compare import compare_model
    from benchmarks.models import ZOO
    from ember.tune import Database
    from ember.tune.report import plot_tuning_curves

    torch.set_num_threads(args.threads)
    db = Database(args.db or f"{args.model}.db")
    model, inputs = ZOO[args.model](small=args.small)
    if not args.compare_only:
        report = ember.tune.tune_model(model, inputs, database=db, trials=args.trials,
                                       time_budget_s=args.minutes * 60, seed=args.seed)
        print(report)
    rows = compare_model(args.model, args.small, args.runs, 2, args.threads, ["eager", "inductor", "onnxruntime"],
                         variants={"ember": {}, "ember tuned": {"database": str(db.path)}})
    eager = next(lat for runtime, lat, _, _ in rows if runtime == "torch eager")
    print(f"\n{args.threads} threads, median of {args.runs} runs; ratio = torch eager latency / latency")
    print(f"{'runtime':<14} {'latency ms':>11} {'vs eager':>9}  note")
    for runtime, lat, _, note in rows:
        lat_s, ratio = (f"{lat * 1e3:11.2f}", f"{eager / lat:9.2f}") if lat else (f"{'-':>11}", f"{'-':>9}")
        print(f"{runtime:<14} {lat_s} {ratio}  {note}")
    png = plot_tuning_curves(db, os.path.splitext(db.path)[0] + "_curve.png")
    print(f"tuning curves: {png}")


if __name__ == "__main__":
    main()

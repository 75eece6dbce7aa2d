"""What the graph passes buy on ResNet-18, MobileNetV2 and BERT-base (full size, batch 1): per
model, torch eager and ember at opt_level 0 (no pass, one kernel per operator) and at the highest
level (the pipeline, then fusion), each with its graph's nodes (before and after the pipeline),
its kernels (distinct kernels, and kernel calls per run), the peak workspace of the memory plan
next to the unplanned sum (one buffer per intermediate tensor), and its latency (median of
--runs runs, all in one process). ember's outputs are checked against eager first.

    python benchmarks/passes.py [--models resnet18 bert_base] [--levels 0 3] [--small] [--runs 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.compare import median_latency, timed  # noqa: E402

MODELS = ("resnet18", "mobilenet_v2", "bert_base")
HEADER = (f"{'model':<13} {'runtime':<10} {'nodes':>5} {'kernels':>7} {'calls':>5} {'peak MiB':>9} "
          f"{'unplanned MiB':>13} {'peak/unpl':>9} {'latency ms':>10} {'vs eager':>8} {'compile s':>9}")


def bench_model(name: str, small: bool, levels: list[int], runs: int) -> list[str]:
    """The table's rows for one model: torch eager, then ember at each level."""
    import torch

    import ember
    from benchmarks.models import ZOO
    from ember.frontend.torch import import_module

    model, inputs = ZOO[name](small=small)
    with torch.no_grad():
        expected = model(*inputs).numpy()
        eager = median_latency(lambda: model(*inputs), runs)
    rows = [f"{name:<13} {'eager':<10} {'':>5} {'':>7} {'':>5} {'':>9} {'':>13} {'':>9} {eager * 1e3:10.2f} "
            f"{1:8.2f} {'':>9}"]
    graph = import_module(model, inputs)
    for level in levels:
        runtime = f"ember O{level}"
        try:
            cm, compile_s = timed(partial(ember.compile, graph, opt_level=level))
            np.testing.assert_allclose(cm(*inputs).numpy(), expected, rtol=1e-3, atol=1e-3)
        except Exception as e:  # a benchmark reports what failed and goes on with the other levels
            rows.append(f"{name:<13} {runtime:<10} failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
            continue
        latency = median_latency(partial(cm, *inputs), runs)
        calls = sum(k.calls for k in cm.profile(*inputs, repeat=1).kernels)
        mem = cm.memory
        rows.append(f"{name:<13} {runtime:<10} {cm.stats.nodes:5d} {len(cm.kernels):7d} {calls:5d} "
                    f"{mem.peak_bytes / 2**20:9.2f} {mem.unplanned_bytes / 2**20:13.2f} "
                    f"{mem.peak_bytes / max(mem.unplanned_bytes, 1):9.2f} {latency * 1e3:10.2f} {eager / latency:8.2f} "
                    f"{compile_s:9.1f}")
    return rows


def main(argv=None) -> None:
    from ember.passes import PIPELINES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--levels", nargs="+", type=int, default=[0, max(PIPELINES)])
    ap.add_argument("--small", action="store_true", help="the reduced-size variants (a quick check)")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    print(f"batch 1, {args.threads} threads, median of {args.runs} runs; nodes: after the level's passes; kernels: "
          f"distinct kernels, calls: kernel calls per run; vs eager = torch eager latency / latency")
    print(HEADER)
    for name in args.models:
        for row in bench_model(name, args.small, args.levels, args.runs):
            print(row, flush=True)


if __name__ == "__main__":
    main()

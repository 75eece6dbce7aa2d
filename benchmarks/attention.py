"""scaled_dot_product_attention: ember's kernel next to torch's (F.scaled_dot_product_attention on
the CPU), and next to another checkout of ember (--baseline: e.g. the main branch, to measure a
change of the kernel), at transformer shapes (batch 1, 12 heads, head dim 64 by default).

Each runtime runs in its own process (two OpenMP runtimes' idle threads would slow each other),
one process per runtime and round, the runtimes in turns; a process prints the median of its calls,
the table the median of its rounds, and ratios to ember measured in the same run. Next to the
latency, the process's CPU time per call (all its threads): on a machine shared with other work,
a run with --threads 1 is measured by its CPU time, which the other work does not inflate.

    python benchmarks/attention.py [--seqs 128 1024] [--masks none causal] [--baseline /work/main]
                                   [--heads 12] [--dim 64] [--rounds 3] [--runs 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def inputs(seq: int, heads: int, dim: int, mask: str):
    """q, k, v (1, heads, seq, dim) and the mask arguments of F.scaled_dot_product_attention."""
    import torch

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.rand(1, heads, seq, dim, generator=g) * 2 - 1 for _ in range(3))
    if mask == "bool":
        return (q, k, v, torch.rand(seq, seq, generator=g) < 0.9), False
    if mask == "additive":
        return (q, k, v, torch.rand(1, 1, seq, seq, generator=g) * 2 - 1), False
    return (q, k, v), mask == "causal"


def worker(runtime: str, seq: int, heads: int, dim: int, mask: str, runs: int, threads: int) -> None:
    """Time one runtime in this process; print {"seconds": median} as JSON."""
    os.environ["EMBER_NUM_THREADS"] = str(threads)
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    args, causal = inputs(seq, heads, dim, mask)

    class Attention(torch.nn.Module):
        def forward(self, q, k, v, m=None):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal)

    model = Attention().eval()
    with torch.no_grad():
        expected = model(*args)
    if runtime == "torch":
        def fn():
            with torch.no_grad():
                return model(*args)
    else:
        import numpy as np

        import ember

        cm = ember.compile(model, example_inputs=args)
        arrays = [a.numpy() for a in args]
        np.testing.assert_allclose(cm(*arrays), expected.numpy(), rtol=1e-3, atol=1e-4)
        def fn():
            return cm(*arrays)
    import time

    for _ in range(3):
        fn()
    times, cpu = [], []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    print(json.dumps({"seconds": statistics.median(times), "cpu": statistics.median(cpu)}))


def run_worker(runtime: str, pythonpath: Path, a, seq: int, mask: str) -> tuple[float, float] | None:
    env = dict(os.environ, PYTHONPATH=str(pythonpath), OMP_NUM_THREADS=str(a.threads))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", runtime.split(" ")[0], "--seqs", str(seq),
           "--masks", mask, "--heads", str(a.heads), "--dim", str(a.dim), "--runs", str(a.runs),
           "--threads", str(a.threads)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        print(f"# {runtime} S={seq} {mask}: failed: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["seconds"], result["cpu"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seqs", type=int, nargs="+", default=[128, 1024])
    ap.add_argument("--masks", nargs="+", default=["none", "causal"], choices=["none", "causal", "bool", "additive"])
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--baseline", type=Path, help="another ember checkout, timed as 'baseline'")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--worker", choices=["ember", "torch"], help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker, a.seqs[0], a.heads, a.dim, a.masks[0], a.runs, a.threads)
        return
    runtimes = {"ember": ROOT, "torch": ROOT}
    if a.baseline:
        runtimes["ember baseline"] = a.baseline.resolve()
    print(f"batch 1, {a.heads} heads, head dim {a.dim}, {a.threads} threads; median of {a.runs} calls per process, "
          f"median of {a.rounds} rounds; ratio = latency / ember's")
    print(f"{'seq':>5} {'mask':<8} {'runtime':<15} {'ms':>9} {'GFLOP/s':>8} {'ratio':>6} {'cpu ms':>9} "
          f"{'cpu ratio':>9}")
    for seq in a.seqs:
        for mask in a.masks:
            times: dict[str, list[tuple[float, float]]] = {r: [] for r in runtimes}
            for _ in range(a.rounds):
                for runtime, path in runtimes.items():
                    t = run_worker(runtime, path, a, seq, mask)
                    if t is not None:
                        times[runtime].append(t)
            flops = 4.0 * a.heads * seq * seq * a.dim / (2 if mask == "causal" else 1)
            medians = {r: tuple(statistics.median(x) for x in zip(*ts)) for r, ts in times.items() if ts}
            ember_t, ember_cpu = medians.get("ember", (None, None))
            for runtime in runtimes:
                if runtime not in medians:
                    print(f"{seq:>5} {mask:<8} {runtime:<15} {'-':>9}")
                    continue
                t, c = medians[runtime]
                ratio = f"{t / ember_t:6.2f}" if ember_t else "     -"
                cpu_ratio = f"{c / ember_cpu:9.2f}" if ember_cpu else "        -"
                print(f"{seq:>5} {mask:<8} {runtime:<15} {t * 1e3:9.3f} {flops / t / 1e9:8.1f} {ratio} {c * 1e3:9.3f} "
                      f"{cpu_ratio}", flush=True)


if __name__ == "__main__":
    main()

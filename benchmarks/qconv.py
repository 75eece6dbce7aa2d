"""int8 convolutions with and without their patches written to memory first: ember.quantize's
ResNet-18 compiled twice in one process, once as it is (each 3x3 and 7x7 convolution a qconv
gathering its patches a row tile at a time, ember.passes.gather_patches) and once with that pass
disabled (im2col writes all the patches, then qgemm reads them), both from the same calibration.
Their outputs must agree exactly. Latency: one thread, each call timed by the process's CPU time,
the two taking turns over --rounds rounds, the best median; per kernel: each one's 10th
percentile over --runs profiled runs (cm.profile), the products' kernels listed and
summed by operator.

    python benchmarks/qconv.py [--model resnet18] [--calibration 4] [--runs 50] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--calibration", type=int, default=4)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    os.environ["EMBER_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"
    import ember
    from benchmarks.hub_sweep import cpu_latency
    from benchmarks.models import ZOO
    from benchmarks.quantize import fresh

    model, inputs = ZOO[args.model](small=False)
    rng = np.random.default_rng(0)
    calibration = [fresh(inputs, rng) for _ in range(args.calibration)]
    x = fresh(inputs, rng)
    variants = {
        "gathered (qconv)": ember.quantize(model, inputs, calibration),
        "im2col + qgemm": ember.quantize(model, inputs, calibration, disabled_passes=("gather_patches",)),
    }
    outs = [np.asarray(cm(*x)) for cm in variants.values()]
    np.testing.assert_array_equal(*outs)
    for label, cm in variants.items():
        ops = [n.op for n in cm.graph.nodes]
        print(f"{label}: {ops.count('qconv')} qconv, {ops.count('im2col')} im2col, {ops.count('qgemm')} qgemm")
    best = dict.fromkeys(variants, float("inf"))
    kernels: dict[str, dict[str, float]] = {label: {} for label in variants}
    calls: dict[str, dict[str, int]] = {label: {} for label in variants}
    for _ in range(args.rounds):
        for label, cm in variants.items():
            best[label] = min(best[label], cpu_latency(lambda cm=cm: cm(*x), args.runs))
            prof = cm.profile(*x, repeat=args.runs)
            for k in prof.kernels:
                kernels[label][k.name] = min(kernels[label].get(k.name, float("inf")), k.p10_us)
                calls[label][k.name] = k.calls
    print(f"{args.model} int8, one thread, CPU time per call (best median of {args.rounds} rounds):")
    for label in variants:
        print(f"  {label:18s} {best[label] * 1e3:.2f} ms; sum of kernel p10s {sum(kernels[label].values()):.0f} us")
    for label in variants:
        sums = {op: sum(us for name, us in kernels[label].items() if op in name) for op in ("im2col", "qgemm", "qconv")}
        print(f"  {label}: the products' kernels in run order, p10 us over all calls a run (a kernel that"
              f" layers of one shape share runs once for each); sums " + ", ".join(
                  f"{op} {us:.0f}" for op, us in sums.items() if us))
        for name, us in kernels[label].items():
            if any(op in name for op in sums):
                print(f"    {us:7.1f}  {calls[label][name]}x {name}")


if __name__ == "__main__":
    main()

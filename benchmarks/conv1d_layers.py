"""wav2vec2/HuBERT's convolutional feature encoder layer by layer: each Conv1d (with the GELU
after it) compiled by ember and run by torch eager, one thread, against the machine's fp32 FMA
peak measured in the same run (benchmarks/gemm_lowp.py's throughput loop in vectors of the
target's width). Each time is the best of --runs runs by the thread's own CPU time (on a shared
machine the time a thread waits for its core is not counted), over --rounds alternating rounds.

    python benchmarks/conv1d_layers.py [--samples 16000] [--width 512] [--rounds 3] [--runs 10]

Measured on the project's 2-core AMD EPYC (Zen 5 class, AVX-512), shared, one thread: see the
tables in docs/design.md (the CPU convolutions).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gemm_lowp import FP32_FMA, measure_peak  # noqa: E402

KERNELS, STRIDES = (10, 3, 3, 3, 3, 2, 2), (5, 2, 2, 2, 2, 2, 2)  # wav2vec2's conv_kernel, conv_stride


def cpu_time(f, runs: int) -> float:
    """The best of `runs` calls of f by this thread's CPU time, after one call to warm up."""
    f()
    best = float("inf")
    for _ in range(runs):
        start = time.thread_time()
        f()
        best = min(best, time.thread_time() - start)
    return best


def layers(samples: int, width: int):
    """(name, layer, input) for each convolution of the encoder, and its FLOPs."""
    length, channels = samples, 1
    for k, s in zip(KERNELS, STRIDES):
        out = (length - k) // s + 1
        layer = nn.Sequential(nn.Conv1d(channels, width, k, s, bias=False), nn.GELU()).eval()
        yield f"{channels}->{width} k={k} s={s} L={length}", layer, torch.randn(1, channels, length), \
            2 * channels * width * k * out
        length, channels = out, width


def main() -> None:
    import ember

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=16000)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--runs", type=int, default=10)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    peak = measure_peak(FP32_FMA, 1, cpu_time=True)
    print(f"fp32 FMA peak, one thread: {peak:.0f} GFLOP/s")
    print(f"{'layer':28} {'ember ms':>9} {'eager ms':>9} {'ember GFLOP/s':>14} {'eager GFLOP/s':>14} "
          f"{'ember % peak':>13} {'x eager':>8}")
    total = {"ember": 0.0, "eager": 0.0}
    for name, layer, x, flops in layers(args.samples, args.width):
        cm = ember.compile(layer, (x,))
        cm.num_threads = 1
        xn = x.numpy()
        with torch.no_grad():
            expected = layer(x).numpy()
        err = np.linalg.norm(cm(xn) - expected) / np.linalg.norm(expected)
        assert err < 1e-4, f"{name}: relative error {err:.1e}"
        runs = {"ember": functools.partial(cm, xn), "eager": functools.partial(layer, x)}
        best = {"ember": float("inf"), "eager": float("inf")}
        for _ in range(args.rounds):
            with torch.no_grad():
                for k, f in runs.items():
                    best[k] = min(best[k], cpu_time(f, args.runs))
        for k in total:
            total[k] += best[k]
        rate = {k: flops / t / 1e9 for k, t in best.items()}
        print(f"{name:28} {best['ember'] * 1e3:9.2f} {best['eager'] * 1e3:9.2f} {rate['ember']:14.0f} "
              f"{rate['eager']:14.0f} {100 * rate['ember'] / peak:12.0f}% {best['eager'] / best['ember']:8.2f}",
              flush=True)
    print(f"{'all layers':28} {total['ember'] * 1e3:9.2f} {total['eager'] * 1e3:9.2f} {'':14} {'':14} {'':13} "
          f"{total['eager'] / total['ember']:8.2f}")


if __name__ == "__main__":
    main()

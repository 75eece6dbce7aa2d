"""qgemm, the product of ember's int8 models (ember.ops.quantized: uint8 rows times int8 weights
packed in VNNI's K-groups, int32 sums, float32 scaled output as ember.quantize chains it), against
vpdpbusd's peak measured in the same run (gemm_lowp.measure_peak: independent chains of the
instruction), on one thread timed by its own CPU time (what a shared machine leaves of the
clock). Shapes (M, K, N) of ResNet-18's 3x3 convolutions (M output pixels, K = 9 x input
channels), of MobileNetV2's 1x1 ones, and 1024^3; each result checked against NumPy's integers.

    python benchmarks/qgemm.py [--repeat 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from gemm_lowp import measure_peak  # (this script's folder is on sys.path)

SHAPES = {
    "resnet18 3x3 56x56x64": (3136, 576, 64),
    "resnet18 3x3 28x28x128": (784, 1152, 128),
    "resnet18 3x3 14x14x256": (196, 2304, 256),
    "resnet18 3x3 7x7x512": (49, 4608, 512),
    "mobilenet_v2 1x1 28x28 32->192": (784, 32, 192),
    "mobilenet_v2 1x1 14x14 384->64": (196, 384, 64),
    "mobilenet_v2 1x1 7x7 960->320": (49, 960, 320),
    "1024^3": (1024, 1024, 1024),
}


def cpu_time(run, repeat: int) -> float:
    """The best of `repeat` CPU times of the calling thread per call (several calls a sample)."""
    calls, best = 1, float("inf")
    while True:  # calls per sample: at least 20 ms of it
        start = time.thread_time()
        for _ in range(calls):
            run()
        if time.thread_time() - start > 0.02:
            break
        calls *= 2
    for _ in range(repeat):
        start = time.thread_time()
        for _ in range(calls):
            run()
        best = min(best, (time.thread_time() - start) / calls)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    os.environ["EMBER_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"
    from ember.graph.core import TensorType
    from ember.intrinsics import cpu_has
    from ember.ops.quantized import pack
    from ember.testing import build_op

    if not cpu_has("avx512_vnni"):
        sys.exit("skipped: this CPU has no avx512_vnni (/proc/cpuinfo)")
    peak = measure_peak(1, 1, cpu_time=True)
    print(f"qgemm, float32 output, 1 thread, CPU time, best of {args.repeat}; vpdpbusd's peak here: {peak:.0f} GOP/s")
    print(f"{'shape':<32} {'M x K x N':>18} {'us':>9} {'GOP/s':>8} {'% of peak':>10}")
    rng = np.random.default_rng(0)
    for name, (m, k, n) in SHAPES.items():
        a = rng.integers(0, 256, (m, k), dtype=np.uint8)
        w = rng.integers(-128, 128, (k, n), dtype=np.int8)
        bias = rng.integers(-1000, 1000, n).astype(np.int32)
        scale = rng.uniform(1e-5, 1e-4, n).astype(np.float32)
        ins = [a, pack(w), bias, scale]
        kernel = build_op("qgemm", [TensorType(x.shape, x.dtype.name) for x in ins], {"out_dtype": "float32"})
        out = np.empty((m, n), np.float32)
        run = kernel.kernel.prepare(*ins, out)
        run()
        ref = (a.astype(np.int64) @ w.astype(np.int64) + bias).astype(np.float32) * scale
        np.testing.assert_allclose(out, ref, rtol=1e-6, atol=0)
        t = cpu_time(run, args.repeat)
        rate = 2.0 * m * k * n / t / 1e9
        print(f"{name:<32} {f'{m} x {k} x {n}':>18} {t * 1e6:9.1f} {rate:8.0f} {100 * rate / peak:9.0f}%", flush=True)


if __name__ == "__main__":
    main()

"""bf16 convolutions (ember.ops.conv_bf16) against the fp32 blocked ones, per layer and whole
models, in one process, alternating, the best of many runs (what a shared machine allows):

    python benchmarks/conv_bf16.py [--layers] [--models resnet18 mobilenet_v2] [--runs 200] [--threads 1]

--layers: one kernel per layer shape of ResNet-18 and MobileNetV2 (NCHW16c in and out, bias),
conv2d_nchwc against conv2d_nchwc_bf16 with the tile ember.schedules.cpu.conv_bf16 picks, and
whether ember.passes.bf16_convs would choose bf16 for it. --models: ember.compile in fp32 and in
bf16, their relative error against torch's fp32, and their latencies.

Measured on the project's AMD EPYC (Zen 5 class, AVX512-BF16, no AMX), shared and loaded, best
of 200 (layers, one thread) or 75 (models) runs, us / ms:
    3x3 64->64 at 56x56        bf16 517   fp32 1098      1x1 32->16 at 112x112 (16 a value)   137 / 98
    3x3 256->256 at 14x14      bf16 475   fp32 1066      1x1 192->32 at 28x28 (32 a value)    67 / 72
    3x3 512->512 at 7x7        bf16 503   fp32 1202      1x1 384->64 at 14x14 (64 a value)    52 / 65
    ResNet-18, 2 threads       bf16 16.5  fp32 32.5      MobileNetV2, 2 threads              1.92 / 2.37
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# (input channels, size, output channels, kernel, stride): ResNet-18's, then MobileNetV2's 1x1 ones
LAYERS = [(64, 56, 64, 3, 1), (64, 56, 128, 3, 2), (64, 56, 128, 1, 2), (128, 28, 128, 3, 1), (256, 14, 256, 3, 1),
          (512, 7, 512, 3, 1), (32, 112, 16, 1, 1), (16, 112, 96, 1, 1), (192, 28, 32, 1, 1), (384, 14, 64, 1, 1),
          (96, 14, 576, 1, 1), (960, 7, 320, 1, 1)]


def best(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def layers(runs: int) -> None:
    from ember.graph.core import TensorType
    from ember.ops.conv_bf16 import pack
    from ember.ops.layout import convert_layout
    from ember.passes.bf16_convs import MIN_PRODUCTS
    from ember.testing import build_op, random_array

    rng = np.random.default_rng(0)
    print(f"{'layer':28} {'fp32 us':>9} {'bf16 us':>9}  bf16_convs")
    for c, size, oc, k, stride in LAYERS:
        x = convert_layout(random_array((1, c, size, size), rng=rng), "NCHW", "NCHW16c")
        w = random_array((oc, c, k, k), rng=rng)
        b = random_array((oc,), rng=rng)
        attrs = {"strides": (stride, stride), "padding": (k // 2,) * 4, "dilations": (1, 1), "out_layout": "NCHWc"}
        kernels = {}
        for name, op, weights, extra in (("fp32", "conv2d_nchwc", convert_layout(w, "OIHW", "OIHW16i16o"),
                                          {"groups": 1}), ("bf16", "conv2d_nchwc_bf16", pack(w, 16), {})):
            args = (x, weights, b)
            kernel = build_op(op, [TensorType(a.shape, a.dtype.name) for a in args], {**attrs, **extra})
            kernels[name] = lambda kernel=kernel, args=args: kernel.run(*args)
        us = {name: best(fn, runs) * 1e6 for name, fn in kernels.items()}
        chosen = "bf16" if oc * k * k >= MIN_PRODUCTS * stride * stride else "fp32"
        layer = f"{k}x{k} {c}->{oc} at {size}x{size} s{stride}"
        print(f"{layer:28} {us['fp32']:9.1f} {us['bf16']:9.1f}  {chosen}")


def models(names: list[str], runs: int) -> None:
    import torch

    import ember
    from benchmarks.models import ZOO

    for name in names:
        model, inputs = ZOO[name](small=False)
        with torch.no_grad():
            ref = model(*inputs).numpy()
        compiled = {p: ember.compile(model, example_inputs=inputs, precision=p) for p in ("fp32", "bf16")}
        times = {p: [] for p in compiled}
        for _ in range(max(runs // 5, 1)):
            for p, cm in compiled.items():
                times[p].append(best(lambda cm=cm, inputs=inputs: cm(*inputs), 5))
        for p, cm in compiled.items():
            out = cm(*inputs).numpy()
            error = np.linalg.norm(out - ref) / np.linalg.norm(ref)
            print(f"{name:14} {p}  {min(times[p]) * 1e3:8.2f} ms  ||out - ref|| / ||ref|| {error:.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", action="store_true")
    parser.add_argument("--models", nargs="*", default=[])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    if args.layers or not args.models:
        layers(args.runs)
    models(args.models, args.runs)


if __name__ == "__main__":
    main()

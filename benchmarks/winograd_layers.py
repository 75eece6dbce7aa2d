"""ResNet-18's 3x3 stride-1 convolutions, one kernel each: the blocked direct convolution
(conv2d_nchwc) against Winograd's F(2x2, 3x3) and F(4x4, 3x3) (conv2d_winograd), bias and ReLU
on each, in alternating rounds (the best median of each), and what ember.passes.winograd's rule
picks. The measurements behind that rule.

    python benchmarks/winograd_layers.py [--rounds 3] [--runs 100] [--threads 0] [--layers 64x56 128x28 ...]

Each form's time is the fastest of its runs over all rounds (on a shared machine the fastest run
is the one no other process interrupted). Prints per layer the microseconds of each form, its
GFLOP/s counted as the direct form's 2 * 9 * C * OC * H * W (Winograd's as that count over its
own time: the effective rate), and the rule's choice.

Measured on the project's 2-core AMD EPYC (Zen 5 class, AVX-512), shared and loaded (load average
9-12, so 2-thread figures swing 3x between runs), --threads 1, fastest of 300 runs, microseconds:
    layer          direct    F(2x2)   F(4x4)   rule
    C=64  56x56     1024      542      301     F(4x4)   3.4x
    C=128 28x28      926      441      306     F(4x4)   3.0x
    C=256 14x14      927      410      344     F(4x4)   2.7x
    C=512  7x7      1168      642     1467     F(2x2)   1.8x
    C=16  56x56       68       70       45     F(4x4)   1.5x
    C=128 10x10      129       61       47     F(4x4)   2.7x
    C=512  4x4       566      243     1475     F(2x2)   2.3x
The same by each run's CPU time (median of 60, unaffected by the waits): 1020 / 601 / 322,
990 / 474 / 328, 968 / 465 / 422, 1208 / 783 / 1564.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ember.graph.core import TensorType  # noqa: E402
from ember.ops.layout import convert_layout  # noqa: E402
from ember.passes.winograd import choose_tile  # noqa: E402
from ember.testing import build_op  # noqa: E402
from ember.tir.winograd import pack_weights  # noqa: E402


def kernels(c: int, size: int, block: int = 16):
    """{form: (kernel, input arrays)} for a C -> C 3x3 convolution over a size x size map."""
    rng = np.random.default_rng(0)
    x = convert_layout(rng.standard_normal((1, c, size, size)).astype(np.float32), "NCHW", f"NCHW{block}c")
    w = (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    out = {}
    direct = convert_layout(w, "OIHW", f"OIHW{block}i{block}o")
    types = [TensorType(a.shape, "float32") for a in (x, direct, bias)]
    out["direct"] = build_op("conv2d_nchwc", types, {"padding": (1, 1, 1, 1)}), (x, direct, bias)
    for m in (2, 4):
        u = pack_weights(w, m, block)
        types = [TensorType(a.shape, "float32") for a in (x, u, bias)]
        out[f"F({m}x{m})"] = build_op("conv2d_winograd", types, {"padding": (1, 1, 1, 1), "relu": True}), (x, u, bias)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--threads", type=int, default=0, help="OpenMP threads a call (0: OpenMP's own)")
    parser.add_argument("--layers", nargs="*", default=["64x56", "128x28", "256x14", "512x7"])
    args = parser.parse_args()
    for layer in args.layers:
        c, size = (int(v) for v in layer.split("x"))
        forms = kernels(c, size)
        best = {name: float("inf") for name in forms}
        for _ in range(args.rounds):
            for name, (k, arrays) in forms.items():
                k.kernel.num_threads = args.threads
                run = k.kernel.prepare(*arrays, *[np.empty(t.shape, t.dtype) for t in k.out_types])
                run()
                for _ in range(args.runs):
                    start = time.perf_counter()
                    run()
                    best[name] = min(best[name], time.perf_counter() - start)
        flops = 2 * 9 * c * c * size * size
        row = "  ".join(f"{name} {t * 1e6:7.1f} us ({flops / t / 1e9:5.0f} GFLOP/s)" for name, t in best.items())
        pick = choose_tile(c, c, size, size)
        print(f"C={c:3d} {size:2d}x{size:<2d}  {row}  rule: {'direct' if pick is None else f'F({pick}x{pick})'}",
              flush=True)


if __name__ == "__main__":
    main()

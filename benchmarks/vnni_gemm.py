"""int8 GEMM on AVX512-VNNI through tensorize (ember.intrinsics.vnni: vpdpbusd, u8 x s8 -> s32)
next to ember's fp32 GEMM of the same shape (examples/kernels/gemm.py, packed_gemm) and NumPy's
fp32 BLAS, in one process: medians of --repeat runs, GOP/s as 2 M N K / time, and the ratio of
the int8 kernel's throughput to fp32's. The int8 weights are packed once beforehand (as a
compiled model packs them at compile time); the fp32 schedule packs B inside its kernel. Skipped,
with the reason, on a CPU without avx512_vnni.

    python benchmarks/vnni_gemm.py [--sizes 256 512 1024] [--repeat 10]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from gemm import load_packed_gemm  # (benchmarks/gemm.py: this script's folder is on sys.path)

import ember
from ember.intrinsics import cpu_has, vnni


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    if not cpu_has(vnni.FEATURE):
        sys.exit(f"skipped: this CPU has no {vnni.FEATURE} (/proc/cpuinfo)")
    packed_gemm = load_packed_gemm()
    rng = np.random.default_rng(0)
    print(f"{'size':>6} {'int8 VNNI GOP/s':>16} {'fp32 ember GFLOP/s':>19} {'fp32 NumPy GFLOP/s':>19} "
          f"{'int8 / fp32 ember':>18}")
    for n in args.sizes:
        a = rng.integers(0, 256, (n, n), dtype=np.uint8)
        b = rng.integers(-128, 128, (n, n), dtype=np.int8)
        bp = vnni.pack(b)
        c = np.empty((n, n // 16, 16), np.int32)
        f8 = ember.build(*vnni.gemm(n, n, n), target="c")
        f8(a, bp, c)
        np.testing.assert_array_equal(c.reshape(n, n), a.astype(np.int32) @ b.astype(np.int32))
        af, bf = a.astype(np.float32) / 256, b.astype(np.float32) / 128
        cf = np.empty((n, n), np.float32)
        f32 = ember.build(*packed_gemm(n, n, n), target="c")
        f32(af, bf, cf)
        np.testing.assert_allclose(cf, af @ bf, rtol=1e-4, atol=1e-3)
        t8 = ember.bench(f8, a, bp, c, repeat=args.repeat).median
        t32 = ember.bench(f32, af, bf, cf, repeat=args.repeat).median
        tnp = ember.bench(np.matmul, af, bf, repeat=args.repeat).median
        ops = 2 * n ** 3
        print(f"{n:>6} {ops / t8 / 1e9:>16.1f} {ops / t32 / 1e9:>19.1f} {ops / tnp / 1e9:>19.1f} {t32 / t8:>17.2f}x")


if __name__ == "__main__":
    main()

"""fp32 GEMM: ember's best hand-written CPU schedule next to NumPy's BLAS and torch.matmul.

One process, the same inputs, medians of repeated runs; ratios are ember / peer throughput.
The schedule (examples/gemm.py, packed_gemm): B packed into 32-column panels, an 8x32
accumulator tile in registers (cache_write "local" + compute_at), the reduction loop outside
the unrolled, vectorized tile, the outer loop parallel.

    python benchmarks/gemm.py [--sizes 512 1024 2048] [--threads 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import sys

import numpy as np


def load_packed_gemm():
    path = pathlib.Path(__file__).resolve().parent.parent / "examples" / "gemm.py"
    spec = importlib.util.spec_from_file_location("examples.gemm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.packed_gemm


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args(argv)
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import ember

    try:
        import torch

        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    packed_gemm = load_packed_gemm()
    header = f"{'size':>6} {'ember GFLOP/s':>14} {'numpy':>8} {'torch':>8} {'ember/numpy':>12} {'ember/torch':>12}"
    print(f"fp32 GEMM, {args.threads} threads, median of {args.repeat} runs", file=sys.stderr)
    print(header)
    for n in args.sizes:
        a = np.random.rand(n, n).astype("float32")
        b = np.random.rand(n, n).astype("float32")
        c = np.empty((n, n), "float32")
        f = ember.build(*packed_gemm(n, n, n), target="c")
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3 * n / 256)
        flops = 2.0 * n**3
        t_ember = ember.bench(f, a, b, c, repeat=args.repeat).median
        t_np = ember.bench(np.matmul, a, b, repeat=args.repeat).median
        g = lambda t, flops=flops: flops / t / 1e9  # noqa: E731
        torch_gflops, torch_ratio = "n/a", "n/a"
        if torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            t_torch = ember.bench(torch.matmul, ta, tb, repeat=args.repeat).median
            torch_gflops, torch_ratio = f"{g(t_torch):.1f}", f"{t_torch / t_ember:.2f}"
        print(f"{n:>6} {g(t_ember):14.1f} {g(t_np):8.1f} {torch_gflops:>8} {t_np / t_ember:12.2f} {torch_ratio:>12}")


if __name__ == "__main__":
    main()

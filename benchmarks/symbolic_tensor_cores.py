"""fp16 products on Tensor Cores built once for a symbolic number of tokens (a model compiled with
`dynamic_shapes`), on a GPU: BERT-base's linear layers (tokens as M) and attention's products over
12 heads (q k^T: tokens as M and N; p v: as M and K, its K loop pipelined over a symbolic trip
count) and causal flash attention over 12 heads of 64 (query and key lengths the tokens), each
kernel launched at 128 and 384 tokens (its grid computed per launch) next to the kernel built for
that size and torch fp16 (cuBLAS; torch's fused attention); each checked against torch first,
times the medians of CUDA-event intervals.

    python benchmarks/symbolic_tensor_cores.py [--runs 30] [--tokens 128 384]

Needs a GPU, torch with CUDA, cuda-bindings and NVRTC (benchmarks/gpu_checks.sh runs it as the
step `symbolic`).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# name: (operator, input shapes with "t" for the tokens, attributes, torch's product, multiply-adds at t tokens)
PRODUCTS = {
    "linear 768->3072 +b": ("gemm", (("t", 768), (3072, 768), (3072,)), {"trans_b": True},
                            lambda x, w, b: x @ w.T + b, lambda t: t * 3072 * 768),
    "linear 3072->768 +b": ("gemm", (("t", 3072), (768, 3072), (768,)), {"trans_b": True},
                            lambda x, w, b: x @ w.T + b, lambda t: t * 768 * 3072),
    "q k^T, 12 heads": ("matmul", ((12, "t", 64), (12, 64, "t")), {}, lambda a, b: a @ b, lambda t: 12 * t * t * 64),
    "p v, 12 heads": ("matmul", ((12, "t", "t"), (12, "t", 64)), {}, lambda a, b: a @ b, lambda t: 12 * t * t * 64),
    # the fused kernel: q k^T and p v over the keys up to the diagonal (about half of each)
    "flash attention, 12 heads, causal": ("flash_attention", ((1, 12, "t", 64),) * 3, {"causal": True},
                                          lambda q, k, v: _causal_attention(q, k, v), lambda t: 12 * t * t * 64),
}


def _causal_attention(q, k, v):
    from torch.nn.functional import scaled_dot_product_attention

    return scaled_dot_product_attention(q, k, v, is_causal=True)


def run(runs: int, counts: list[int]) -> list[tuple]:
    import torch
    from cuda_timing import operator_kernel, timed

    from ember.cuda.driver import device

    device().activate()  # (`launch`, unlike a call, expects the context current)
    stream = torch.cuda.current_stream().cuda_stream
    rows = []
    for name, (op, shapes, attrs, torch_fn, macs) in PRODUCTS.items():
        try:
            symbolic = [tuple("tokens" if d == "t" else d for d in s) for s in shapes]
            f, _, build_s = operator_kernel(op, symbolic, "float16", attrs)
            assert "wmma.mma.sync" in f.source, f"{name}: not on Tensor Cores"
            for tokens in counts:
                sized = [tuple(tokens if d == "t" else d for d in s) for s in shapes]
                xs = [torch.randn(s, device="cuda", dtype=torch.float16) / s[-1] ** 0.25 for s in sized]
                expected = torch_fn(*xs)
                y = torch.empty_like(expected)
                pointers = [x.data_ptr() for x in (*xs, y)]
                f.launch(pointers, stream, [tokens])
                torch.testing.assert_close(y, expected, rtol=1e-2, atol=1e-2)
                tflop = 2 * macs(tokens) / 1e12
                label = f"{name}, {tokens} tokens"
                t = timed(lambda f=f, p=pointers, n=tokens: f.launch(p, stream, [n]), runs)
                rows.append((label, f"ember symbolic, grid {f.grid_of([tokens])}", t, tflop / t, build_s))
                static, _, static_s = operator_kernel(op, sized, "float16", attrs)
                static(*xs, y)
                torch.testing.assert_close(y, expected, rtol=1e-2, atol=1e-2)
                t = timed(lambda f=static, xs=xs, y=y: f(*xs, y), runs)
                rows.append((label, f"ember static, grid {static.grid}", t, tflop / t, static_s))
                t = timed(lambda xs=xs, fn=torch_fn: fn(*xs), runs)
                rows.append((label, "torch fp16", t, tflop / t, None))
        except Exception:  # one product's failure must not hide the others'
            print(f"--- {name} failed:")
            traceback.print_exc(limit=6, file=sys.stdout)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--tokens", type=int, nargs="+", default=[128, 384])
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no GPU: torch.cuda.is_available() is False")
        return 1
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = run(args.runs, args.tokens)
    print(f"\n{'product':30} {'implementation':34} {'median us':>10} {'TFLOP/s':>8} {'vs torch':>9} {'build s':>8}")
    for name, impl, t, rate, build_s in rows:
        peer = next((r for r in rows if r[0] == name and r[4] is None), None)
        ratio = f"{rate / peer[3]:.0%}" if peer is not None and build_s is not None else ""
        print(f"{name:30} {impl:34} {t * 1e6:10.1f} {rate:8.1f} {ratio:>9} "
              f"{'' if build_s is None else f'{build_s:.2f}':>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

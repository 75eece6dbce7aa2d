"""GPT-2 small greedy decode with a KV cache: tokens/s of ember, torch eager and transformers'
`generate`, next to the memory-bandwidth bound, each runtime in its own process.

A decode step reads every weight once (the embedding tables but one row each; the LM head, tied to
the token embedding, in full): at batch 1 it is a chain of GEMVs, bound by memory bandwidth. The
bound is copy bandwidth / weight bytes per token, the copy bandwidth measured in the same run
(STREAM's copy: a 256 MiB array copied by torch on --threads threads, read + write bytes counted).
"ember GEMV" is a chain of 12 GPT-2 MLPs (768x3072 and 3072x768 GEMVs, 226 MB of weights, more
than the caches) compiled by ember: its weight bytes per second, against the same copy bandwidth.

Runtimes (benchmarks/models/decode.py): ember runs the prefill and then the step compiled once
with the cache length a symbol, the cache explicit tensors in and out; torch eager runs the same
step module; transformers' generate uses its DynamicCache. All three must give the same greedy
tokens (checked). A first process compiles and saves ember's models; each timing process loads
one runtime only (idle threads of one runtime never slow another) and the runtimes take turns
over --rounds rounds; each figure is the best round's median time per token (prefill excluded:
ember's and eager's loops time each step, generate's is the difference of N tokens and 1).

    python benchmarks/decode.py [--small] [--tokens 64] [--prompt 8] [--rounds 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNTIMES = ("ember", "eager", "generate", "copy", "gemv")


def weight_bytes_per_token(model) -> int:
    """Bytes of weights one decode step reads: every parameter once, but of the position
    embedding only one row (the token embedding is read in full as the tied LM head)."""
    wpe = model.transformer.wpe.weight
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel() * p.element_size()
    return total - wpe.numel() * wpe.element_size() + wpe.shape[1] * wpe.element_size()


def prepare(args, folder: Path) -> dict:
    import torch

    import ember
    from benchmarks.models.decode import compile_decode, ember_generate, gpt2_lm, hf_generate, torch_generate

    model = gpt2_lm(small=args.small)
    prompt = torch.randint(0, model.config.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    start = time.perf_counter()
    prefill, step = compile_decode(model, args.prompt, args.prompt + args.tokens + 1)
    compile_s = time.perf_counter() - start
    tokens = ember_generate(prefill, step, prompt.numpy(), args.tokens)
    same = {"eager": tokens == torch_generate(model, prompt, args.tokens),
            "generate": tokens == hf_generate(model, prompt, args.tokens)}
    prefill.save(folder / "prefill")
    step.save(folder / "step")
    np.save(folder / "prompt.npy", prompt.numpy())
    ember.compile(gemv_chain(), num_threads=args.threads).save(folder / "gemv")
    return {"compile_s": compile_s, "same": same, "bytes": weight_bytes_per_token(model),
            "tokens": tokens, "params": sum(p.numel() for p in model.parameters())}


def gemv_chain(layers: int = 12, d: int = 768):
    """x -> relu(x W1) W2, `layers` times: GPT-2 small's MLP GEMVs, weights out of the caches."""
    from ember.graph.core import Graph, TensorType
    from ember.ops.nodes import add_op

    rng = np.random.default_rng(0)
    g = Graph(name="gemv_chain")
    (x,) = [g.add_input("x", TensorType((1, d)))]
    for k in range(layers):
        w1 = g.add_constant((rng.standard_normal((d, 4 * d)) / 64).astype("float32"), f"w1_{k}")
        w2 = g.add_constant((rng.standard_normal((4 * d, d)) / 64).astype("float32"), f"w2_{k}")
        (h,) = add_op(g, "gemm", [x, w1])
        (h,) = add_op(g, "relu", [h])
        (x,) = add_op(g, "gemm", [h, w2])
    g.set_outputs([x])
    return g


def per_token(run, tokens: int, repeat: int, timed_steps: bool) -> float:
    """Seconds per decode step, the prefill excluded: the median of the steps' own times where the
    loop times each step (`timed_steps`: run(n, times)), else the difference of the medians of
    generating `tokens` tokens and 1 token, over (tokens - 1)."""
    if timed_steps:
        times: list[float] = []
        for _ in range(repeat):
            run(tokens, times)
        return statistics.median(times)
    whole, one = [], []
    for _ in range(repeat):
        for n, into in ((1, one), (tokens, whole)):
            t = time.perf_counter()
            run(n, None)
            into.append(time.perf_counter() - t)
    return (statistics.median(whole) - statistics.median(one)) / (tokens - 1)


def worker(args, folder: Path) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    if args.worker == "copy":
        src = torch.rand(64 * 2**20)
        dst = torch.empty_like(src)
        times = []
        for _ in range(20):
            t = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - t)
        return {"copy_gbs": 2 * src.numel() * 4 / statistics.median(times) / 1e9}
    import ember

    if args.worker == "gemv":
        model = ember.load(folder / "gemv", num_threads=args.threads)
        x = np.random.default_rng().standard_normal((1, 768)).astype("float32")
        t = ember.bench(lambda: model(x), warmup=3, repeat=20, number=1).median
        return {"gemv_gbs": sum(w.nbytes for w in model.weights.values()) / t / 1e9}
    from benchmarks.models.decode import ember_generate, gpt2_lm, hf_generate, torch_generate

    prompt = np.load(folder / "prompt.npy")
    if args.worker == "ember":
        prefill = ember.load(folder / "prefill", num_threads=args.threads)
        step = ember.load(folder / "step", num_threads=args.threads)
        run = lambda n, times: ember_generate(prefill, step, prompt, n, times)
    else:
        model = gpt2_lm(small=args.small)
        p = torch.from_numpy(prompt)
        if args.worker == "eager":
            run = lambda n, times: torch_generate(model, p, n, times)
        else:
            run = lambda n, times: hf_generate(model, p, n)
    run(4, None)  # warm up
    repeat = args.repeat if args.worker != "generate" else max(args.repeat, 3)
    return {"s_per_token": per_token(run, args.tokens, repeat, timed_steps=args.worker != "generate")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="the reduced GPT-2 (2 layers, hidden 64)")
    ap.add_argument("--tokens", type=int, default=64, help="tokens generated per timed generation")
    ap.add_argument("--prompt", type=int, default=8, help="prompt length")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="timed generations per process")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--worker", choices=RUNTIMES, help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args, Path(args.folder))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        info = prepare(args, folder)
        print(f"GPT-2{' (small config)' if args.small else ''}: {info['params'] / 1e6:.0f} M parameters, "
              f"{info['bytes'] / 1e6:.0f} MB of weights read per token; ember compiled the prefill and the step "
              f"in {info['compile_s']:.0f} s", flush=True)
        print(f"greedy tokens identical: ember = torch eager: {info['same']['eager']}, "
              f"ember = transformers generate: {info['same']['generate']}", flush=True)
        results: dict[str, list[dict]] = {r: [] for r in RUNTIMES}
        for rnd in range(args.rounds):
            for runtime in RUNTIMES:
                cmd = [sys.executable, __file__, "--worker", runtime, "--folder", str(folder), "--tokens",
                       str(args.tokens), "--repeat", str(args.repeat), "--threads", str(args.threads)]
                out = subprocess.run(cmd + ["--small"] * args.small, capture_output=True, text=True, cwd=ROOT,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
                if out.returncode:
                    raise SystemExit(f"{runtime} failed:\n{out.stderr[-3000:]}")
                results[runtime].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {rnd + 1}/{args.rounds} done", flush=True)
    tps = {r: 1 / min(x["s_per_token"] for x in results[r]) for r in ("ember", "eager", "generate")}
    copy = max(x["copy_gbs"] for x in results["copy"])
    gemv = max(x["gemv_gbs"] for x in results["gemv"])
    bound = copy * 1e9 / info["bytes"]
    print(f"\ncopy bandwidth {copy:.1f} GB/s -> bound {bound:.1f} tokens/s "
          f"({info['bytes'] / 1e6:.0f} MB per token); ember GEMV chain {gemv:.1f} GB/s = {gemv / copy:.0%} of copy")
    print(f"{'runtime':<24}{'tokens/s':>10}{'ms/token':>10}{'of bound':>10}{'ember x':>10}")
    for r, label in (("ember", "ember"), ("eager", "torch eager"), ("generate", "transformers generate")):
        print(f"{label:<24}{tps[r]:>10.1f}{1e3 / tps[r]:>10.1f}{tps[r] / bound:>10.0%}{tps['ember'] / tps[r]:>10.2f}")


if __name__ == "__main__":
    main()

"""GPT-2 small greedy decode with a KV cache: tokens/s of ember (float32 weights, and weight-only
int8 and int4), torch eager and transformers' `generate`, next to the memory-bandwidth bound, each
runtime in its own process.

A decode step reads every weight once (the embedding tables but one row each; the LM head, tied to
the token embedding, in full): at batch 1 it is a chain of GEMVs, bound by memory bandwidth. The
bound is copy bandwidth / weight bytes per token, the copy bandwidth measured in the same run
(STREAM's copy: a 256 MiB array copied by torch on --threads threads, read + write bytes counted).
ember's int8 and int4 steps read their weights' codes and scales (ember.compile(..., weights=));
their bytes per token are the compiled step's weights (an embedding table the step only gathers
from counted as one row) and each has its own bound. Their greedy tokens are compared with
float32's (the agreement: the share of the steps that give float32's token).
"ember GEMV" is a chain of 12 GPT-2 MLPs (768x3072 and 3072x768 GEMVs, 226 MB of float32 weights,
more than the caches) compiled by ember with each weight format: its weight bytes (codes and
scales) per second, against the same copy bandwidth.

The prefill of the prompt is timed apart for each of ember's weight formats, and the relative
error of its logits against float32's printed with the tokens' agreement.

Runtimes (benchmarks/models/decode.py): ember (each weight format) runs the prefill and then the step compiled once
with the cache length a symbol, the cache explicit tensors in and out; torch eager runs the same
step module; transformers' generate uses its DynamicCache. All three must give the same greedy
tokens (checked). A first process compiles and saves ember's models; each timing process loads
one runtime only (idle threads of one runtime never slow another) and the runtimes take turns
over --rounds rounds; each figure is the best round's median time per token (prefill excluded:
ember's and eager's loops time each step, generate's is the difference of N tokens and 1).

    python benchmarks/decode.py [--small] [--tokens 64] [--prompt 8] [--rounds 2] [--threads 2] [--group 128]
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

WEIGHTS = ("float32", "int8", "int4")
EMBER = tuple(f"ember-{w}" for w in WEIGHTS)
RUNTIMES = (*EMBER, "eager", "generate", "copy", "gemv")


def step_bytes(model) -> int:
    """Bytes of weights a compiled step reads per token: each weight once, but of a table the step
    only gathers from (an embedding) one row."""
    graph = model.graph
    readers: dict[str, set[str]] = {}
    for node in graph.nodes:
        for v in node.inputs:
            readers.setdefault(v.name, set()).add(node.op)
    total = 0
    for name, w in model.weights.items():
        total += w[0].nbytes if readers.get(name, {"?"}) <= {"gather", "embedding"} else w.nbytes
    return total


def prepare(args, folder: Path) -> dict:
    import torch

    import ember
    from benchmarks.models.decode import compile_decode, ember_generate, gpt2_lm, hf_generate, torch_generate

    model = gpt2_lm(small=args.small)
    prompt = torch.randint(0, model.config.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    compile_s, tokens, nbytes, logits = {}, {}, {}, {}
    for weights in WEIGHTS:
        start = time.perf_counter()
        prefill, step = compile_decode(model, args.prompt, args.prompt + args.tokens + 1,
                                       weights=None if weights == "float32" else weights, group_size=args.group)
        compile_s[weights] = time.perf_counter() - start
        tokens[weights] = ember_generate(prefill, step, prompt.numpy(), args.tokens)
        logits[weights] = prefill(prompt.numpy())[0]
        nbytes[weights] = step_bytes(step)
        prefill.save(folder / f"prefill-{weights}")
        step.save(folder / f"step-{weights}")
    same = {"eager": tokens["float32"] == torch_generate(model, prompt, args.tokens),
            "generate": tokens["float32"] == hf_generate(model, prompt, args.tokens)}
    agree = {w: float(np.mean(np.array(tokens[w]) == np.array(tokens["float32"]))) for w in WEIGHTS}
    error = {w: float(np.linalg.norm(logits[w] - logits["float32"]) / np.linalg.norm(logits["float32"]))
             for w in WEIGHTS}
    np.save(folder / "prompt.npy", prompt.numpy())
    for weights in WEIGHTS:
        ember.compile(gemv_chain(), num_threads=args.threads, weights=None if weights == "float32" else weights,
                      group_size=args.group).save(folder / f"gemv-{weights}")
    return {"compile_s": compile_s, "same": same, "bytes": nbytes, "agree": agree, "error": error,
            "params": sum(p.numel() for p in model.parameters())}


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
        x = np.random.default_rng().standard_normal((1, 768)).astype("float32")
        gbs = {}
        for weights in WEIGHTS:
            model = ember.load(folder / f"gemv-{weights}", num_threads=args.threads)
            t = ember.bench(lambda m=model: m(x), warmup=3, repeat=20, number=1).median
            gbs[weights] = sum(w.nbytes for w in model.weights.values()) / t / 1e9
        return {"gemv_gbs": gbs}
    from benchmarks.models.decode import ember_generate, gpt2_lm, hf_generate, torch_generate

    prompt = np.load(folder / "prompt.npy")
    if args.worker in EMBER:
        weights = args.worker.removeprefix("ember-")
        prefill = ember.load(folder / f"prefill-{weights}", num_threads=args.threads)
        step = ember.load(folder / f"step-{weights}", num_threads=args.threads)
        run = lambda n, times: ember_generate(prefill, step, prompt, n, times)
        prefill_s = ember.bench(lambda: prefill(prompt), warmup=1, repeat=args.repeat, number=1).median
    else:
        model = gpt2_lm(small=args.small)
        p = torch.from_numpy(prompt)
        if args.worker == "eager":
            run = lambda n, times: torch_generate(model, p, n, times)
        else:
            run = lambda n, times: hf_generate(model, p, n)
    run(4, None)  # warm up
    repeat = args.repeat if args.worker != "generate" else max(args.repeat, 3)
    timing = {"s_per_token": per_token(run, args.tokens, repeat, timed_steps=args.worker != "generate")}
    return timing | ({"prefill_s": prefill_s} if args.worker in EMBER else {})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="the reduced GPT-2 (2 layers, hidden 64)")
    ap.add_argument("--tokens", type=int, default=64, help="tokens generated per timed generation")
    ap.add_argument("--prompt", type=int, default=8, help="prompt length")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="timed generations per process")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--group", type=int, default=128, help="int4's group size")
    ap.add_argument("--worker", choices=RUNTIMES, help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args, Path(args.folder))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        info = prepare(args, folder)
        print(f"GPT-2{' (small config)' if args.small else ''}: {info['params'] / 1e6:.0f} M parameters; ember "
              f"compiled the prefill and the step in " + ", ".join(f"{s:.0f} s ({w})" for w, s in
                                                                    info["compile_s"].items()), flush=True)
        print(f"greedy tokens identical: ember = torch eager: {info['same']['eager']}, "
              f"ember = transformers generate: {info['same']['generate']}; agreement with float32's "
              f"{args.tokens} tokens: " + ", ".join(f"{w} {a:.0%}" for w, a in info["agree"].items()), flush=True)
        print("prefill logits' ||delta|| / ||float32||: " + ", ".join(f"{w} {e:.4f}" for w, e in
                                                                     info["error"].items()), flush=True)
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
    timed = (*EMBER, "eager", "generate")
    tps = {r: 1 / min(x["s_per_token"] for x in results[r]) for r in timed}
    copy = max(x["copy_gbs"] for x in results["copy"])
    gemv = {w: max(x["gemv_gbs"][w] for x in results["gemv"]) for w in WEIGHTS}
    nbytes = {r: info["bytes"]["float32"] for r in timed} | {f"ember-{w}": b for w, b in info["bytes"].items()}
    print(f"\ncopy bandwidth {copy:.1f} GB/s; ember GEMV chain (weight bytes / time): " +
          ", ".join(f"{w} {g:.1f} GB/s = {g / copy:.0%} of copy" for w, g in gemv.items()))
    prefill = {r: min(x["prefill_s"] for x in results[r]) for r in EMBER}
    print(f"prefill of {args.prompt} tokens: " + ", ".join(f"{r} {1e3 * s:.0f} ms ({s / prefill['ember-float32']:.2f}x)"
                                                            for r, s in prefill.items()))
    print(f"{'runtime':<24}{'tokens/s':>10}{'ms/token':>10}{'MB/token':>10}{'bound':>10}{'of bound':>10}"
          f"{'x fp32':>10}")
    for r in timed:
        bound = copy * 1e9 / nbytes[r]
        print(f"{r:<24}{tps[r]:>10.1f}{1e3 / tps[r]:>10.1f}{nbytes[r] / 1e6:>10.0f}{bound:>10.1f}"
              f"{tps[r] / bound:>10.0%}{tps[r] / tps['ember-float32']:>10.2f}")


if __name__ == "__main__":
    main()

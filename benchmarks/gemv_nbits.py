"""A decode step's GEMVs alone: benchmarks/decode.py's chain of GPT-2 MLPs (768x3072 and
3072x768 GEMVs) compiled by ember with float32, int8 and int4 weights, each chain about 227 MB
of weights, far more than the caches (12 MLPs of float32, 48 of int8, 96 of int4: 12 int4 MLPs,
30 MB, would be read from a 32 MiB L3), int4 twice: on the float32 GEMV (the quantize_rows pass disabled: every
nibble widened to a float and FMA'd) and on VNNI (the row quantized per group to int8, the
nibbles times its bytes by vpdpbusd: ember.codegen.c_gemv_nbits_vnni, where the target has VNNI
and VBMI). Each figure is weight bytes (codes and scales) over the median time of a chain, next
to the copy bandwidth measured in the same process on as many threads (STREAM's copy of 256 MiB,
the fastest of 10: benchmarks/decode.py's copy_gbs) before and after each thread count's
timings, the best taken. The two int4 kernels alternate in one process, --rounds times at each
thread count (the machine may be shared: a round's pair ran within a second of each other).
Accuracy: one MLP's output ||delta|| / ||float32's|| for each weight format, and the two int4
kernels' outputs against each other.

    python benchmarks/gemv_nbits.py [--group 128] [--threads 1,2] [--rounds 5]

--decode: instead, GPT-2 small's whole decode step (benchmarks/models/decode.py's RowStep over an
int8 cache, generate_in_place) with int4 weights, compiled twice (float32 GEMV, VNNI GEMV), the
two alternating in one process at --threads' first count over --rounds rounds of --tokens steps
after a prompt of each of --contexts' lengths: tokens/s of each round's median step; accuracy,
teacher forced on the float32 GEMV's greedy tokens: the logits' ||delta|| / ||float32 GEMV's||
(mean over the steps) and the share of the steps whose argmax agrees.

    python benchmarks/gemv_nbits.py --decode [--contexts 128,991] [--tokens 32] [--threads 1]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VARIANTS = {  # name: ember.compile's options, MLPs of the chain
    "float32": ({}, 12),
    "int8": ({"weights": "int8"}, 48),
    "int4 float32 GEMV": ({"weights": "int4", "disabled_passes": ("quantize_rows",)}, 96),
    "int4 VNNI GEMV": ({"weights": "int4"}, 96),
}
PAIR = ("int4 float32 GEMV", "int4 VNNI GEMV")


def main() -> None:
    import torch

    import ember
    from benchmarks.decode import copy_gbs, gemv_chain
    from ember.target import Target

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--group", type=int, default=128, help="int4's group size")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--decode", action="store_true", help="GPT-2 small's whole decode step instead")
    ap.add_argument("--contexts", default="128,991")
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, features {' '.join(sorted(Target().features))}")
    if args.decode:
        return decode(args)
    x = np.random.default_rng(1).standard_normal((1, 768)).astype(np.float32)
    def options(name):
        opts, _ = VARIANTS[name]
        return {**opts, "group_size": args.group} if opts.get("weights") == "int4" else opts

    one = {n: ember.compile(gemv_chain(1), **options(n))(x)[0] for n in VARIANTS}
    for name, y in one.items():
        print(f"{name}: one MLP's output ||delta|| / ||float32's|| "
              f"{np.linalg.norm(y - one['float32']) / np.linalg.norm(one['float32']):.4f}")
    a, b = (one[n] for n in PAIR)
    print(f"int4 VNNI GEMV against int4 float32 GEMV: {np.linalg.norm(b - a) / np.linalg.norm(a):.4f}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (_, layers) in VARIANTS.items():
            ember.compile(gemv_chain(layers), **options(name)).save(Path(tmp) / name.replace(" ", "_"))
        for threads in map(int, args.threads.split(",")):
            torch.set_num_threads(threads)
            copy = copy_gbs()
            models = {n: ember.load(Path(tmp) / n.replace(" ", "_"), num_threads=threads) for n in VARIANTS}
            nbytes = {n: sum(w.nbytes for w in m.weights.values()) for n, m in models.items()}
            best = {n: float("inf") for n in VARIANTS}
            pairs = []
            for _ in range(args.rounds):
                for name in VARIANTS if not pairs else PAIR:
                    best[name] = min(best[name], _median(models[name], x))
                pairs.append(tuple(_median(models[n], x) for n in PAIR))
            copy = max(copy, copy_gbs())
            print(f"\n{threads} thread(s), copy {copy:.1f} GB/s:")
            for name, t in best.items():
                gbs = nbytes[name] / t / 1e9
                print(f"  {name:18s} {nbytes[name] / 1e6:6.1f} MB {t * 1e3:7.2f} ms  {gbs:5.1f} GB/s = "
                      f"{gbs / copy:.0%} of copy")
            print("  alternating (float32 GEMV / VNNI GEMV, ms): " +
                  ", ".join(f"{a * 1e3:.2f}/{b * 1e3:.2f}" for a, b in pairs) +
                  f"; median ratio {np.median([a / b for a, b in pairs]):.2f}x")


def decode(args) -> None:
    import torch

    from benchmarks.models.decode import compile_prefill, compile_step, generate_in_place, gpt2_lm

    model = gpt2_lm()
    threads = int(args.threads.split(",")[0])
    torch.set_num_threads(threads)
    lengths = [int(c) for c in args.contexts.split(",")]
    max_len = max(lengths) + args.tokens + 1
    options = {"weights": "int4", "group_size": args.group, "kv_cache": "int8", "num_threads": threads}
    prefill = compile_prefill(model, min(lengths), max_len, **options)
    steps = {name: compile_step(model, min(lengths), max_len, **{**options, **VARIANTS[name][0]}) for name in PAIR}
    rng = np.random.default_rng(1)
    for context in lengths:
        prompt = rng.integers(0, model.config.vocab_size, (1, context))
        logits = {n: [] for n in PAIR}
        tokens = generate_in_place(prefill, steps[PAIR[0]], prompt, args.tokens, max_len, logits_out=logits[PAIR[0]])
        generate_in_place(prefill, steps[PAIR[1]], prompt, args.tokens, max_len, feed=tokens[:-1],
                          logits_out=logits[PAIR[1]])
        a, b = (np.array(logits[n][1:]) for n in PAIR)  # the steps' (the prefill's is the same model)
        error = np.mean(np.linalg.norm(b - a, axis=1) / np.linalg.norm(a, axis=1))
        agree = np.mean(a.argmax(axis=1) == b.argmax(axis=1))
        rounds = []
        for _ in range(args.rounds):
            rounds.append([])
            for name in PAIR:
                times: list[float] = []
                generate_in_place(prefill, steps[name], prompt, args.tokens, max_len, times)
                rounds[-1].append(float(np.median(times)))
        print(f"context {context}, {threads} thread(s): tokens/s float32 GEMV / VNNI GEMV per round " +
              ", ".join(f"{1 / t0:.0f}/{1 / t1:.0f}" for t0, t1 in rounds) +
              f"; median ratio {np.median([t0 / t1 for t0, t1 in rounds]):.2f}x; logits ||delta|| / ||float32 "
              f"GEMV's|| {error:.4f}, argmax agreement {agree:.0%} (teacher forced)")


def _median(model, x) -> float:
    import ember

    return ember.bench(lambda: model(x), warmup=3, repeat=20, number=1).median


if __name__ == "__main__":
    main()

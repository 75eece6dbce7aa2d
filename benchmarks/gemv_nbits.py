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
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, features {' '.join(sorted(Target().features))}")
    x = np.random.default_rng(1).standard_normal((1, 768)).astype(np.float32)
    def options(name):
        opts, _ = VARIANTS[name]
        return {**opts, "group_size": args.group} if "weights" in opts else opts

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


def _median(model, x) -> float:
    import ember

    return ember.bench(lambda: model(x), warmup=3, repeat=20, number=1).median


if __name__ == "__main__":
    main()

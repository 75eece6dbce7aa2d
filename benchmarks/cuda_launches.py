"""Launches per call of zoo models compiled for target "cuda" (no GPU needed: the kernels are built
by NVRTC and the call program counted), with the attention's layout ops folded into it (the
default) and without (fold_transposes and fold_qkv_split disabled: a transformer layer's split,
three head splits and head merge each a kernel), and the kernels of one call by operator.

    python benchmarks/cuda_launches.py [--models bert_base gpt2_small] [--small] [--precision fp16]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

UNFOLDED = ("fold_transposes", "fold_qkv_split")


def launches(name: str, small: bool, precision: str, disabled: tuple[str, ...]) -> tuple[Counter, float]:
    """The launches of one call, counted by their kernels' operators, and the compile's seconds."""
    from models import ZOO

    import ember
    from ember.target import Target

    model, inputs = ZOO[name](small=small)
    start = time.perf_counter()
    cm = ember.compile(model.eval(), inputs, target=Target("cuda", simulate=True), precision=precision,
                       disabled_passes=disabled)
    seconds = time.perf_counter() - start
    ops = {k.name: " + ".join(k.ops) for k in cm.kernels}
    return Counter(ops[launch.kernel] for launch in cm._entry.order), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["bert_base", "gpt2_small"])
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--precision", default="fp16")
    args = parser.parse_args()
    for name in args.models:
        folded, s = launches(name, args.small, args.precision, ())
        unfolded, s_unfolded = launches(name, args.small, args.precision, UNFOLDED)
        print(f"{name} {args.precision}: {sum(folded.values())} launches a call, {sum(unfolded.values())} without "
              f"the attention's layout folds (compiled in {s:.1f} s and {s_unfolded:.1f} s)")
        for ops in sorted(set(folded) | set(unfolded), key=lambda o: -unfolded[o]):
            print(f"    {unfolded[ops]:4d} -> {folded[ops]:4d}  {ops}")


if __name__ == "__main__":
    main()

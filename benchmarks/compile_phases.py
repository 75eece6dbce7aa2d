"""Cold and warm compiles of ResNet-18 and BERT-base (benchmarks/models, batch 1, random weights),
phase by phase (ember's compile report: import, graph passes, lowering, code generation, the C
compiler, loading).

    cold   a fresh process and an empty cache folder: everything is traced, lowered and compiled
    warm   a fresh process over the cache folder the cold compile filled: the kernels are read
           from the disk and the library from the build cache (what a second run of a script
           costs); torch.export traces the model anew each time
    again  the same model compiled again in the warm process (what torch.compile's recompiles
           and a notebook's second cell cost)

Every figure is the median over --rounds rounds (a fresh cache folder each), with its spread
(max/min); seconds of wall clock, and of CPU (the process and its children: lowering workers and
compilers), which a machine shared with other work changes less. --small: the reduced models.

    python benchmarks/compile_phases.py [--rounds 3] [--small] [--models resnet18 bert]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.compare import run_child  # noqa: E402

PHASES = ("import_s", "passes_s", "lower_s", "codegen_s", "build_s", "load_s", "total_s")


def model(name: str, small: bool):
    import torch

    if name == "resnet18":
        from benchmarks.models.resnet import ResNet18, randomize_batch_norms

        size = 64 if small else 224
        return randomize_batch_norms(ResNet18(16 if small else 64)).eval(), (torch.randn(1, 3, size, size),)
    from benchmarks.models.bert import bert_base

    return bert_base(small)


def cpu_s() -> float:
    """CPU seconds of this process and of its children that ended."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def child(name: str, small: bool) -> dict:
    """Compile the model twice in this process: each compile's phases, wall and CPU seconds."""
    import warnings

    import numpy as np
    import torch

    import ember

    warnings.filterwarnings("ignore")
    m, inputs = model(name, small)
    out = {}
    for label in ("first", "again"):
        wall, cpu = time.perf_counter(), cpu_s()
        cm = ember.compile(m, inputs)
        out[label] = {**{p: getattr(cm.stats, p) for p in PHASES}, "wall": time.perf_counter() - wall,
                      "cpu": cpu_s() - cpu}
    with torch.no_grad():
        ref = m(*inputs).numpy()
    got = cm(*(x.numpy() for x in inputs))
    assert np.abs(got - ref).max() <= 1e-3 * np.abs(ref).max(), "the compiled model disagrees with torch"
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--small", action="store_true")
    p.add_argument("--models", nargs="+", default=["resnet18", "bert"], choices=["resnet18", "bert"])
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.small)))
        return
    for name in args.models:
        runs: dict[str, list[dict]] = {"cold": [], "warm": [], "again": []}
        for r in range(args.rounds):
            with tempfile.TemporaryDirectory() as cache:
                os.environ["EMBER_CACHE_DIR"] = cache
                for label in ("cold", "warm"):
                    got = run_child(["--child", name, *["--small"] * args.small], __file__)
                    if "error" in got:
                        raise SystemExit(f"{name} ({label}) failed: {got['error']}")
                    runs[label].append(got["first"])
                    if label == "warm":
                        runs["again"].append(got["again"])
                    print(f"round {r + 1}: {name} {label} {got['first']['wall']:.2f} s", file=sys.stderr)
        print(f"{name}{' (small)' if args.small else ''}, {args.rounds} rounds: median seconds (spread max/min)")
        print(f"{'':6}" + "".join(f"{p.removesuffix('_s'):>14}" for p in (*PHASES, "cpu")))
        for label, rows in runs.items():
            cells = []
            for p in (*PHASES, "cpu"):
                values = [row[p] for row in rows]
                spread = max(values) / min(values) if min(values) > 0 else 1.0
                cells.append(f"{statistics.median(values):8.2f} ({spread:3.1f})")
            print(f"{label:6}" + "".join(f"{c:>14}" for c in cells))


if __name__ == "__main__":
    main()

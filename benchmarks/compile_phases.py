"""Cold and warm compiles of ResNet-18, BERT-base, MobileNetV2 and GPT-2 small (benchmarks/models,
batch 1, random weights), phase by phase (ember's compile report: import, graph passes, lowering,
code generation, the C compiler, loading, saving into the model cache).

    cold   a fresh process and an empty cache folder: everything is traced, lowered and compiled
    warm   a fresh process over the cache folder the cold compile filled: the model cache gives
           the whole model, found by the module's key before any trace (what a second run of a
           script costs); with
           --model-cache off, the kernels are read from the disk and the library from the build
           cache, and every graph pass runs again
    again  the same model compiled again in the warm process (what torch.compile's recompiles
           and a notebook's second cell cost)

"saving": the model cache's save, which runs on in the background once the compile has returned
(ember.runtime.model_cache), waited for after it (not in "total" nor "cpu").

Every figure is the median over --rounds rounds (a fresh cache folder each), with its spread
(max/min); two tables: seconds of wall clock, then of CPU (the process and its children: lowering
workers and compilers; the compile report's CPU column), which a machine shared with other work
changes less. --small: the reduced models.
--model-cache both: each round runs without the model cache (EMBER_MODEL_CACHE=0), then with it.

    python benchmarks/compile_phases.py [--rounds 3] [--small] [--models resnet18 bert mobilenet_v2 gpt2]
                                        [--model-cache on|off|both]
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

PHASES = ("import_s", "passes_s", "lower_s", "codegen_s", "build_s", "load_s", "kept_s", "total_s")
MODELS = ("resnet18", "bert", "mobilenet_v2", "gpt2")
CPU = {"import_s": "import", "passes_s": "passes", "lower_s": "lowering", "codegen_s": "codegen",
       "build_s": "C compiler", "load_s": "load", "kept_s": "kept"}  # the phases' names in CompileStats.cpu


def model(name: str, small: bool):
    """The zoo's model (seeded: a warm process compiles the weights the cold one did)."""
    from benchmarks.models import ZOO

    return ZOO["bert_base" if name == "bert" else "gpt2_small" if name == "gpt2" else name](small)


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
    from ember.runtime import model_cache

    m, inputs = model(name, small)
    out = {}
    for label in ("first", "again"):
        wall, cpu = time.perf_counter(), cpu_s()
        cm = ember.compile(m, inputs)
        out[label] = {**{p: getattr(cm.stats, p) for p in PHASES}, "wall": time.perf_counter() - wall,
                      "cpu": cpu_s() - cpu, **{f"cpu {p}": cm.stats.cpu.get(name, 0.0) for p, name in CPU.items()}}
        wall, cpu = time.perf_counter(), cpu_s()
        model_cache.wait()  # (the model cache's save, in the background since the compile returned)
        out[label] |= {"saving_s": time.perf_counter() - wall, "cpu saving_s": cpu_s() - cpu}
    with torch.no_grad():
        ref = m(*inputs).numpy()
    got = cm(*(x.numpy() for x in inputs))
    assert np.abs(got - ref).max() <= 1e-3 * np.abs(ref).max(), "the compiled model disagrees with torch"
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--small", action="store_true")
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--model-cache", choices=("on", "off", "both"), default="on")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.small)))
        return
    settings = {"on": ["on"], "off": ["off"], "both": ["off", "on"]}[args.model_cache]
    for name in args.models:
        runs: dict[str, list[dict]] = {f"{label}{f' ({c})' if len(settings) > 1 else ''}": []
                                       for c in settings for label in ("cold", "warm", "again")}
        for r in range(args.rounds):
            for setting in settings:  # (alternated within each round: the machine's load changes)
                os.environ["EMBER_MODEL_CACHE"] = "1" if setting == "on" else "0"
                suffix = f" ({setting})" if len(settings) > 1 else ""
                with tempfile.TemporaryDirectory() as cache:
                    os.environ["EMBER_CACHE_DIR"] = cache
                    for label in ("cold", "warm"):
                        got = run_child(["--child", name, *["--small"] * args.small], __file__)
                        if "error" in got:
                            raise SystemExit(f"{name} ({label}{suffix}) failed: {got['error']}")
                        runs[label + suffix].append(got["first"])
                        if label == "warm":
                            runs["again" + suffix].append(got["again"])
                        print(f"round {r + 1}: {name} {label}{suffix} {got['first']['wall']:.2f} s wall, "
                              f"{got['first']['cpu']:.2f} s CPU", file=sys.stderr)
        for clock, columns in (("wall", (*PHASES, "cpu", "saving_s")),
                               ("CPU", (*(f"cpu {p}" for p in CPU), "cpu", "cpu saving_s"))):
            print(f"{name}{' (small)' if args.small else ''}, {args.rounds} rounds: median {clock} seconds "
                  f"(spread max/min)")
            width = max(map(len, runs)) + 1
            print(f"{'':{width}}" + "".join(f"{p.removeprefix('cpu ').removesuffix('_s'):>14}" for p in columns))
            for label, rows in runs.items():
                cells = []
                for p in columns:
                    values = [row[p] for row in rows]
                    spread = max(values) / min(values) if min(values) > 0 else 1.0
                    cells.append(f"{statistics.median(values):8.2f} ({spread:3.1f})")
                print(f"{label:{width}}" + "".join(f"{c:>14}" for c in cells))


if __name__ == "__main__":
    main()

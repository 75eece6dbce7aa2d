"""The prefill of a prompt alone (benchmarks/models/decode.py's RowStep, compiled as
benchmarks/decode.py compiles it: the prompt's length a symbol) for GPT-2 small and the
LLaMA-architecture model with float32, int8 and int4 weights: each runtime's prefill time and its
ratio to float32's of the same model (issue 23's aim: int8 and int4 at most 0.5x).

A first process compiles and saves every prefill; then each round runs one process per model and
weight format, in turn (the order rotates from round to round), which loads its prefill only and
times --repeat calls on the same prompt: the median wall time on --threads threads, and the
median CPU time of one thread on its own (time.thread_time, what a shared machine leaves of the
clock). Each figure is the best round's; the ratios are of those bests.

    python benchmarks/prefill.py [--models gpt2,llama] [--weights float32,int8,int4] [--prompt 128]
                                 [--rounds 4] [--threads 2] [--repeat 7] [--group 128]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def compile_all(args, folder: Path) -> None:
    from benchmarks.decode import _model
    from benchmarks.models.decode import compile_prefill

    for name in args.models:
        model = _model(name, small=False)
        for weights in args.weights:
            options = {} if weights == "float32" else {"weights": weights}
            if weights == "int4":
                options["group_size"] = args.group
            start = time.perf_counter()
            compile_prefill(model, args.prompt, args.prompt + 64, **options).save(folder / f"{name}-{weights}")
            print(f"compiled {name} {weights} in {time.perf_counter() - start:.1f} s", flush=True)


def worker(path: str, prompt: int, threads: int, repeat: int) -> dict:
    """The prefill at `path`: median seconds of `repeat` calls on `threads` threads and on one."""
    import ember

    model = ember.load(path)
    ids = np.random.default_rng(0).integers(0, 1000, (1, prompt)).astype(np.int64)
    out = {}
    for key, n, clock in (("wall_s", threads, time.perf_counter), ("cpu_s", 1, time.thread_time)):
        model.num_threads = n
        model(ids)
        times = []
        for _ in range(repeat):
            start = clock()
            model(ids)
            times.append(clock() - start)
        out[key] = statistics.median(times)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--weights", default="float32,int8,int4")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--group", type=int, default=128)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.prompt, args.threads, args.repeat)))
        return
    args.models, args.weights = args.models.split(","), args.weights.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        compile_all(args, folder)
        runs = [(m, w) for m in args.models for w in args.weights]
        best: dict[tuple[str, str], dict] = {}
        for r in range(args.rounds):
            for m, w in runs[r % len(runs):] + runs[:r % len(runs)]:
                cmd = [sys.executable, __file__, "--worker", str(folder / f"{m}-{w}"), "--prompt", str(args.prompt),
                       "--threads", str(args.threads), "--repeat", str(args.repeat)]
                got = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
                mine = best.setdefault((m, w), got)
                for key in got:
                    mine[key] = min(mine[key], got[key])
    print(f"\nprefill of {args.prompt} tokens, best of {args.rounds} rounds (medians of {args.repeat} calls):")
    for m in args.models:
        base = best.get((m, "float32"))
        for w in args.weights:
            t = best[(m, w)]
            ratio = f" ({t['wall_s'] / base['wall_s']:.2f}x; one thread's CPU {t['cpu_s'] / base['cpu_s']:.2f}x)" \
                if base else ""
            print(f"  {m:6} {w:8} {1e3 * t['wall_s']:7.1f} ms on {args.threads} threads, "
                  f"{1e3 * t['cpu_s']:7.1f} ms of one thread's CPU{ratio}")


if __name__ == "__main__":
    main()

"""fp32 GEMM: ember next to NumPy's BLAS (and torch.matmul).

Square sizes (--sizes): ember's best hand-written CPU schedule (examples/kernels/gemm.py, packed_gemm: B
packed into 32-column panels, an 8x32 accumulator tile in registers, the reduction loop outside the
unrolled, vectorized tile, the outer loop parallel) in one process with NumPy and torch, medians of
repeated runs; ratios are ember / peer throughput.

Transformer shapes (--rows): a linear layer x @ W of M rows (--rows) against the weights (K, N) of
BERT-base / GPT-2 small (768x768 attention output, 768x2304 fused QKV, 768x3072 up-projection,
3072x768 down-projection), compiled by ember.compile (weights constant, so packed at compile time),
bare and with its fused epilogues (+ bias, + bias then erf-GELU, + bias + a residual input). Each
runtime runs in its own process (ember; NumPy's BLAS; with --before, ember without compile-time
weight packing) and they take turns over --rounds rounds, each round a median of --repeat runs per
case; the table shows the median over rounds: GFLOP/s (2 M K N / time), the ratio to BLAS's bare
GEMM (ember time / BLAS time: below 1 is faster) and each epilogue's time over ember's bare GEMM;
next to the medians, the fastest run of each (on a shared machine, a parallel loop whose thread
lost its core waits for it: medians there measure the neighbours, the fastest run the kernel).
--baseline DIR adds ember from another checkout (a commit's files: `git archive REV | tar -x -C
DIR`) as one more runtime, timed in the same rounds: before and after a change, on the same load.
--cpu-time times one thread by its own CPU time (time.thread_time) instead of the clock: on a
machine shared with other work, the time a thread waited for its core is not counted (the caches
the neighbours emptied still are); it implies --threads 1.

--dtype bf16 | int8 times the square sizes on the CPU's matrix units instead, against the unit's peak
measured in the same run, torch's matmul and NumPy's fp32 (benchmarks/gemm_lowp.py).

    python benchmarks/gemm.py [--sizes 512 1024 2048] [--rows 1 16 128 512] [--rounds 3] [--threads 2]
                              [--baseline DIR] [--cpu-time] [--dtype fp32 | bf16 | int8]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np


def load_packed_gemm():
    path = pathlib.Path(__file__).resolve().parent.parent / "examples" / "kernels" / "gemm.py"
    spec = importlib.util.spec_from_file_location("examples.gemm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.packed_gemm


WEIGHTS = [(768, 768), (768, 2304), (768, 3072), (3072, 768)]  # (K, N)
EPILOGUES = ["bare", "bias", "bias+gelu", "bias+res"]


def linear_model(k: int, n: int, epilogue: str):
    import torch

    class Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(k, n, bias=epilogue != "bare")

        def forward(self, x, res=None):
            y = self.fc(x)
            if epilogue == "bias+gelu":
                y = torch.nn.functional.gelu(y)
            return y + res if epilogue == "bias+res" else y

    return Linear().eval()


def cpu_times(f, inputs, repeat: int) -> list[float]:
    """Seconds of this thread's CPU time of each of `repeat` calls, after two warm-up calls."""
    times = []
    for i in range(repeat + 2):
        start = time.thread_time()
        f(*inputs)
        if i >= 2:
            times.append(time.thread_time() - start)
    return times


def worker(runtime: str, rows: list[int], repeat: int, cpu_time: bool) -> None:
    """One runtime in this process: prepare every case, then time them all at each line of stdin."""
    import ember

    rng = np.random.default_rng(0)
    cases = {}
    for m in rows:
        for k, n in WEIGHTS:
            x = rng.uniform(-1, 1, (m, k)).astype("float32")
            if runtime == "numpy":
                w = rng.uniform(-1, 1, (k, n)).astype("float32")
                cases[f"{m} {k} {n} bare"] = (np.matmul, (x, w))
                continue
            import torch

            for epi in EPILOGUES:
                model = linear_model(k, n, epi)
                res = rng.uniform(-1, 1, (m, n)).astype("float32")
                inputs = (x, res) if epi == "bias+res" else (x,)
                disabled = ["pack_weights"] if runtime == "ember-unpacked" else []
                cm = ember.compile(model, tuple(torch.from_numpy(v) for v in inputs), disabled_passes=disabled)
                with torch.no_grad():
                    want = model(*(torch.from_numpy(v) for v in inputs)).numpy()
                np.testing.assert_allclose(cm(*inputs), want, rtol=1e-4, atol=1e-4 * k ** 0.5)
                cases[f"{m} {k} {n} {epi}"] = (cm, inputs)
    print("ready", flush=True)
    for _ in sys.stdin:
        if cpu_time:
            runs = {key: cpu_times(f, inputs, repeat) for key, (f, inputs) in cases.items()}
        else:
            runs = {key: ember.bench(f, *inputs, warmup=2, repeat=repeat, number=1).times
                    for key, (f, inputs) in cases.items()}
        print(json.dumps({key: [float(np.median(t)), min(t)] for key, t in runs.items()}), flush=True)


def transformer_shapes(args) -> None:
    runtimes = (["ember", "numpy"] + (["ember-unpacked"] if args.before else [])
                + (["ember-baseline"] if args.baseline else []))
    env = {**os.environ, "EMBER_NUM_THREADS": str(args.threads), "OMP_NUM_THREADS": str(args.threads),
           "OPENBLAS_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    procs = {}
    for rt in runtimes:
        cmd = [sys.executable, __file__, "--worker", rt, "--rows", *map(str, args.rows), "--repeat", str(args.repeat),
               *(["--cpu-time"] if args.cpu_time else [])]
        own = {"PYTHONPATH": str(pathlib.Path(args.baseline).resolve())} if rt == "ember-baseline" else {}
        procs[rt] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**env, **own})
        if procs[rt].stdout.readline().strip() != "ready":  # prepared one after the other: compiles stay apart
            raise SystemExit(f"the {rt} worker failed")
    rounds: dict[str, list[dict]] = {rt: [] for rt in runtimes}
    for _ in range(args.rounds):
        for rt, p in procs.items():
            p.stdin.write("go\n")
            p.stdin.flush()
            rounds[rt].append(json.loads(p.stdout.readline()))
    for p in procs.values():
        p.stdin.close()
        p.wait()
    med = {rt: {key: float(np.median([r[key][0] for r in rs])) for key in rs[0]} for rt, rs in rounds.items()}
    best = {rt: {key: min(r[key][1] for r in rs) for key in rs[0]} for rt, rs in rounds.items()}
    spread = float(np.median([max(r[key][0] for r in rs) / min(r[key][0] for r in rs)
                              for rs in rounds.values() for key in rs[0]]))
    clock = "thread CPU time" if args.cpu_time else "wall clock"
    print(f"\nfp32 linear layers, {args.threads} threads ({clock}), {args.rounds} rounds of {args.repeat} runs "
          f"per case; "
          f"med: the median over rounds of each round's median, best: the fastest run (median spread of a "
          f"case's round medians, max/min: {spread:.2f}). GFLOP/s; t/BLAS: ember's time over BLAS's "
          f"(below 1: faster); epilogues: time over ember's bare GEMM (medians)")
    before = f" {'unpacked t/BLAS':>15}" if args.before else ""
    before += f" {'baseline t/BLAS':>15}" if args.baseline else ""
    print(f"{'M':>4} {'K':>5} {'N':>5} {'BLAS med':>8} {'best':>6} {'ember med':>9} {'best':>6} {'t/BLAS med':>10} "
          f"{'best':>5}{before} " + " ".join(f"{e:>9}" for e in EPILOGUES[1:]))
    for m in args.rows:
        for k, n in WEIGHTS:
            key = f"{m} {k} {n}"
            gflops = 2.0 * m * k * n / 1e9
            bare, blas = med["ember"][f"{key} bare"], med["numpy"][f"{key} bare"]
            bare_b, blas_b = best["ember"][f"{key} bare"], best["numpy"][f"{key} bare"]
            line = (f"{m:>4} {k:>5} {n:>5} {gflops / blas:8.1f} {gflops / blas_b:6.1f} {gflops / bare:9.1f} "
                    f"{gflops / bare_b:6.1f} {bare / blas:10.2f} {bare_b / blas_b:5.2f}")
            if args.before:
                unpacked = med["ember-unpacked"][f"{key} bare"] / blas, best["ember-unpacked"][f"{key} bare"] / blas_b
                line += f" {unpacked[0]:9.2f} {unpacked[1]:5.2f}"
            if args.baseline:
                base = med["ember-baseline"][f"{key} bare"] / blas, best["ember-baseline"][f"{key} bare"] / blas_b
                line += f" {base[0]:9.2f} {base[1]:5.2f}"
            line += " " + " ".join(f"{med['ember'][f'{key} {e}'] / bare:9.3f}" for e in EPILOGUES[1:])
            print(line, flush=True)
            if args.baseline:  # the baseline's epilogues, over its own bare GEMM, under the same columns
                bb = med["ember-baseline"][f"{key} bare"]
                print(f"{'baseline epilogues':>{len(line) - 30}} "
                      + " ".join(f"{med['ember-baseline'][f'{key} {e}'] / bb:9.3f}" for e in EPILOGUES[1:]))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[512, 1024, 2048])
    ap.add_argument("--rows", type=int, nargs="*", default=[1, 16, 128, 512])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before", action="store_true", help="also time ember without compile-time weight packing")
    ap.add_argument("--baseline", help="also time ember from this folder (another checkout), in the same rounds")
    ap.add_argument("--cpu-time", action="store_true", help="one thread, timed by its own CPU time")
    ap.add_argument("--dtype", choices=["fp32", "bf16", "int8"], default="fp32",
                    help="bf16 or int8: the square sizes on the CPU's matrix units, against their measured peak "
                         "(benchmarks/gemm_lowp.py)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cpu_time:
        args.threads = 1
    if args.worker:
        worker(args.worker, args.rows, args.repeat, args.cpu_time)
        return
    if args.dtype != "fp32":
        os.environ["EMBER_NUM_THREADS"] = str(args.threads)
        from gemm_lowp import run  # (this script's folder is on sys.path)

        run(args.dtype, args.sizes, args.threads, args.repeat, cpu_times if args.cpu_time else None)
        return
    if args.rows:
        transformer_shapes(args)
    if not args.sizes:
        return
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

"""fp32 GEMM tuned by ember's auto-tuner (no template: the design space comes from the
computation), next to NumPy's BLAS measured in the same process; or a bf16 / int8 GEMM over
operands in the tile units' layout, whose design space adds a tensorize sketch per unit the
machine has, next to the unit's peak measured in the same run.

    python benchmarks/tune_gemm.py [--sizes 1024 2048] [--trials 1000] [--minutes 15] [--early-stop 256]
                                   [--db gemm.db]
    python benchmarks/tune_gemm.py --dtype bf16 | int8 --sizes 512 --trials 32 [--cpu-time]
    python benchmarks/tune_gemm.py --dtype int8 --qgemm --sizes 512 --trials 24 --cpu-time

For each size: tune (live progress on stderr), then time the winner and NumPy's BLAS here, in
alternating blocks, medians of repeated runs; report GFLOP/s, the ratio, the trials and the tuning
time, and where that time went. The tuning curves go to a PNG next to the database.

With --dtype bf16 | int8 (A (n, n / G, G), B packed (n / 16, n / G, 16, G), as a compiled model
packs its weights, ember.intrinsics.tiles): how many candidates were tensorized, measured and
correct (each checked by the worker against the unscheduled kernel), the best tensorized and the
best plain one, the best tensorized one's decisions applied to a 64^3 product and run on the
loop-IR interpreter (the intrinsic's description) against NumPy, and the winner's and the
hand-written tile schedule's (tiles.gemm) GFLOP/s (GOP/s) against the peak of the unit's
instruction (benchmarks/gemm_lowp.py's loop).

With --qgemm, the kernel of an int8 model instead: qgemm (ember.ops.quantized, its rows read as
(M, K), int32 sums plus a bias) as a model's task (extract_tasks of a one-operator graph), whose
design space has the VNNI tile's tensorize sketch too; the winner (tensorized or not) against
the operator's own schedule, both checked against NumPy's integers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BLOCKS = 5  # alternating timing blocks of ember and NumPy
CHECK_N = 64  # the interpreter's check of a tensorized candidate
LOWP = {"bf16": ("bfloat16", "bfloat16", "float32", 2), "int8": ("uint8", "int8", "int32", 4)}


def gemm(n: int):
    from ember import te

    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    return [A, B, te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")]


def lowp_gemm(n: int, dtype: str):
    """C (n, n / 16, 16) = A (n, n / G, G) @ B (n / 16, n / G, 16, G) in the units' layout."""
    from ember import te
    from ember.intrinsics.tiles import LANES, product

    a_dtype, b_dtype, acc, g = LOWP[dtype]
    a = te.placeholder((n, n // g, g), a_dtype, name="A")
    b = te.placeholder((n // LANES, n // g, LANES, g), b_dtype, name="Bp")
    return [a, b, product(a, b, acc)]


def tune_lowp(args) -> None:
    from gemm import cpu_times
    from gemm_lowp import PEAK_NAMES, measure_peak

    import ember
    from ember.intrinsics import amx, avx512, cpu_has, tiles
    from ember.target import Target
    from ember.tir import dtype as dt
    from ember.tune import Database
    from ember.tune.space import apply_sketch, design_space, sketch_of

    kind = "bf16" if args.dtype == "bf16" else "u8s8"
    has_amx = cpu_has("amx_bf16" if args.dtype == "bf16" else "amx_int8")
    if not (has_amx or cpu_has("avx512_bf16" if args.dtype == "bf16" else "avx512_vnni")):
        raise SystemExit(f"skipped: this CPU has no {args.dtype} unit (/proc/cpuinfo)")
    which = {"bf16": 0, "int8": 1}[args.dtype] + (2 if has_amx else 0)
    unit = (amx if has_amx else avx512).UNITS[kind]
    peak = measure_peak(which, args.threads, cpu_time=args.cpu_time)
    ops = "GOP/s" if args.dtype == "int8" else "GFLOP/s"
    clock = "thread CPU time" if args.cpu_time else "wall clock"
    print(f"{args.dtype} on {Target().key}, {args.threads} thread(s), {clock} (the tuner's measurements: wall "
          f"clock); {PEAK_NAMES[which]} peak {peak:.1f} {ops}")
    db, target = Database(args.db), Target().key
    g, acc = unit.group, LOWP[args.dtype][2]
    rng = np.random.default_rng(0)
    for n in args.sizes:
        task = ember.tune.task_from_tensors(lowp_gemm(n, args.dtype), f"gemm_{args.dtype}_{n}")
        start = time.perf_counter()
        best = ember.tune.tune(task, trials=args.trials, database=db, seed=args.seed,
                               time_budget_s=args.minutes * 60, early_stop=args.early_stop, progress=True)
        tuning_s = time.perf_counter() - start
        records = db.records(task.key, target)
        tensorized = [r for r in records if any(i.kind == "tensorize" for i in r.trace)]
        plain = [r for r in records if r not in tensorized]
        best_t = min((r for r in tensorized if r.ok), key=lambda r: r.median_s, default=None)
        best_p = min((r for r in plain if r.ok), key=lambda r: r.median_s, default=None)
        if args.dtype == "bf16":
            a = rng.standard_normal((n, n)).astype(dt.to_numpy("bfloat16"))
            b = rng.standard_normal((n, n)).astype(dt.to_numpy("bfloat16"))
        else:
            a = rng.integers(0, 256, (n, n), dtype=np.uint8)
            b = rng.integers(-128, 128, (n, n), dtype=np.int8)
        want = a.astype(np.float64) @ b.astype(np.float64)
        inputs = (a.reshape(n, n // g, g), tiles.pack(b, g))

        def checked(f, a=a, b=b, want=want):
            out = np.zeros((a.shape[0], b.shape[1] // 16, 16), acc)
            f(a.reshape(a.shape[0], -1, g), tiles.pack(b, g), out)
            tol = dict(rtol=1e-5, atol=1e-4 * np.sqrt(a.shape[1])) if args.dtype == "bf16" else dict(rtol=0, atol=0)
            np.testing.assert_allclose(out.reshape(want.shape), want, **tol)

        interp = "none tensorized"
        if best_t is not None:  # its decisions on a CHECK_N^3 product: the interpreter is slow
            small = ember.tune.task_from_tensors(lowp_gemm(CHECK_N, args.dtype), "check")
            sketch = sketch_of(design_space(task), best_t.trace)
            sch = apply_sketch(small, sketch, list(best_t.trace.decisions().values()))
            intrin = next(dict(i.attrs)["intrin"] for i in sch.trace if i.kind == "tensorize")
            sa, sb = (np.ascontiguousarray(x[:CHECK_N, :CHECK_N]) for x in (a, b))
            checked(small.build(sch.trace, target="python"), sa, sb, sa.astype(np.float64) @ sb.astype(np.float64))
            interp = (f"the best tensorized candidate's decisions on a {CHECK_N}^3 product ({intrin}) match NumPy "
                      f"on the interpreter")
        winner = best.build()
        checked(winner)
        hand = ember.build(*tiles.gemm(unit, n, n, n), target="c")
        checked(hand)
        rate = lambda t, n=n: 2.0 * n**3 / t / 1e9  # noqa: E731
        out = np.zeros((n, n // 16, 16), acc)
        if args.cpu_time:
            t_win, t_hand = (float(np.median(cpu_times(f, (*inputs, out), 20))) for f in (winner, hand))
        else:
            t_win, t_hand = (ember.bench(f, *inputs, out, repeat=20).median for f in (winner, hand))
        won = "tensorized" if any(i.kind == "tensorize" for i in best.trace) else "plain"
        print(f"\n{n}^3: {len(records)} candidates in {tuning_s:.0f} s, {len(tensorized)} tensorized "
              f"({sum(r.ok for r in tensorized)} correct), {len(plain)} plain ({sum(r.ok for r in plain)} correct)")
        for name, r in (("best tensorized", best_t), ("best plain", best_p)):
            if r is not None:
                print(f"  {name:16s} {rate(r.median_s):8.1f} {ops} ({100 * rate(r.median_s) / peak:3.0f}% of peak)")
        print(f"  winner ({won})    {rate(t_win):8.1f} {ops} ({100 * rate(t_win) / peak:3.0f}% of peak), re-timed")
        print(f"  tiles.gemm      {rate(t_hand):8.1f} {ops} ({100 * rate(t_hand) / peak:3.0f}% of peak), hand-written")
        print(f"  {interp}")
        print(f"  {best.time}")


def tune_qgemm(args) -> None:
    from gemm import cpu_times
    from gemm_lowp import measure_peak

    import ember
    from ember.graph.core import Graph, TensorType
    from ember.ops.nodes import add_op
    from ember.ops.quantized import pack
    from ember.tune import Database
    from ember.tune.extract import extract_tasks

    peak = measure_peak(1, args.threads, cpu_time=args.cpu_time)
    print(f"qgemm (int32 out), {args.threads} thread(s); vpdpbusd peak {peak:.1f} GOP/s")
    db, rng = Database(args.db), np.random.default_rng(0)
    for n in args.sizes:
        g = Graph(f"qgemm_{n}")
        x = g.add_input("x", TensorType((n, n), "uint8"))
        w = g.add_constant(pack(rng.integers(-128, 128, (n, n), dtype=np.int8)), "w")
        bias = g.add_constant(rng.integers(-1000, 1000, (n,), dtype=np.int32), "bias")
        g.set_outputs(add_op(g, "qgemm", [x, w, bias], {"out_dtype": "int32"}))
        [task] = extract_tasks(g)
        best = ember.tune.tune(task, trials=args.trials, database=db, seed=args.seed,
                               time_budget_s=args.minutes * 60, early_stop=args.early_stop, progress=True)
        a, wp, b, out = task.random_args(rng)
        want = a.astype(np.int32) @ wp.transpose(1, 3, 0, 2).reshape(n, n).astype(np.int32) + b
        rates = {}
        for name, trace in (("winner", best.trace), ("qgemm's schedule", task.default_trace)):
            f = task.build(trace)
            f(a, wp, b, out)
            np.testing.assert_array_equal(out, want)
            operands = (a, wp, b, out)
            runs = cpu_times(f, operands, 20) if args.cpu_time else ember.bench(f, *operands, repeat=20).times
            rates[name] = 2.0 * n**3 / float(np.median(runs)) / 1e9
        intrins = [dict(i.attrs)["intrin"] for i in best.trace if i.kind == "tensorize"]
        print(f"\n{n}^3: winner {'tensorized onto ' + intrins[0] if intrins else 'plain'}")
        for name, r in rates.items():
            print(f"  {name:17s} {r:8.1f} GOP/s ({100 * r / peak:3.0f}% of peak)")
        print(f"  {best.time}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--minutes", type=float, default=15.0, help="time budget per size")
    ap.add_argument("--early-stop", type=int, default=256, help="stop after this many trials without improvement")
    ap.add_argument("--db", default="tune_gemm.db")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=["fp32", *LOWP], default="fp32")
    ap.add_argument("--qgemm", action="store_true", help="int8: tune an int8 model's qgemm kernel instead")
    ap.add_argument("--cpu-time", action="store_true", help="bf16 / int8: one thread, timed by its CPU time (a "
                    "loaded machine's fair measure)")
    args = ap.parse_args(argv)
    if args.cpu_time:
        args.threads = 1
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    if args.qgemm:
        return tune_qgemm(args)
    if args.dtype != "fp32":
        return tune_lowp(args)
    import ember
    from ember.tune import Database
    from ember.tune.report import plot_tuning_curves

    db = Database(args.db)
    rows = []
    for n in args.sizes:
        start = time.perf_counter()
        task = ember.tune.task_from_tensors(gemm(n), f"gemm{n}")
        best = ember.tune.tune(task, trials=args.trials, database=db, seed=args.seed,
                               time_budget_s=args.minutes * 60, early_stop=args.early_stop, progress=True)
        tuning_s = time.perf_counter() - start
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((2, n, n), dtype=np.float32)
        c = np.empty((n, n), np.float32)
        f = best.build()
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-2)
        # alternating blocks of calls, not single calls: BLAS's and OpenMP's worker threads spin
        # for a while after a call and would slow the other's next call
        blocks = [(ember.bench(f, a, b, c, repeat=5).median, ember.bench(np.matmul, a, b, repeat=5).median)
                  for _ in range(BLOCKS)]
        t_ember, t_numpy = (statistics.median(times) for times in zip(*blocks))
        flops = 2 * n**3
        rows.append((n, flops / t_ember / 1e9, flops / t_numpy / 1e9, best.trials, tuning_s, best.time))
    print(f"\n{'size':>6} {'ember GFLOP/s':>14} {'numpy':>8} {'ember/numpy':>12} {'trials':>7} {'tuning s':>9}")
    for n, ge, gn, trials, secs, _ in rows:
        print(f"{n:6d} {ge:14.1f} {gn:8.1f} {ge / gn:12.2f} {trials:7d} {secs:9.0f}")
    for n, *_, spent in rows:
        print(f"  {n}: {spent}")
    png = plot_tuning_curves(db, os.path.splitext(args.db)[0] + "_curve.png")
    print(f"tuning curves: {png}")


if __name__ == "__main__":
    main()

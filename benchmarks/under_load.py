"""ember, ONNX Runtime and torch eager per call on a machine busier than its cores.

A compiled model runs each kernel as an OpenMP parallel region, so a call of a CNN passes a barrier
some tens of times, and a thread that waits at one spins (GOMP_SPINCOUNT) before it sleeps. On a
machine with more runnable threads than cores, the spinning takes the time slices the other
threads need: a call's wall time grows with its CPU time (spinning included) over its share of the
cores. This times each runtime at batch 1 with --load busy-loop processes started (and stopped) by
this script beside it, and without them, in alternating rounds (a slow spell of a shared machine
falls on all of them alike); ember once per --policies entry (libgomp's settings for its process,
"default": ember's own; --int8 adds ember.quantize's model). Each figure is a fresh process that
loads what a first process compiled and saved, and calls it for --seconds (at least 5 calls): the
median and the 10th percentile of the call's wall time, and the process's CPU time per call (every
thread's: spinning counts).

--realtime runs the timing processes under SCHED_FIFO (root or CAP_SYS_NICE): their threads then
take a core from any ordinary process at once, which is how a quiet machine behaves, so a
policy's cost when the cores are free can be measured on a shared machine that is never quiet
(busy loops at --load then load nothing that matters).

    python benchmarks/under_load.py [--models mobilenet_v2 resnet18] [--load 0 3] [--rounds 3]
        [--seconds 2] [--threads 2] [--peers onnxruntime eager] [--realtime] [--int8]
        [--policies default GOMP_SPINCOUNT=10000 OMP_WAIT_POLICY=passive]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.coexist import parse_policy  # noqa: E402 (after the path)
from benchmarks.compare import prepare, run_child  # noqa: E402


@contextlib.contextmanager
def busy_loops(count: int):
    """`count` processes that spin in Python until the block ends (then they are killed)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def timed_calls(fn, seconds: float) -> dict:
    """Wall-time median and 10th percentile (ms) of `fn` over `seconds` (at least 5 calls, after
    3 of warm-up: torch eager's call can take seconds under load), and the process's CPU time per
    call (ms)."""
    for _ in range(3):
        fn()
    walls, cpu, start = [], time.process_time(), time.perf_counter()
    while len(walls) < 5 or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t)
    return {"median": 1e3 * statistics.median(walls), "p10": 1e3 * float(np.percentile(walls, 10)),
            "cpu": 1e3 * (time.process_time() - cpu) / len(walls)}


def prepare_int8(name: str, small: bool, folder: Path) -> dict:
    """ember.quantize's int8 model (static, calibrated on 4 batches of fresh normal inputs), saved
    as folder/ember_int8 (checked against torch by benchmarks/quantize.py, not here)."""
    import ember
    from benchmarks.models import ZOO

    model, inputs = ZOO[name](small=small)
    rng = np.random.default_rng(0)
    calibration = [[rng.standard_normal(tuple(x.shape)).astype(np.float32) for x in inputs] for _ in range(4)]
    try:
        ember.quantize(model, inputs, calibration).save(folder / "ember_int8")
        return {}
    except Exception as e:  # a benchmark reports what failed and goes on with the others
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"}


def measure(runtime: str, name: str, small: bool, folder: Path, seconds: float, threads: int) -> dict:
    """One runtime's call times in this process ("ember" and "ember_int8": the saved models)."""
    inputs = [np.load(folder / f"input{k}.npy") for k in range(len(list(folder.glob("input*.npy"))))]
    if runtime.startswith("ember"):
        import ember

        cm = ember.load(folder / runtime)
        cm.num_threads = threads
        return timed_calls(lambda: cm(*inputs), seconds)
    if runtime == "onnxruntime":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        sess = ort.InferenceSession(str(folder / "model.onnx"), opts, providers=["CPUExecutionProvider"])
        feed = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
        return timed_calls(lambda: sess.run(None, feed), seconds)
    import torch

    from benchmarks.models import ZOO

    torch.set_num_threads(threads)
    model, _ = ZOO[name](small=small)
    tensors = [torch.from_numpy(x) for x in inputs]
    with torch.no_grad():
        return timed_calls(lambda: model(*tensors), seconds)


def run_model(name: str, args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        common = ["--folder", tmp, *(["--small"] if args.small else [])]
        prep = run_child(["--prepare", name, *common, *(["--int8"] if args.int8 else [])], script=__file__)
        if "error" in prep or "error" in prep["ember"]["ember"]:
            print(f"{name:<13} prepare failed: {prep}", flush=True)
            return
        if "error" in prep.get("int8", {}):
            print(f"{name:<13} int8 failed: {prep['int8']['error']}", flush=True)
        variants = ["ember"] + (["ember_int8"] if "int8" in prep and "error" not in prep["int8"] else [])
        jobs = [(v, p) for v in variants for p in args.policies]
        jobs += [(p, "") for p in args.peers if p != "onnxruntime" or "onnx_error" not in prep]
        got: dict[tuple, list[dict]] = {}
        for _ in range(args.rounds):
            for load in args.load:
                with busy_loops(load):
                    for runtime, policy in jobs:
                        got.setdefault((runtime, policy, load), []).append(run_child(
                            ["--measure", runtime, name, *common, "--seconds", str(args.seconds),
                             "--threads", str(args.threads), *(["--realtime"] if args.realtime else [])],
                            script=__file__, env=parse_policy(policy) if runtime.startswith("ember") else {}))
    for (runtime, policy, load), results in got.items():
        ok = [r for r in results if "error" not in r]
        label = f"{runtime} {policy}".strip()
        if not ok:
            print(f"{name:<13} {label:<34} {load:>4}  failed: {results[0]['error']}", flush=True)
            continue
        med = statistics.median(r["median"] for r in ok)
        p10 = statistics.median(r["p10"] for r in ok)
        best = min(r["p10"] for r in ok)
        cpu = statistics.median(r["cpu"] for r in ok)
        spread = max(r["median"] for r in ok) / min(r["median"] for r in ok)
        print(f"{name:<13} {label:<34} {load:>4} {med:10.2f} {p10:9.2f} {best:9.2f} {cpu:9.2f} {spread:7.2f}",
              flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["mobilenet_v2", "resnet18"])
    ap.add_argument("--small", action="store_true", help="the reduced-size variants")
    ap.add_argument("--load", nargs="+", type=int, default=[0, 3], help="busy-loop processes beside each figure")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0, help="each timing process calls for this long")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peers", nargs="*", default=["onnxruntime", "eager"], choices=["onnxruntime", "eager"])
    ap.add_argument("--policies", nargs="+", default=["default", "GOMP_SPINCOUNT=10000", "OMP_WAIT_POLICY=passive"])
    ap.add_argument("--realtime", action="store_true", help="time under SCHED_FIFO: a quiet machine's figures")
    ap.add_argument("--int8", action="store_true", help="also ember.quantize's int8 model")
    # the child processes
    ap.add_argument("--prepare", metavar="MODEL")
    ap.add_argument("--measure", nargs=2, metavar=("RUNTIME", "MODEL"))
    ap.add_argument("--folder")
    args = ap.parse_args(argv)
    if args.prepare:
        report = prepare(args.prepare, args.small, Path(args.folder), {"ember": {}}, onnx=True)
        if args.int8:
            report["int8"] = prepare_int8(args.prepare, args.small, Path(args.folder))
        print(json.dumps(report))
        return
    if args.measure:
        if args.realtime:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))  # threads started later inherit it
        runtime, name = args.measure
        print(json.dumps(measure(runtime, name, args.small, Path(args.folder), args.seconds, args.threads)))
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a terminated run still stops its busy loops
    print(f"batch 1, {args.threads} threads{', SCHED_FIFO' if args.realtime else ''}; medians over {args.rounds} "
          f"alternating rounds of one process each, {os.cpu_count()} CPUs")
    print(f"{'model':<13} {'runtime':<34} {'load':>4} {'median ms':>10} {'p10 ms':>9} {'best p10':>9} "
          f"{'cpu ms':>9} {'spread':>7}")
    for name in args.models:
        run_model(name, args)
    print("load: busy-loop processes beside the figure; best p10: the lowest round's 10th percentile; "
          "cpu: the process's CPU time per call, all threads (spinning counts, waiting for a core does not); "
          "spread: slowest round's median / fastest's")


if __name__ == "__main__":
    main()

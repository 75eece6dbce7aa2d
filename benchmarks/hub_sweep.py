"""The hub sweep: torchvision, timm and transformers models (benchmarks/models/hub.py) compiled by
ember, checked against torch eager and timed against it and ONNX Runtime.

For each model a first process builds it (random weights, seeded), runs torch eager, compiles it
with ember (the compile time), checks ‖out − ref‖ / ‖ref‖ ≤ 1e-4 (fp32) and saves the compiled
model, the inputs and an ONNX export. Then, unless --no-timing, ember (the saved model), torch
eager (the model rebuilt) and ONNX Runtime each run in a fresh process of their own, taking turns
over --rounds rounds; a runtime's latency is its best median. The table gives each model's
status, error, compile time, latencies and ember's speed-up over eager and ONNX Runtime (above
1: ember is faster); then the pass rate, the slowest ratios and the failures grouped by cause. A
model whose output hardly changes with a new random float input (random weights whose activations
vanish) is "weak", not "pass": its check says little. --cpu-time times each call by the process's
CPU time rather than the wall clock: with --threads 1, a fair measure on a machine that other
processes load, where wall time counts the waits for a core (with more threads it counts their
spinning too).

    python benchmarks/hub_sweep.py [--libraries torchvision timm transformers] [--kinds encoder moe ...]
                                   [--models tv_resnet18 hf_bert ...] [--small] [--no-timing]
                                   [--no-ort] [--rounds 2] [--runs 10] [--threads 2] [--timeout 1800] [--cpu-time]

torchvision and timm are imported from their own folder (`make hub-libs`; benchmarks/models/hub_libs.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.compare import cpu_latency, export_onnx, timed  # noqa: E402
from benchmarks.compare import median_latency as wall_latency  # noqa: E402

TOLERANCE = 1e-4  # ‖out − ref‖ / ‖ref‖, fp32
RUNTIMES = ("ember", "eager", "onnxruntime")


def cause(e: BaseException) -> str:
    """What a failure is grouped by: the missing operators, or the error's type and first line
    without its numbers and names of nodes."""
    from ember.ops.registry import UnsupportedOpError

    if isinstance(e, UnsupportedOpError):
        return "unsupported: " + ", ".join(sorted({op.split(":")[0] for op, _ in e.missing}))
    line = (str(e).strip().splitlines() or [""])[0]
    line = re.sub(r"\d+", "N", re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", line))
    return f"{type(e).__name__}: {line[:90]}"


# --- the child processes ----------------------------------------------------------------------

def prepare(name: str, small: bool, folder: Path, onnx: bool) -> dict:
    """Build, run eager, compile, check, save (folder/ember, inputs, model.onnx)."""
    import torch

    import ember
    from benchmarks.models.hub import HUB

    try:
        model, inputs = HUB[name].build(small)
        with torch.no_grad():
            expected = model(*inputs).float().numpy()
            other = [torch.randn_like(x) if x.is_floating_point() else x for x in inputs]
            varies = np.linalg.norm(model(*other).float().numpy() - expected)
    except Exception as e:  # the library cannot build it here: not ember's failure, said apart
        return {"status": "build failed", "cause": "build: " + cause(e)}
    # an output that hardly depends on a float input (random weights whose activations vanish) checks little
    weak = any(x.is_floating_point() for x in inputs) and varies <= 1e-3 * np.linalg.norm(expected)
    for k, x in enumerate(inputs):
        np.save(folder / f"input{k}.npy", x.numpy())
    report: dict = {"inputs": len(inputs)}
    try:
        cm, report["compile"] = timed(lambda: ember.compile(model, example_inputs=inputs))
        got = np.asarray(cm(*inputs)).astype(np.float32)
        if got.shape != expected.shape:
            raise ember.ShapeError(f"output shape {got.shape}, torch gives {expected.shape}")
        report["error"] = float(np.linalg.norm(got - expected) / max(np.linalg.norm(expected), 1e-30))
        report["status"] = "pass" if report["error"] <= TOLERANCE else "mismatch"
        if report["status"] == "mismatch":
            report["cause"] = f"mismatch: relative error above {TOLERANCE:g}"
        elif weak:
            report["status"], report["cause"] = "weak", "weak check: the output hardly depends on the input"
        cm.save(folder / "ember")
    except Exception as e:
        return {**report, "status": "fail", "cause": cause(e), "message": str(e).splitlines()[0][:200]}
    if onnx:
        try:
            export_onnx(model, inputs, folder / "model.onnx")
        except Exception as e:
            report["onnx_error"] = cause(e)
    return report


def measure(runtime: str, name: str, small: bool, folder: Path, runs: int, threads: int,
            cpu_time: bool = False) -> dict:
    """One runtime's median latency in this process (its CPU time per call with `cpu_time`)."""
    latency = cpu_latency if cpu_time else wall_latency
    inputs = [np.load(folder / f"input{k}.npy") for k in range(len(list(folder.glob("input*.npy"))))]
    if runtime == "ember":
        import ember

        cm = ember.load(folder / "ember")
        return {"median": latency(lambda: cm(*inputs), runs)}
    if runtime == "onnxruntime":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        sess = ort.InferenceSession(str(folder / "model.onnx"), opts, providers=["CPUExecutionProvider"])
        feed = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
        return {"median": latency(lambda: sess.run(None, feed), runs)}
    import torch

    from benchmarks.models.hub import HUB

    torch.set_num_threads(threads)
    model, _ = HUB[name].build(small)
    tensors = [torch.from_numpy(x) for x in inputs]
    with torch.no_grad():
        return {"median": latency(lambda: model(*tensors), runs)}


def run_child(argv: list[str], timeout: float) -> dict:
    """This script in a fresh process; its last stdout line is a JSON object."""
    try:
        run = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True, timeout=timeout,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        return {"status": "fail", "cause": f"timeout: over {timeout:g} s"}
    lines = run.stdout.strip().splitlines()
    if run.returncode != 0 or not lines:
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return {"status": "fail", "cause": f"crash: exit {run.returncode}", "message": tail[:200]}
    return json.loads(lines[-1])


# --- the parent ----------------------------------------------------------------------------------

def sweep_model(name: str, args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        common = ["--folder", tmp, *(["--small"] if args.small else [])]
        onnx = not (args.no_timing or args.no_ort)
        report = run_child(["--prepare", name, *common, *(["--onnx"] if onnx else [])], args.timeout)
        if report.get("status") not in ("pass", "weak") or args.no_timing:
            return report
        runtimes = [r for r in RUNTIMES if r != "onnxruntime" or (Path(tmp) / "model.onnx").exists()]
        medians: dict[str, list[float]] = defaultdict(list)
        for _ in range(args.rounds):
            for runtime in runtimes:
                got = run_child(["--measure", runtime, name, *common, "--runs", str(args.runs),
                                 "--threads", str(args.threads), *(["--cpu-time"] if args.cpu_time else [])],
                                args.timeout)
                if "median" in got:
                    medians[runtime].append(got["median"])
        report["latency"] = {r: min(m) for r, m in medians.items()}
        return report


def ratio(report: dict, peer: str) -> float | None:
    lat = report.get("latency", {})
    return lat[peer] / lat["ember"] if "ember" in lat and peer in lat else None


HEADER = (f"{'model':<36} {'library':<12} {'kind':<15} {'status':<12} {'rel err':>8} {'compile s':>9} "
          f"{'ember ms':>9} {'eager ms':>9} {'ORT ms':>9} {'vs eager':>9} {'vs ORT':>9}")


def row(name: str, r: dict, model) -> str:
    lat = r.get("latency", {})
    ms = [f"{lat[k] * 1e3:9.2f}" if k in lat else f"{'-':>9}" for k in RUNTIMES]
    speed = [f"{v:8.2f}x" if v else f"{'-':>9}" for v in (ratio(r, "eager"), ratio(r, "onnxruntime"))]
    err = f"{r['error']:8.1e}" if "error" in r else f"{'-':>8}"
    comp = f"{r['compile']:9.1f}" if "compile" in r else f"{'-':>9}"
    why = f"  ({r['cause']}{': ' + r['message'] if 'message' in r else ''})" if "cause" in r else ""
    return (f"{name:<36} {model.library:<12} {model.kind:<15} {r.get('status', 'fail'):<12} {err} {comp} "
            f"{' '.join(ms)} {' '.join(speed)}{why}")


def summarize(results: dict[str, dict]) -> None:
    built = {n: r for n, r in results.items() if r.get("status") != "build failed"}
    passed = [n for n, r in built.items() if r.get("status") == "pass"]
    print(f"\npass: {len(passed)} of {len(built)} ({100 * len(passed) / max(len(built), 1):.0f}%)"
          f" compiled and within {TOLERANCE:g} of eager")
    compiles = sorted((r["compile"], n) for n, r in built.items() if "compile" in r)
    if compiles:
        print(f"compile time: median {np.median([c for c, _ in compiles]):.1f} s, slowest "
              + ", ".join(f"{n} {c:.1f} s" for c, n in compiles[::-1][:5]))
    for peer in ("eager", "onnxruntime"):
        speeds = sorted((ratio(r, peer), n) for n, r in built.items() if ratio(r, peer))
        if speeds:
            slower = sum(1 for s, _ in speeds if s < 1)
            print(f"vs {peer}: {slower} of {len(speeds)} slower; slowest " +
                  ", ".join(f"{n} {s:.2f}x" for s, n in speeds[:6]))
    groups: dict[str, list[str]] = defaultdict(list)
    for n, r in results.items():
        if r.get("status") != "pass":
            groups[r.get("cause", "unknown")].append(n)
    if groups:
        print("\nfailures by cause:")
        for c, names in sorted(groups.items(), key=lambda g: -len(g[1])):
            print(f"  {len(names):3d}  {c}\n       {', '.join(names)}")


def main(argv=None) -> None:
    from benchmarks.models.hub import HUB

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--libraries", nargs="+", choices=("torchvision", "timm", "transformers"))
    ap.add_argument("--kinds", nargs="+", help="classification, segmentation, encoder, decoder, encoder-decoder, "
                                               "vision, audio, moe")
    ap.add_argument("--models", nargs="+", help="by name (see benchmarks/models/hub.py), or a regular expression")
    ap.add_argument("--small", action="store_true", help="reduced inputs and configurations")
    ap.add_argument("--no-timing", action="store_true", help="compile and check only")
    ap.add_argument("--no-ort", action="store_true", help="time ember and eager only (no ONNX export)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds a child process may take")
    ap.add_argument("--list", action="store_true", help="list the selected models and stop")
    ap.add_argument("--cpu-time", action="store_true", help="time calls by the process's CPU time (with --threads 1: "
                                                            "fair on a loaded machine)")
    # the child processes
    ap.add_argument("--prepare", metavar="MODEL")
    ap.add_argument("--measure", nargs=2, metavar=("RUNTIME", "MODEL"))
    ap.add_argument("--folder")
    ap.add_argument("--onnx", action="store_true")
    args = ap.parse_args(argv)
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    if args.prepare:
        print(json.dumps(prepare(args.prepare, args.small, Path(args.folder), args.onnx)))
        return
    if args.measure:
        print(json.dumps(measure(*args.measure, args.small, Path(args.folder), args.runs, args.threads,
                                 args.cpu_time)))
        return
    names = [n for n, m in HUB.items()
             if (not args.libraries or m.library in args.libraries) and (not args.kinds or m.kind in args.kinds)
             and (not args.models or any(n == p or re.fullmatch(p, n) for p in args.models))]
    if args.list:
        print("\n".join(f"{n:<36} {HUB[n].library:<12} {HUB[n].kind}" for n in names))
        return
    print(f"{len(names)} models, {'small' if args.small else 'full'} size, batch 1, {args.threads} threads"
          + ("" if args.no_timing else f"; each runtime in its own process, {args.rounds} rounds, best median of "
                                        f"{args.runs} runs" + (" of CPU time" if args.cpu_time else "")), flush=True)
    print(HEADER, flush=True)
    started = time.perf_counter()
    results = {}
    for name in names:
        results[name] = sweep_model(name, args)
        print(row(name, results[name], HUB[name]), flush=True)
    summarize(results)
    print(f"\nsweep took {time.perf_counter() - started:.0f} s; vs eager, vs ORT: the peer's latency / ember's "
          f"(above 1: ember is faster)")


if __name__ == "__main__":
    main()

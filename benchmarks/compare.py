"""Every zoo model, compiled by ember and run next to its peers.

For each model: latency (median of --runs runs, batch 1 unless the model says otherwise,
--threads threads) and compile time of ember, torch eager, torch.compile (inductor) and ONNX
Runtime, and each one's latency ratio to torch eager (above 1: faster than eager). ember's output
is checked against eager first.

By default every runtime runs in one process (the ember variants timed in turns); --isolated gives
each runtime a process of its own (`--worker`, driven over a pipe) and times them in alternating
rounds, --per-round calls each, the order rotated every round, so that no runtime inherits
another's caches, threads or allocator and a noisy spell falls on all of them alike.

    python benchmarks/compare.py [--models resnet18 lstm] [--small] [--runs 20] [--threads 2] [--isolated]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@contextlib.contextmanager
def quiet_fds():
    """Silence stdout and stderr at the file-descriptor level (exporters print whole graphs)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def median_latency(fn, runs: int) -> float:
    import ember

    return ember.bench(fn, warmup=3, repeat=runs, number=1).median


def interleaved_latencies(fns: dict, runs: int) -> dict:
    """Median seconds per call of each function, timed in turns (one call of each per round), so
    that a slow spell of a noisy machine falls on all of them alike."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    times: dict = {label: [] for label in fns}
    for _ in range(runs):
        for label, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - start)
    return {label: statistics.median(t) for label, t in times.items()}


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


Row = tuple[str, float | None, float | None, str]  # runtime, latency s, compile s, note


def bench_model(name: str, small: bool, runs: int, peers: list[str], variants: dict | None = None) -> list[Row]:
    """Rows for torch eager, ember (one row per entry of `variants`: a label and the options of
    ember.compile; default: "ember" with none) and the peers."""
    import torch

    import ember
    from benchmarks.models import ZOO

    model, inputs = ZOO[name](small=small)
    rows = []
    with torch.no_grad():
        expected = model(*inputs)
        t_eager = median_latency(lambda: model(*inputs), runs)
    rows.append(("torch eager", t_eager, None, ""))

    compiled_variants = {}  # label -> (compiled model, compile s); timed in turns below
    for label, options in (variants or {"ember": {}}).items():
        try:
            cm, t_compile = timed(lambda options=options: ember.compile(model, example_inputs=inputs, **options))
            np.testing.assert_allclose(cm(*inputs).numpy(), expected.numpy(), rtol=1e-3, atol=1e-3)
            compiled_variants[label] = (cm, t_compile)
        except Exception as e:  # a benchmark reports what failed and goes on with the peers
            rows.append((label, None, None, f"failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}"))
    medians = interleaved_latencies({label: partial(cm, *inputs) for label, (cm, _) in compiled_variants.items()}, runs)
    for label, (cm, t_compile) in compiled_variants.items():
        rows.append((label, medians[label], t_compile, f"{len(cm.kernels)} kernels"))

    if "inductor" in peers:
        try:
            compiled = torch.compile(model)
            with torch.no_grad():
                _, t_compile = timed(lambda: compiled(*inputs))
                rows.append(("torch.compile", median_latency(lambda: compiled(*inputs), runs), t_compile, "inductor"))
        except Exception as e:
            rows.append(("torch.compile", None, None, f"failed: {type(e).__name__}"))

    if "onnxruntime" in peers:
        try:
            run, t_compile = timed(partial(onnxruntime_call, model, inputs))
            rows.append(("onnxruntime", median_latency(run, runs), t_compile, ""))
        except Exception as e:
            rows.append(("onnxruntime", None, None, f"failed: {type(e).__name__}"))
    return rows


def onnxruntime_call(model, inputs):
    """The model exported to ONNX (TorchScript exporter, else dynamo) in an ONNX Runtime session
    with torch's thread count: a function that runs it on `inputs`."""
    import onnxruntime as ort
    import torch

    buf = io.BytesIO()
    with warnings.catch_warnings(), quiet_fds():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(model, inputs, buf, dynamo=False)
        except Exception:  # the TorchScript exporter cannot take every model: the dynamo one
            buf = io.BytesIO()
            torch.onnx.export(model, inputs, buf, dynamo=True)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = torch.get_num_threads()
    sess = ort.InferenceSession(buf.getvalue(), opts, providers=["CPUExecutionProvider"])
    feed = {i.name: x.numpy() for i, x in zip(sess.get_inputs(), inputs)}
    return lambda: sess.run(None, feed)


# -- each runtime in its own process ----------------------------------------------------------

ISOLATED = {"torch eager": "eager", "ember": "ember", "torch.compile": "inductor", "onnxruntime": "onnxruntime"}


def runtime_call(runtime: str, name: str, small: bool):
    """(a function running the zoo model `name` on `runtime`, a note); ember's output is checked."""
    import torch

    import ember
    from benchmarks.models import ZOO

    model, inputs = ZOO[name](small=small)
    if runtime == "torch eager":
        return torch.no_grad()(lambda: model(*inputs)), ""
    if runtime == "torch.compile":
        compiled = torch.compile(model)
        return torch.no_grad()(lambda: compiled(*inputs)), "inductor"
    if runtime == "onnxruntime":
        return onnxruntime_call(model, inputs), ""
    cm = ember.compile(model, example_inputs=inputs)
    with torch.no_grad():
        np.testing.assert_allclose(cm(*inputs).numpy(), model(*inputs).numpy(), rtol=1e-3, atol=1e-3)
    return partial(cm, *inputs), f"{len(cm.kernels)} kernels"


def worker(runtime: str, name: str, small: bool) -> None:
    """`--worker`: build the runtime, say {"compile": s, "note": ...} on stdout, then for each
    line N on stdin time N calls and answer with their seconds, one JSON line each."""
    try:
        (run, note), t_compile = timed(partial(runtime_call, runtime, name, small))
        for _ in range(3):
            run()
    except Exception as e:  # the driver reports what failed and goes on with the others
        print(json.dumps({"failed": f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"}), flush=True)
        return
    print(json.dumps({"compile": t_compile, "note": note}), flush=True)
    for line in sys.stdin:
        times = []
        for _ in range(int(line)):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        print(json.dumps(times), flush=True)


TURN_PAUSE_S = 0.02  # between two runtimes' turns, so that the threads the last one left spinning go to sleep


def bench_isolated(name: str, small: bool, runs: int, peers: list[str], per_round: int, threads: int) -> list[Row]:
    """Rows for torch eager, ember and the peers, each timed in its own worker process in
    alternating rounds (`runs` rounds of `per_round` calls; the first runtime of a round rotates)."""
    runtimes = [r for r, peer in ISOLATED.items() if peer in ("eager", "ember") or peer in peers]
    args = [sys.executable, str(Path(__file__).resolve()), "--models", name, "--threads", str(threads)]
    args += ["--small"] if small else []
    procs = {r: subprocess.Popen(args + ["--worker", r], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for r in runtimes}
    ready: dict = {}
    try:
        for r, proc in procs.items():  # each builds its runtime while the others build theirs
            ready[r] = json.loads(proc.stdout.readline() or '{"failed": "the worker died"}')
        live = [r for r in runtimes if "failed" not in ready[r]]
        times: dict = {r: [] for r in live}
        for k in range(runs):
            for r in live[k % len(live):] + live[:k % len(live)]:
                time.sleep(TURN_PAUSE_S)
                procs[r].stdin.write(f"{per_round}\n")
                procs[r].stdin.flush()
                times[r] += json.loads(procs[r].stdout.readline())
    finally:
        for proc in procs.values():
            proc.stdin.close()
            proc.wait()
    return [(r, None, None, f"failed: {ready[r]['failed']}") if "failed" in ready[r] else
            (r, statistics.median(times[r]), None if r == "torch eager" else ready[r]["compile"], ready[r]["note"])
            for r in runtimes]


def main(argv=None) -> None:
    from benchmarks.models import ZOO

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(ZOO))
    ap.add_argument("--small", action="store_true", help="the reduced-size variants")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peers", nargs="*", default=["inductor", "onnxruntime"])
    ap.add_argument("--isolated", action="store_true", help="each runtime in its own process, alternating rounds")
    ap.add_argument("--per-round", type=int, default=5, help="calls per runtime and round with --isolated")
    ap.add_argument("--worker", choices=list(ISOLATED), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    if args.worker:
        return worker(args.worker, args.models[0], args.small)
    how = f"own process each, rounds of {args.per_round} calls, median of {args.runs} rounds" if args.isolated \
        else f"median of {args.runs} runs"
    print(f"{args.threads} threads, {how}; ratio = torch eager latency / latency")
    print(f"{'model':<14} {'runtime':<14} {'latency ms':>11} {'vs eager':>9} {'compile s':>10}  note")
    for name in args.models:
        if args.isolated:
            rows = bench_isolated(name, args.small, args.runs, args.peers, args.per_round, args.threads)
        else:
            rows = bench_model(name, args.small, args.runs, args.peers)
        eager = rows[0][1]
        for runtime, lat, comp, note in rows:
            lat_s = f"{lat * 1e3:11.2f}" if lat else f"{'-':>11}"
            ratio = f"{eager / lat:9.2f}" if lat and eager else f"{'-':>9}"
            comp_s = f"{comp:10.1f}" if comp is not None else f"{'-':>10}"
            print(f"{name:<14} {runtime:<14} {lat_s} {ratio} {comp_s}  {note}", flush=True)


if __name__ == "__main__":
    main()

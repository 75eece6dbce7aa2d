"""Every zoo model, compiled by ember and run next to its peers in one process.

For each model: latency (median of --runs runs, batch 1, --threads threads) and compile time of
ember, torch eager, torch.compile (inductor) and ONNX Runtime, and each one's latency ratio to
torch eager (above 1: faster than eager). ember's output is checked against eager first.

    python benchmarks/compare.py [--models resnet18 bert_base] [--small] [--runs 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
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
            import onnxruntime as ort

            def export_and_load():
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
                return ort.InferenceSession(buf.getvalue(), opts, providers=["CPUExecutionProvider"])

            sess, t_compile = timed(export_and_load)
            feed = {i.name: x.numpy() for i, x in zip(sess.get_inputs(), inputs)}
            rows.append(("onnxruntime", median_latency(lambda: sess.run(None, feed), runs), t_compile, ""))
        except Exception as e:
            rows.append(("onnxruntime", None, None, f"failed: {type(e).__name__}"))
    return rows


def main(argv=None) -> None:
    from benchmarks.models import ZOO

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(ZOO))
    ap.add_argument("--small", action="store_true", help="the reduced-size variants")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peers", nargs="*", default=["inductor", "onnxruntime"])
    args = ap.parse_args(argv)
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    print(f"batch 1, {args.threads} threads, median of {args.runs} runs; ratio = torch eager latency / latency")
    print(f"{'model':<14} {'runtime':<14} {'latency ms':>11} {'vs eager':>9} {'compile s':>10}  note")
    for name in args.models:
        rows = bench_model(name, args.small, args.runs, args.peers)
        eager = rows[0][1]
        for runtime, lat, comp, note in rows:
            lat_s = f"{lat * 1e3:11.2f}" if lat else f"{'-':>11}"
            ratio = f"{eager / lat:9.2f}" if lat else f"{'-':>9}"
            comp_s = f"{comp:10.1f}" if comp is not None else f"{'-':>10}"
            print(f"{name:<14} {runtime:<14} {lat_s} {ratio} {comp_s}  {note}", flush=True)


if __name__ == "__main__":
    main()

"""int8 models of the zoo: ember.quantize next to ONNX Runtime's quantization of the same network,
accuracy and latency, each runtime in its own process.

For each model, a first process prepares: torch's fp32 outputs; ember fp32 (ember.compile);
ember int8 (ember.quantize: static, calibrated on --calibration batches of fresh inputs of the
model's size, by --method, for CNNs; dynamic for transformers); the fp32 ONNX export and ONNX
Runtime's int8 model of it (compare.ort_int8: quantize_static, QDQ, per-channel int8 weights and
uint8 activations, on the same calibration batches, for CNNs; quantize_dynamic, per-channel int8
weights, for transformers); and ember's compile of that ONNX Runtime int8 model (its QDQ operators fused onto
ember's int8 kernels: frontend/onnx/qdq.py). Accuracy over --tests inputs that calibration never saw: ||out - ref|| /
||ref|| and top-1 agreement (argmax over the last axis) against torch's fp32. Latency: each
runtime in a fresh process, the runtimes taking turns over --rounds rounds, the best median (of
the process's CPU time per call with --cpu-time: with --threads 1 a fair figure on a machine
other processes load).

    python benchmarks/quantize.py [--models resnet18 bert_base] [--small] [--method minmax]
                                  [--calibration 8] [--tests 4] [--runs 20] [--rounds 2] [--threads 2]
                                  [--cpu-time]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
from compare import (  # (this script's folder is on sys.path)
    ROOT,
    TRANSFORMERS,
    fresh,
    median_latency,
    ort_int8,
    quiet_fds,
    run_child,
    timed,
)
from hub_sweep import cpu_latency


def prepare(name: str, small: bool, folder: Path, method: str, batches: int, tests: int) -> dict:
    import onnxruntime as ort
    import torch

    import ember
    from benchmarks.models import ZOO
    from ember.quantization import error

    model, inputs = ZOO[name](small=small)
    rng = np.random.default_rng(0)
    calibration = [fresh(inputs, rng) for _ in range(batches)]
    test_inputs = [fresh(inputs, rng) for _ in range(tests)]
    with torch.no_grad():
        refs = [model(*(torch.from_numpy(x) for x in t)).numpy() for t in test_inputs]
    for k, x in enumerate(test_inputs[0]):
        np.save(folder / f"input{k}.npy", x)
    dynamic = name in TRANSFORMERS
    report: dict = {"ember": {}, "accuracy": {}}

    def check(label: str, run) -> None:
        outs = [np.asarray(run(t)) for t in test_inputs]
        rel, top1 = error(np.concatenate(outs), np.concatenate(refs))
        report["accuracy"][label] = {"rel": rel, "top1": top1}

    cm, t = timed(lambda: ember.compile(model, example_inputs=inputs))
    cm.save(folder / "ember_fp32")
    report["ember"]["ember_fp32"] = {"compile": t}
    check("ember_fp32", lambda x: cm(*x))
    qm, t = timed(lambda: ember.quantize(model, inputs, None if dynamic else calibration, method=method,
                                         dynamic=dynamic))
    qm.save(folder / "ember_int8")
    report["ember"]["ember_int8"] = {"compile": t}
    check("ember_int8", lambda x: qm(*x))

    with warnings.catch_warnings(), quiet_fds():
        warnings.simplefilter("ignore")
        buf = io.BytesIO()
        torch.onnx.export(model, inputs, buf, dynamo=False)
    (folder / "fp32.onnx").write_bytes(buf.getvalue())
    names = [i.name for i in ort.InferenceSession(str(folder / "fp32.onnx")).get_inputs()]
    ort_int8(folder / "fp32.onnx", folder / "int8.onnx", dynamic, calibration)
    sess = ort.InferenceSession(str(folder / "int8.onnx"), providers=["CPUExecutionProvider"])
    check("onnxruntime_int8", lambda x: sess.run(None, dict(zip(names, x)))[0])
    try:
        om, t = timed(lambda: ember.compile(str(folder / "int8.onnx")))
        om.save(folder / "ember_ort_int8")
        report["ember"]["ember_ort_int8"] = {"compile": t}
        check("ember_ort_int8", lambda x: om(*x))
    except Exception as e:  # a benchmark reports what failed and goes on
        report["ember"]["ember_ort_int8"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"}
    return report


def measure(runtime: str, folder: Path, runs: int, threads: int, cpu_time: bool = False) -> dict:
    latency = cpu_latency if cpu_time else median_latency
    inputs = [np.load(folder / f"input{k}.npy") for k in range(len(list(folder.glob("input*.npy"))))]
    if runtime.startswith("ember"):
        import ember

        cm = ember.load(folder / runtime)
        return {"median": latency(lambda: cm(*inputs), runs)}
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    path = folder / ("int8.onnx" if runtime == "onnxruntime_int8" else "fp32.onnx")
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    feed = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
    return {"median": latency(lambda: sess.run(None, feed), runs)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet18", "bert_base"])
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--method", default="minmax", choices=["minmax", "percentile", "entropy"])
    ap.add_argument("--calibration", type=int, default=8, help="calibration batches")
    ap.add_argument("--tests", type=int, default=4, help="inputs the accuracy is measured on")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cpu-time", action="store_true", help="time each call by the process's CPU time")
    ap.add_argument("--prepare", metavar="MODEL")
    ap.add_argument("--measure", metavar="RUNTIME")
    ap.add_argument("--folder")
    args = ap.parse_args(argv)
    os.environ["EMBER_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(args.threads)
    if args.prepare:
        print(json.dumps(prepare(args.prepare, args.small, Path(args.folder), args.method, args.calibration,
                                 args.tests)))
        return
    if args.measure:
        print(json.dumps(measure(args.measure, Path(args.folder), args.runs, args.threads, args.cpu_time)))
        return
    from ember.target import machine_flags

    flags = machine_flags() or frozenset()
    print(f"{args.threads} threads, batch 1; avx512_vnni: {'avx512_vnni' in flags}, amx_int8: {'amx_int8' in flags}; "
          f"each runtime in its own process, {args.rounds} rounds, best median of {args.runs} runs"
          + (" of CPU time" if args.cpu_time else ""))
    print(f"{'model':<12} {'runtime':<18} {'latency ms':>11} {'vs ember fp32':>14} {'rel. error':>11} {'top-1':>6}")
    for name in args.models:
        with tempfile.TemporaryDirectory() as tmp:
            prep = run_child(["--prepare", name, "--folder", tmp, "--method", args.method, "--calibration",
                              str(args.calibration), "--tests", str(args.tests), *(["--small"] if args.small else [])],
                             script=__file__)
            if "error" in prep:
                print(f"{name:<12} prepare failed: {prep['error']}")
                continue
            jobs = [k for k, r in prep["ember"].items() if "error" not in r] + ["onnxruntime_fp32", "onnxruntime_int8"]
            got: dict[str, list] = {job: [] for job in jobs}
            for _ in range(args.rounds):
                for job in jobs:
                    got[job].append(run_child(["--measure", job, "--folder", tmp, "--runs", str(args.runs),
                                               "--threads", str(args.threads),
                                               *(["--cpu-time"] if args.cpu_time else [])], script=__file__))
        best = {job: min((r["median"] for r in rs if "error" not in r), default=None) for job, rs in got.items()}
        for job in jobs + [k for k, r in prep["ember"].items() if "error" in r]:
            lat, base = best.get(job), best.get("ember_fp32")
            acc = prep["accuracy"].get(job, {})
            lat_s = f"{lat * 1e3:11.2f}" if lat else f"{'-':>11}"
            ratio = f"{lat / base:14.2f}" if lat and base else f"{'-':>14}"
            rel = f"{acc['rel']:11.2e}" if acc else f"{'-':>11}"
            top1 = f"{acc['top1']:6.2f}" if acc else f"{'-':>6}"
            note = prep["ember"].get(job, {}).get("error", "")
            print(f"{name:<12} {job:<18} {lat_s} {ratio} {rel} {top1}  {note}", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

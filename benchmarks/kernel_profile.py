"""ember's kernels next to ONNX Runtime's nodes, each timed by its own profiler, as a figure a
machine loaded by other processes disturbs little: each kernel's (node's) 10th percentile over
many runs, summed over the model.

On a few shared cores a whole run of a model at two threads is often preempted somewhere, and its
median says more about the load than about the model; a single kernel of tens of microseconds
mostly runs undisturbed, so its 10th percentile is its time on a quiet machine, and their sum the
model's, less what lies between the kernels. ember's come from its profiling entry
(`cm.profile`: a timestamp after each kernel call), ONNX Runtime's from its session profile (each
node's kernel time); each runtime runs in its own process, the two taking turns over --rounds
rounds, and each kernel keeps its best round. The table lists both in run order.

    python benchmarks/kernel_profile.py --model mobilenet_v2 [--threads 2] [--runs 300] [--rounds 2]

--model takes the zoo's models (benchmarks/models) and the hub's (benchmarks/models/hub.py:
tv_densenet121, ...; EMBER_HUB_LIBS names torchvision's and timm's folder).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.compare import prepare, run_child  # noqa: E402


def measure(runtime: str, folder: Path, runs: int, threads: int) -> dict:
    """[name, p10 microseconds] per kernel (node) in run order, in this process."""
    inputs = [np.load(folder / f"input{k}.npy") for k in range(len(list(folder.glob("input*.npy"))))]
    if runtime == "ember":
        import ember

        cm = ember.load(folder / "ember", num_threads=threads)
        return {"kernels": [[k.name, k.p10_us] for k in cm.profile(*inputs, repeat=runs).kernels]}
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.enable_profiling = threads, True
    opts.profile_file_prefix = str(folder / "ort_profile")
    sess = ort.InferenceSession(str(folder / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    feed = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
    for _ in range(runs):
        sess.run(None, feed)
    times: dict[str, list[float]] = {}
    for event in json.loads(Path(sess.end_profiling()).read_text()):
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            times.setdefault(event["name"].removesuffix("_kernel_time"), []).append(event["dur"])
    return {"kernels": [[name, float(np.percentile(d, 10))] for name, d in times.items()]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--measure", choices=["ember", "onnxruntime"])
    ap.add_argument("--folder")
    args = ap.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, Path(args.folder), args.runs, args.threads)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        prep = prepare(args.model, args.small, Path(tmp), {"ember": {}}, onnx=True)
        if "error" in prep["ember"]["ember"] or "onnx_error" in prep:
            sys.exit(f"{args.model}: {prep['ember']['ember'].get('error') or prep['onnx_error']}")
        best: dict[str, list] = {}
        for _ in range(args.rounds):
            for runtime in ("ember", "onnxruntime"):
                got = run_child(["--measure", runtime, "--folder", tmp, "--runs", str(args.runs),
                                 "--threads", str(args.threads)], __file__)
                if "error" in got:
                    sys.exit(f"{runtime}: {got['error']}")
                old = best.get(runtime)
                best[runtime] = got["kernels"] if old is None else [
                    [name, min(t, t0)] for (name, t), (_, t0) in zip(got["kernels"], old)]
    ember_k, ort_k = best["ember"], best["onnxruntime"]
    print(f"{args.model}, {args.threads} threads: each kernel's 10th percentile of {args.runs} runs (us), "
          f"best of {args.rounds} rounds")
    for k in range(max(len(ember_k), len(ort_k))):
        e = f"{ember_k[k][1]:9.1f}  {ember_k[k][0][:40]:40s}" if k < len(ember_k) else " " * 51
        o = f"{ort_k[k][1]:9.1f}  {ort_k[k][0][-50:]}" if k < len(ort_k) else ""
        print(f"{e}  {o}")
    e_sum, o_sum = sum(t for _, t in ember_k), sum(t for _, t in ort_k)
    print(f"sum: ember {e_sum:.0f} us ({len(ember_k)} kernels), onnxruntime {o_sum:.0f} us ({len(ort_k)} nodes): "
          f"{e_sum / o_sum:.2f}x")


if __name__ == "__main__":
    main()

"""An ONNX linear layer (MatMul of a (B..., M, K) activation and a (K, N) initializer, then Add of
an (N,) bias: what torch.onnx.export writes for every nn.Linear) compiled by ember with and
without the flatten_products pass (which makes it a packed 2-D gemm), next to ONNX Runtime.

Each runtime runs in a fresh process that runs it alone; the runtimes take turns over --rounds
rounds (a slow spell of a noisy machine falls on all of them alike); the table shows each one's
median over the rounds' medians, and ratios to ember without the pass.

    python benchmarks/onnx_linear.py [--shape 1 128 768] [--n 3072] [--runs 30] [--rounds 5] [--threads 1]
                                     [--peers onnxruntime]
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

from benchmarks.compare import median_latency, run_child  # noqa: E402

VARIANTS = {"ember, products as they are": {"disabled_passes": ["flatten_products"]}, "ember": {}}


def linear_model(shape: tuple[int, ...], n: int, seed: int = 0):
    """The ONNX model y = x @ W + b, x of `shape`, W (K, n) and b (n,) initializers."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    k = shape[-1]
    w = numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*shape[:-1], n])], initializer=[w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def measure(runtime: str, folder: Path, runs: int, threads: int) -> dict:
    """One runtime's median latency in this process (an ember variant by its label)."""
    x = np.load(folder / "x.npy")
    if runtime == "onnxruntime":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        sess = ort.InferenceSession(str(folder / "model.onnx"), opts, providers=["CPUExecutionProvider"])
        return {"median": median_latency(lambda: sess.run(None, {"x": x}), runs)}
    import ember

    cm = ember.compile(str(folder / "model.onnx"), num_threads=threads, **VARIANTS[runtime])
    want = x.astype(np.float64) @ np.load(folder / "w.npy") + np.load(folder / "b.npy")
    np.testing.assert_allclose(cm(x), want, rtol=1e-3, atol=1e-3)
    kernels = " | ".join(" -> ".join(k.ops) for k in cm.kernels)
    return {"median": median_latency(lambda: cm(x), runs), "note": kernels}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", type=int, nargs="+", default=[1, 128, 768])
    ap.add_argument("--n", type=int, default=3072)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--peers", nargs="*", default=["onnxruntime"])
    ap.add_argument("--measure")
    ap.add_argument("--folder")
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, Path(args.folder), args.runs, args.threads)))
        return
    from onnx import numpy_helper

    runtimes = [*VARIANTS, *args.peers]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = linear_model(tuple(args.shape), args.n)
        (folder / "model.onnx").write_bytes(model.SerializeToString())
        for init in model.graph.initializer:
            np.save(folder / f"{init.name.lower()}.npy", numpy_helper.to_array(init).astype(np.float64))
        np.save(folder / "x.npy", np.random.default_rng(1).standard_normal(args.shape).astype(np.float32))
        medians: dict[str, list[float]] = {r: [] for r in runtimes}
        notes: dict[str, str] = {}
        for _ in range(args.rounds):
            for r in runtimes:
                got = run_child(["--measure", r, "--folder", tmp, "--runs", str(args.runs), "--threads",
                                 str(args.threads)], __file__)
                if "error" in got:
                    notes[r] = got["error"]
                    continue
                medians[r].append(got["median"])
                notes[r] = got.get("note", "")
    shape = "x".join(map(str, args.shape))
    print(f"MatMul ({shape}) x ({args.shape[-1]}x{args.n}) + Add, {args.threads} thread(s), median of {args.runs} "
          f"runs per process, {args.rounds} alternating rounds")
    base = float(np.median(medians[runtimes[0]])) if medians[runtimes[0]] else None
    for r in runtimes:
        if not medians[r]:
            print(f"{r:<28} {'-':>10}  {notes.get(r, '')}")
            continue
        ms = float(np.median(medians[r])) * 1e3
        ratio = f"{base * 1e3 / ms:6.2f}x" if base else ""
        print(f"{r:<28} {ms:8.3f} ms  {ratio}  {notes.get(r, '')}")


if __name__ == "__main__":
    main()

"""Control flow: an ONNX Scan (an RNN-like cell over a sequence, h <- tanh(x_t W + h U + b); ember
runs it as a loop in its C entry function), ember against ONNX Runtime: each runtime in its own
process, in alternating rounds; the median of the per-round medians, and ember's speed relative
to ONNX Runtime (above 1: ember faster).

    python benchmarks/control_flow.py [--steps 64] [--hidden 128] [--rounds 5] [--runs 50] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def scan_model(steps: int, hidden: int):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w, u = (numpy_helper.from_array((rng.standard_normal((hidden, hidden)) / hidden ** 0.5).astype("float32"), n)
            for n in ("w", "u"))
    b = numpy_helper.from_array(rng.standard_normal(hidden).astype("float32") * 0.1, "b")
    t = TensorProto.FLOAT
    body = helper.make_graph([
        helper.make_node("MatMul", ["x_t", "w"], ["xw"]), helper.make_node("MatMul", ["h_in", "u"], ["hu"]),
        helper.make_node("Add", ["xw", "hu"], ["s"]), helper.make_node("Add", ["s", "b"], ["sb"]),
        helper.make_node("Tanh", ["sb"], ["h_out"]), helper.make_node("Identity", ["h_out"], ["y"]),
    ], "cell", [helper.make_tensor_value_info("h_in", t, [1, hidden]),
                helper.make_tensor_value_info("x_t", t, [1, hidden])],
        [helper.make_tensor_value_info("h_out", t, [1, hidden]), helper.make_tensor_value_info("y", t, [1, hidden])])
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Scan", ["h0", "xs"], ["h", "ys"], body=body, num_scan_inputs=1)], "rnn",
        [vi("h0", t, [1, hidden]), vi("xs", t, [steps, 1, hidden])],
        [vi("h", t, [1, hidden]), vi("ys", t, [steps, 1, hidden])], [w, u, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def inputs(steps: int, hidden: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal(shape).astype("float32") for shape in ((1, hidden), (steps, 1, hidden))]


def worker(runtime: str, path: str, steps: int, hidden: int, runs: int, threads: int) -> None:
    """Times one runtime in this process; prints the median seconds and the first entries of h."""
    xs = inputs(steps, hidden)
    if runtime == "ember":
        import ember

        model = ember.compile(path, num_threads=threads)
        run = lambda: model(*xs)  # noqa: E731
    else:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feeds = {"h0": xs[0], "xs": xs[1]}
        run = lambda: session.run(None, feeds)  # noqa: E731
    out = run()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    print(json.dumps({"median": statistics.median(times), "h": np.asarray(out[0]).ravel()[:4].tolist()}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--worker", nargs=2, metavar=("RUNTIME", "PATH"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a.worker[0], a.worker[1], a.steps, a.hidden, a.runs, a.threads)
        return
    import onnx

    path = os.path.join(tempfile.mkdtemp(prefix="ember-cf-"), "scan.onnx")
    onnx.save(scan_model(a.steps, a.hidden), path)
    medians: dict[str, list[float]] = {"ember": [], "onnxruntime": []}
    first: dict[str, list[float]] = {}  # the first entries of h, to check the runtimes agree
    for r in range(a.rounds):
        for runtime in (("ember", "onnxruntime") if r % 2 == 0 else ("onnxruntime", "ember")):
            args = [sys.executable, __file__, "--worker", runtime, path, "--steps", str(a.steps), "--hidden",
                    str(a.hidden), "--runs", str(a.runs), "--threads", str(a.threads)]
            res = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            medians[runtime].append(res["median"])
            first[runtime] = res["h"]
    np.testing.assert_allclose(first["ember"], first["onnxruntime"], rtol=1e-4, atol=1e-5)
    e, o = statistics.median(medians["ember"]), statistics.median(medians["onnxruntime"])
    print(f"Scan of {a.steps} steps, hidden {a.hidden}, {a.threads} thread(s), median of {a.rounds} rounds:")
    print(f"  ember        {e * 1e6:9.1f} us  ({e / a.steps * 1e6:.2f} us per step)")
    print(f"  onnxruntime  {o * 1e6:9.1f} us  ({o / a.steps * 1e6:.2f} us per step)")
    print(f"  ember / onnxruntime speed: {o / e:.2f}x")


if __name__ == "__main__":
    main()

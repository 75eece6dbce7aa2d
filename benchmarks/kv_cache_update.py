"""The key/value cache update of a decode step: ONNX TensorScatter (opset 24) writing one new
position into a (batch, heads, max_seq, head_dim) float32 cache, ember against ONNX Runtime and
NumPy (copy, then assign the window): each runtime in its own process, in alternating rounds; the
median of the per-round medians, and each peer's time over ember's (above 1: ember faster).
Both ember and ONNX Runtime copy the cache into the present cache (their outputs are the
caller's arrays): the update is a streaming copy of the cache plus a few rows.

    python benchmarks/kv_cache_update.py [--heads 32] [--seq 1024] [--dim 128] [--rounds 5] [--runs 50] [--threads 1]
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

RUNTIMES = ("ember", "onnxruntime", "numpy")


def scatter_model(heads: int, seq: int, dim: int):
    import onnx
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    node = helper.make_node("TensorScatter", ["past", "new", "at"], ["present"], axis=2, mode="linear")
    graph = helper.make_graph([node], "kv_update", [vi("past", TensorProto.FLOAT, [1, heads, seq, dim]),
                                                    vi("new", TensorProto.FLOAT, [1, heads, 1, dim]),
                                                    vi("at", TensorProto.INT64, [1])],
                              [vi("present", TensorProto.FLOAT, [1, heads, seq, dim])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    onnx.checker.check_model(model)
    return model


def inputs(heads: int, seq: int, dim: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.standard_normal((1, heads, seq, dim)).astype("float32"),
            rng.standard_normal((1, heads, 1, dim)).astype("float32"), np.array([seq // 2], "int64")]


def worker(runtime: str, path: str, heads: int, seq: int, dim: int, runs: int, threads: int) -> None:
    """Times one runtime in this process; prints the median seconds and a checksum of its output."""
    past, new, at = inputs(heads, seq, dim)
    if runtime == "ember":
        import ember

        model = ember.compile(path, num_threads=threads)
        run = lambda: model(past, new, at)  # noqa: E731
    elif runtime == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.log_severity_level = 3  # (its warning that it copies the cache, every call)
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feeds = {"past": past, "new": new, "at": at}
        run = lambda: session.run(None, feeds)[0]  # noqa: E731
    else:
        def run():
            present = past.copy()
            present[:, :, at[0]:at[0] + 1] = new
            return present
    out = np.asarray(run())
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    print(json.dumps({"median": statistics.median(times), "sum": float(out.sum(dtype="float64"))}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--worker", nargs=2, metavar=("RUNTIME", "PATH"), help=argparse.SUPPRESS)
    a = p.parse_args()
    sizes = ["--heads", str(a.heads), "--seq", str(a.seq), "--dim", str(a.dim)]
    if a.worker:
        worker(a.worker[0], a.worker[1], a.heads, a.seq, a.dim, a.runs, a.threads)
        return
    import onnx

    path = os.path.join(tempfile.mkdtemp(prefix="ember-kv-"), "kv_update.onnx")
    onnx.save(scatter_model(a.heads, a.seq, a.dim), path)
    medians: dict[str, list[float]] = {r: [] for r in RUNTIMES}
    sums: dict[str, float] = {}
    for r in range(a.rounds):
        order = RUNTIMES[r % len(RUNTIMES):] + RUNTIMES[:r % len(RUNTIMES)]
        for runtime in order:
            args = [sys.executable, __file__, "--worker", runtime, path, *sizes, "--runs", str(a.runs), "--threads",
                    str(a.threads)]
            res = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            medians[runtime].append(res["median"])
            sums[runtime] = res["sum"]
    assert len(set(sums.values())) == 1, f"the runtimes disagree: {sums}"
    mb = a.heads * a.seq * a.dim * 4 / 2**20
    print(f"TensorScatter of one position into a (1, {a.heads}, {a.seq}, {a.dim}) float32 cache ({mb:.0f} MiB), "
          f"{a.threads} thread(s), median of {a.rounds} rounds:")
    e = statistics.median(medians["ember"])
    for runtime in RUNTIMES:
        m = statistics.median(medians[runtime])
        ratio = "" if runtime == "ember" else f"  ({m / e:.2f}x ember's time)"
        print(f"  {runtime:12s} {m * 1e6:9.1f} us  {mb / 1024 / m:6.1f} GiB/s of cache{ratio}")


if __name__ == "__main__":
    main()

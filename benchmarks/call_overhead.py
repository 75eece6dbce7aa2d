"""What one call costs above the work: a one-add model (x + y, float32[1, 16]) called in a tight loop.

Each runtime runs in its own process, the processes take turns over --rounds rounds, and each
number is the best per-call median: ember called with NumPy arrays and with torch tensors (the
compiled call path, ember.runtime.fastcall), ember's Python call path (EMBER_FAST_CALL=0), the
native entry alone (ctypes, its arguments prepared once: the floor ember's path is measured
against), ONNX Runtime's `run` on the same add, and torch eager's `x + y`. One thread each.

    python benchmarks/call_overhead.py [--calls 100000] [--rounds 3]
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHAPE = (1, 16)
RUNTIMES = ("ember numpy", "ember torch", "ember python path", "native entry", "onnxruntime", "torch eager")


def per_call(fn, calls: int) -> float:
    """Median seconds per call over 5 loops of `calls` // 5 calls each."""
    for _ in range(1000):
        fn()
    n = max(1, calls // 5)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - start) / n)
    return statistics.median(times)


def add_model(folder: Path):
    """The one-add model: compiled once (a saved artifact), loaded by each ember process."""
    import ember

    if (folder / "add.ember").exists():
        return ember.load(folder / "add.ember")
    import torch

    class Add(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    cm = ember.compile(Add(), example_inputs=(torch.randn(*SHAPE), torch.randn(*SHAPE)))
    cm.save(folder / "add.ember")
    return cm


def onnx_add(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    vals = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(SHAPE)) for n in ("x", "y", "z")]
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add", vals[:2], vals[2:])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def measure(runtime: str, folder: Path, calls: int) -> float:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(SHAPE, dtype=np.float32) for _ in range(2))
    if runtime.startswith("ember") or runtime == "native entry":
        cm = add_model(folder)
        np.testing.assert_allclose(cm(a, b), a + b, rtol=1e-6)
        if runtime == "ember torch":
            import torch

            x, y = torch.from_numpy(a), torch.from_numpy(b)
            return per_call(lambda: cm(x, y), calls)
        if runtime == "native entry":
            _outputs, args, _keep = cm._arguments((a, b))
            entry = cm._entry
            return per_call(lambda: entry(*args), calls)
        return per_call(lambda: cm(a, b), calls)
    if runtime == "onnxruntime":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(folder / "add.onnx"), opts, providers=["CPUExecutionProvider"])
        feed = {"x": a, "y": b}
        return per_call(lambda: sess.run(None, feed), calls)
    import torch

    torch.set_num_threads(1)
    x, y = torch.from_numpy(a), torch.from_numpy(b)
    return per_call(lambda: x + y, calls)


def child(runtime: str, folder: Path, calls: int) -> float | str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EMBER_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    if runtime == "ember python path":
        env["EMBER_FAST_CALL"] = "0"
    run = subprocess.run([sys.executable, __file__, "--measure", runtime, "--folder", str(folder),
                          "--calls", str(calls)], capture_output=True, text=True, env=env)
    lines = run.stdout.strip().splitlines()
    if run.returncode != 0 or not lines:
        return f"failed: {(run.stderr.strip().splitlines() or ['no output'])[-1][:100]}"
    return json.loads(lines[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--measure")
    ap.add_argument("--folder")
    args = ap.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, Path(args.folder), args.calls)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        add_model(folder)
        onnx_add(folder / "add.onnx")
        got: dict[str, list] = {r: [] for r in RUNTIMES}
        for _ in range(args.rounds):
            for r in RUNTIMES:
                got[r].append(child(r, folder, args.calls))
    best = {r: min((t for t in ts if isinstance(t, float)), default=None) for r, ts in got.items()}
    native = best["native entry"]
    print(f"one add, float32{list(SHAPE)}, 1 thread; each runtime in its own process, {args.rounds} rounds, "
          f"best median of 5 x {args.calls // 5} calls")
    print(f"{'runtime':<20} {'us per call':>12} {'above native entry':>19}")
    for r in RUNTIMES:
        t = best[r]
        if t is None:
            print(f"{r:<20} {next(x for x in got[r] if isinstance(x, str))}")
            continue
        above = f"{(t - native) * 1e6:19.2f}" if native is not None and r.startswith("ember") else f"{'':>19}"
        print(f"{r:<20} {t * 1e6:12.2f} {above}")
    print("native entry: ember's entry function through ctypes with its arguments prepared once (ctypes' own "
          "cost included: the C path calls the entry directly)")


if __name__ == "__main__":
    main()

"""Batch-1 latency of zoo models on the GPU: ember's launches replayed as one CUDA graph against the
same model launching every kernel from Python (EMBER_CUDA_GRAPHS off: `cm.use_graphs = False`),
torch eager and torch.compile(mode="reduce-overhead") (its CUDA graphs), in one process on one GPU.

Each model is compiled once for target "cuda", checked against torch eager on the GPU
(||out - ref|| / ||ref|| <= 1e-4, fp32), then timed with CUDA events (cuda_timing.timed: medians
after a warm-up), inputs torch CUDA tensors used in place. "host us" is the host's time issuing
the latest call's work (cm.host_us: input copies, cuGraphLaunch, output copies; or every launch),
"vs eager" torch eager's latency over the row's. A model or a peer that fails prints its error and
the others still run.

    python benchmarks/cuda_graphs.py [--models resnet18 mobilenet_v2 mlp] [--small] [--runs 50]
                                     [--no-torch-compile]
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

TOLERANCE = 1e-4


def run_model(name: str, small: bool, runs: int, torch_compile: bool, rows: list) -> None:
    import torch
    from cuda_timing import timed
    from models import ZOO

    import ember

    model, inputs = ZOO[name](small=small)
    model = model.eval()
    t0 = time.perf_counter()
    cm = ember.compile(model, inputs, target="cuda")
    compile_s = time.perf_counter() - t0
    model = model.cuda()
    xs = tuple(x.cuda() for x in inputs)
    # fp32 is IEEE fp32 for every runtime: cuDNN's convolutions would take TF32 by default
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        expected = model(*xs)
        for use_graphs in (True, False):
            cm.use_graphs = use_graphs
            got = cm(*xs)
            got = cm(*xs)  # from the second call, one graph where they are on
            error = float(torch.linalg.norm(got - expected) / torch.linalg.norm(expected))
            if error > TOLERANCE:
                raise AssertionError(f"{name}: relative error {error:.2e} past {TOLERANCE} (graphs {use_graphs})")
            t = timed(lambda: cm(*xs), runs)
            impl = "ember, one CUDA graph" if use_graphs else "ember, launches from Python"
            rows.append((name, impl, t, cm.host_us, compile_s, cm.summary().splitlines()[-1]))
        rows.append((name, "torch eager", timed(lambda: model(*xs), runs), None, None, ""))
        if torch_compile:
            try:
                t0 = time.perf_counter()
                compiled = torch.compile(model, mode="reduce-overhead")
                for _ in range(3):  # recorded on the second or third call
                    compiled(*xs)
                torch.cuda.synchronize()
                first_s = time.perf_counter() - t0
                rows.append((name, 'torch.compile "reduce-overhead"', timed(lambda: compiled(*xs), runs), None,
                             first_s, ""))
            except Exception:  # the peer's failure must not hide ember's numbers
                print(f"--- torch.compile of {name} failed:")
                traceback.print_exc(limit=4, file=sys.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2", "mlp"])
    parser.add_argument("--small", action="store_true", help="the zoo's reduced-size variants")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--no-torch-compile", dest="torch_compile", action="store_false")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no GPU: torch.cuda.is_available() is False")
        return 1
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows: list = []
    failed = False
    for name in args.models:
        try:
            run_model(name, args.small, args.runs, args.torch_compile, rows)
        except Exception:  # one model's failure must not hide the others' numbers
            failed = True
            print(f"--- {name} failed:")
            traceback.print_exc(limit=6, file=sys.stdout)
    print(f"\n{'model':14} {'implementation':32} {'median ms':>10} {'host us':>9} {'vs eager':>9} {'compile s':>10}")
    for name, impl, t, host_us, compile_s, _ in rows:
        eager = next((r[2] for r in rows if r[0] == name and r[1] == "torch eager"), None)
        host = "" if host_us is None else f"{host_us:.0f}"
        ratio = "" if eager is None else f"{eager / t:.2f}x"
        compiled = "" if compile_s is None else f"{compile_s:.1f}"
        print(f"{name:14} {impl:32} {t * 1e3:10.3f} {host:>9} {ratio:>9} {compiled:>10}")
    for name, impl, *_, summary in rows:
        if summary:
            print(f"{name}, {impl}: {summary}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""A decode step's small GEMVs, one kernel at a time: float32 weights in the GEMV's panels
(ember.passes.pack_weights) and row-major (the pass disabled), NumPy's and torch's sgemv on the
same weights (x @ W; torch on --threads threads, NumPy's BLAS on its own count: set
OPENBLAS_NUM_THREADS to match), int8 weights on the float32 GEMV (every code widened to a float
and FMA'd; ember.codegen.c_gemm_nbits) against the same weights on the row quantized per group
and vpdpbusd (ember.codegen.c_gemv_nbits_vnni, where the target has VNNI and VBMI; the
quantize_rows pass disabled or not), and int4 on its VNNI GEMV beside them.

For each shape K x N of GPT-2 small's and the LLaMA-architecture model's layers (q, k and v as one
product, as fuse_siblings makes them; gate and up as one) a chain x -> x W1 -> (x W1) W2 -> ...
of pairs K x N, N x K, more pairs than fit a 32 MiB L3 (at least 64 MB of weights), so that each
call reads its weights from memory. Each variant's kernels are profiled (cm.profile: wall clock,
each call's OpenMP fork and join included) --rounds times, the variants alternating in one process;
a shape's figure is its kernel's best 10th percentile per call over the rounds (on a shared machine
the least disturbed) and its best median CPU time of the calling thread (at one thread the whole
kernel's, which waiting for a core does not inflate), its GB/s the weight bytes (codes and scales)
over the wall figure, next to the copy
bandwidth measured in the same process before and after (benchmarks/decode.py's copy_gbs: read and
write bytes). quantize_groups' time (once per x a call) is printed beside the VNNI rows: a decode
step pays it once per input that several products share.

    python benchmarks/gemv_small.py [--threads 2] [--rounds 4] [--repeat 100] [--shapes 768x1280,768x768]
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = ((768, 1280), (768, 768), (768, 4096), (2048, 768), (768, 2304), (768, 3072), (3072, 768))
VARIANTS = {  # name: ember.compile's options
    "float32 GEMV": {},
    "float32 row-major GEMV": {"disabled_passes": ("pack_weights",)},
    "int8 float32 GEMV": {"weights": "int8", "disabled_passes": ("quantize_rows",)},
    "int8 VNNI GEMV": {"weights": "int8"},
    "int4 VNNI GEMV": {"weights": "int4", "group_size": 128},
}


def chain(k: int, n: int, min_bytes: float = 64e6):
    """x (1, K) through pairs of products K x N and N x K, enough pairs for `min_bytes` of int8."""
    from ember.graph.core import Graph, TensorType
    from ember.ops.nodes import add_op

    rng = np.random.default_rng(0)
    g = Graph(name=f"gemv_{k}x{n}")
    (x,) = [g.add_input("x", TensorType((1, k)))]
    for i in range(int(np.ceil(min_bytes / (2 * k * n)))):
        for a, b, name in ((k, n, "w"), (n, k, "v")):
            w = g.add_constant((rng.standard_normal((a, b)) / np.sqrt(a)).astype("float32"), f"{name}{i}")
            (x,) = add_op(g, "gemm", [x, w])
    g.set_outputs([x])
    return g


def per_call(model, x, repeat: int) -> dict[tuple, tuple[float, float]]:
    """Each kernel's 10th-percentile wall and median CPU microseconds per call (the calling
    thread's: at one thread the kernel's whole cost), by (op, K, N) of its product."""
    profile = model.profile(x, repeat=repeat)
    nodes = {n.name: n for n in model.graph.nodes}
    out = {}
    for info, t in zip(model.kernels, profile.kernels):
        node = next(nodes[name] for name in info.nodes if name in nodes)
        key = (node.op, node.inputs[0].shape[1], node.outputs[0].shape[1] if node.op == "gemm" else node.attrs.get("n"))
        out[key] = (t.p10_us / t.calls, (t.cpu_us or np.nan) / t.calls)
    return out


def blas_per_call(graph, k: int, n: int, repeat: int) -> dict[tuple, tuple[float, float]]:
    """NumPy's and torch's x @ W over the chain's weights (each shape's matrices in turn, x a row
    of random values), as per_call's figures, by (library, K, N)."""
    import time

    import torch

    out = {}
    for rows, cols, prefix in ((k, n, "w"), (n, k, "v")):
        mats = [w for name, w in graph.constants.items() if name.startswith(prefix)]
        x = np.random.default_rng(2).standard_normal((1, rows)).astype(np.float32)
        tensors = [torch.from_numpy(np.array(w)) for w in mats]  # (writable copies: the graph's are read-only)
        for lib, xs, ws in (("numpy", x, mats), ("torch", torch.from_numpy(x), tensors)):
            walls, cpus = [], []
            for _ in range(max(3, repeat // 10)):
                wall, cpu = time.perf_counter(), time.thread_time()
                for w in ws:
                    xs @ w
                cpus.append((time.thread_time() - cpu) / len(ws) * 1e6)
                walls.append((time.perf_counter() - wall) / len(ws) * 1e6)
            out[(lib, rows, cols)] = (float(np.percentile(walls, 10)), float(np.median(cpus)))
    return out


def main() -> None:
    import torch

    import ember
    from benchmarks.decode import copy_gbs
    from ember.target import Target

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--shapes", default=",".join(f"{k}x{n}" for k, n in SHAPES), help="K x N of each chain")
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, features {' '.join(sorted(Target().features))}")
    torch.set_num_threads(args.threads)
    for k, n in (map(int, shape.split("x")) for shape in args.shapes.split(",")):
        graph = chain(k, n)
        models = {name: ember.compile(graph, num_threads=args.threads, **opts) for name, opts in VARIANTS.items()}
        x = np.random.default_rng(1).standard_normal((1, k)).astype(np.float32)
        nbytes = {name: {} for name in models}
        for name, m in models.items():
            for node in m.graph.nodes:
                if node.op == "gemm":
                    nbytes[name][("gemm", node.inputs[0].shape[1], node.outputs[0].shape[1])] = k * n * 4
                if node.op == "gemm_nbits":
                    key = (node.op, node.inputs[0].shape[1], node.attrs["n"])
                    weights = node.inputs[3 if node.attrs["act"] != "auto" else 1:]
                    nbytes[name][key] = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in weights)
        copies = [copy_gbs(5)]
        peers = ("NumPy sgemv", "torch sgemv")
        nbytes.update({peer: {(peer, k, n): k * n * 4, (peer, n, k): k * n * 4} for peer in peers})
        best: dict[str, dict] = {name: {} for name in (*models, *peers)}
        for _ in range(args.rounds):
            for name, m in models.items():
                for key, us in per_call(m, x, args.repeat).items():
                    best[name][key] = np.minimum(best[name].get(key, np.inf), us)
            for (lib, rows, cols), us in blas_per_call(graph, k, n, args.repeat).items():
                peer = peers[lib == "torch"]
                best[peer][(peer, rows, cols)] = np.minimum(best[peer].get((peer, rows, cols), np.inf), us)
        copies.append(copy_gbs(5))
        copy = max(copies)
        print(f"\n{k} x {n} and {n} x {k}, {args.threads} thread(s), copy {copy:.1f} GB/s "
              f"(before, after: {copies[0]:.1f}, {copies[1]:.1f}):")
        for name in (*models, *peers):
            for key in sorted(nbytes[name]):
                us, cpu = best[name][key]
                gbs = nbytes[name][key] / us / 1e3
                rows = best[name].get(("quantize_groups", key[1], None))
                extra = f"; quantize_groups {rows[0]:.1f} us" if rows is not None else ""
                print(f"  {name:22s} {key[1]:5d} x {key[2]:<5d} {nbytes[name][key] / 1e6:5.2f} MB {us:7.1f} us "
                      f"{gbs:5.1f} GB/s = {gbs / copy:4.0%} of copy, CPU {cpu:6.1f} us{extra}")


if __name__ == "__main__":
    main()

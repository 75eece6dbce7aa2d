"""Record a data set for the cost model: random schedules of a few small kernels, each measured.

    python benchmarks/record_cost_data.py [--per-task 150] [--seed 0] [--threads 1] [--out FILE] [--timings]

Each task (TASKS: te definitions by name) is scheduled at random with ember's sampling
primitives (`sample_schedule`: spatial loops tiled in four levels and reduction loops in two,
reordered SSRSRS, an optional local accumulator or epilogue at a sampled tile loop, padding
inlined or computed at the tile, the outer tiles fused and parallel, the innermost spatial loop
vectorized or not, an auto-unroll limit), built, checked against the unscheduled kernel and
timed with ember.bench (`record_task`), on one thread unless told otherwise. The file holds,
per task, the te definition's name and the list of [trace (as JSON), latency in seconds (null:
failed)]; tests/tune/test_cost_model.py trains the cost model on it, extracting features afresh
from the replayed traces.

`--timings` times feature extraction next to full lowering on a tiled 1024^3 GEMM instead.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "tune" / "data" / "cost_data.json"


def gemm(n: int = 256):
    from ember import te

    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def gemm_bias_relu(n: int = 256):
    from ember import te

    A, B, C = gemm(n)
    bias = te.placeholder((n,), name="bias")
    out = te.compute((n, n), lambda i, j: te.max(C[i, j] + bias[j], 0.0), name="out")
    return [A, B, bias, out]


def conv2d(c: int = 32, hw: int = 28, k: int = 32, r: int = 3):
    """NCHW, stride 1, padding r // 2 as its own stage."""
    from ember import te

    data = te.placeholder((1, c, hw, hw), name="data")
    weight = te.placeholder((k, c, r, r), name="weight")
    p, size = r // 2, hw + 2 * (r // 2)
    pad = te.compute((1, c, size, size), lambda n, cc, y, x: te.if_then_else(
        te.all(y >= p, y < hw + p, x >= p, x < hw + p), data[n, cc, y - p, x - p], 0.0), name="pad")
    rc, ry, rx = te.reduce_axis((0, c), name="rc"), te.reduce_axis((0, r), name="ry"), te.reduce_axis((0, r), name="rx")
    out = te.compute((1, k, hw, hw), lambda n, kk, y, x: te.sum(
        pad[n, rc, y + ry, x + rx] * weight[kk, rc, ry, rx], axis=[rc, ry, rx]), name="conv")
    return [data, weight, out]


TASKS = {"gemm_256": gemm, "gemm_bias_relu_256": gemm_bias_relu, "conv2d_32x28x28_k32_3x3": conv2d}


def task_named(name: str):
    from ember.tune import task_from_tensors

    return task_from_tensors(TASKS[name](), name)


def sample_schedule(task, seed: int):
    """A random multi-level tiled schedule of the task's one reduction block (the anchor)."""
    sch = task.schedule(seed=seed)
    blocks = [r.block for r in sch.all_realizes()]
    anchor = next(b for b in blocks if b.is_reduction)
    output = next(b for b in blocks if any(w.buffer is task.func.params[-1] for w in b.writes))
    producers = [b.name for b in blocks if b is not anchor and b is not output]
    block = sch.get_block(anchor.name)
    loops = sch.get_loops(block)
    spatial = sum(iv.kind == "spatial" for iv in anchor.iter_vars)
    s = [sch.split(lp, sch.sample_perfect_tile(lp, n=4, max_innermost_factor=16)) for lp in loops[:spatial]]
    r = [sch.split(lp, sch.sample_perfect_tile(lp, n=2, max_innermost_factor=16)) for lp in loops[spatial:]]
    level = lambda tiles, k: [t[k] for t in tiles]  # noqa: E731
    sch.reorder(*level(s, 0), *level(s, 1), *level(r, 0), *level(s, 2), *level(r, 1), *level(s, 3))
    tile = sch.sample_loop([s[-1][0], s[-1][1]])
    tail = None  # the block that copies the tile out, when there is one
    if sch.sample_categorical([0, 1], [0.3, 0.7]):
        tail = sch.cache_write(block, 0, "local")
        if output is not anchor:
            sch.compute_inline(tail)
            tail = None
    if output is not anchor:
        tail = sch.get_block(output.name)
        sch.reverse_compute_at(tail, tile)
    elif tail is not None:
        sch.reverse_compute_at(tail, tile)
    for name in producers:
        producer = sch.get_block(name)
        if sch.sample_categorical([0, 1], [0.7, 0.3]):
            sch.compute_at(producer, tile)
        else:
            sch.compute_inline(producer)
    fused = sch.fuse(*level(s, 0))
    sch.parallel(fused)
    if sch.sample_categorical([0, 1], [0.2, 0.8]):
        sch.vectorize(s[-1][3])
        if tail is not None:
            sch.vectorize(sch.get_loops(tail)[-1])
    sch.annotate(fused, "pragma_auto_unroll_max_step", sch.sample_categorical([0, 16, 64, 512], [1, 1, 1, 1]))
    return sch


def build_and_check(task, trace, args, reference):
    """The candidate's kernel and its own copy of the arguments, or None when it fails to build
    or computes a wrong answer."""
    try:
        kernel = task.build(trace)
        out = [a.copy() for a in args]
        kernel(*out)
    except Exception as e:  # a failed candidate is data too
        print(f"  failed: {type(e).__name__}: {e}", file=sys.stderr)
        return None
    if not all(np.allclose(o, ref, rtol=1e-3, atol=1e-3) for o, ref in zip(out[task.num_inputs:], reference)):
        print("  wrong result", file=sys.stderr)
        return None
    return kernel, out


def record_task(name: str, per_task: int, seed: int) -> list:
    """[trace JSON, seconds or None] of per_task distinct sampled schedules. Each latency is the
    smaller of two medians (ember.bench) taken in separate passes over all candidates, so that a
    burst of load on a shared machine spoils no single candidate."""
    import ember
    from ember.errors import ScheduleError

    task = task_named(name)
    args = task.random_args(np.random.default_rng(seed))
    reference = [a.copy() for a in args]
    task.build(None)(*reference)
    reference = reference[task.num_inputs:]
    traces, built, attempt = {}, [], seed * 100_000
    while len(traces) < per_task:
        attempt += 1
        try:
            trace = sample_schedule(task, attempt).trace
        except ScheduleError:
            continue
        text = trace.to_json()
        if text not in traces:
            traces[text] = trace
            built.append(build_and_check(task, trace, args, reference))
            print(f"{name}: built {len(traces)}/{per_task}", file=sys.stderr)
    latencies = [[] for _ in built]
    for order in (range(len(built)), reversed(range(len(built)))):
        for k in order:
            if built[k] is not None:
                kernel, out = built[k]
                latencies[k].append(ember.bench(kernel, *out, repeat=7, min_time=0.03).median)
    return [[json.loads(text), min(lat) if lat else None] for text, lat in zip(traces, latencies)]


def timings(repeat: int = 20) -> None:
    """Feature extraction (lowering up to unrolling, then the walk) next to full lowering and to
    replaying the trace, on a 4-level tiled 1024^3 GEMM; medians in milliseconds."""
    import ember
    from ember.tune import extract_features, task_from_tensors
    from ember.tune.features import lower_for_features

    task = task_from_tensors(gemm(1024), "gemm_1024")
    sch = task.schedule()
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    i0, i1, i2, i3 = sch.split(i, [4, 8, 4, 8])
    j0, j1, j2, j3 = sch.split(j, [4, 4, 2, 32])
    k0, k1 = sch.split(k, [256, 4])
    sch.reorder(i0, j0, i1, j1, k0, i2, j2, k1, i3, j3)
    sch.reverse_compute_at(sch.cache_write(block, 0, "local"), j1)
    fused = sch.fuse(i0, j0)
    sch.parallel(fused)
    sch.annotate(fused, "pragma_auto_unroll_max_step", 64)
    sch.vectorize(j3)
    lowered = lower_for_features(sch.mod)

    def median_ms(fn):
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3

    print(f"replay the trace        {median_ms(lambda: task.schedule(sch.trace)):8.2f} ms")
    print(f"full lowering           {median_ms(lambda: ember.lower(sch)):8.2f} ms")
    print(f"lower_for_features      {median_ms(lambda: lower_for_features(sch.mod)):8.2f} ms")
    print(f"features of the lowered {median_ms(lambda: extract_features(lowered)):8.2f} ms")
    print(f"extract_features(mod)   {median_ms(lambda: extract_features(sch.mod)):8.2f} ms")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-task", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    ap.add_argument("--threads", type=int, default=1,
                    help="threads per kernel; one by default: on a busy machine, threads that wait for each other "
                    "at the end of a parallel loop drown the differences between schedules")
    ap.add_argument("--timings", action="store_true", help="only time feature extraction")
    args = ap.parse_args(argv)
    if args.timings:
        timings()
        return
    os.environ["EMBER_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(args.threads)
    data = {"threads": args.threads, "tasks": []}
    for name in TASKS:
        data["tasks"].append({"name": name, "candidates": record_task(name, args.per_task, args.seed)})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, separators=(",", ":")))
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB)", file=sys.stderr)


if __name__ == "__main__":
    main()

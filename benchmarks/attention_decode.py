"""One call of the decode attention routine (ember/codegen/c_attention_decode.py) at a model's
decode-step shape, its cache read from memory: microseconds a call (the routine's kernel in
cm.profile, its OpenMP fork and join included) and the cache's bytes over that time in GB/s.

Shapes: "llama", the LLaMA-architecture model's (12 query heads over 4 key/value heads, head 64),
"gpt2", GPT-2 small's (12 heads, no grouping, head 64), each an int8 cache (ember.tir.kv_int8:
rows of 68 bytes) in layout bshd with the step's own key and value appended, as the compiled
decode step calls it. From memory: the calls cycle through enough copies of the cache that
every call's rows left the 32 MiB L3 since its last call (--l3: one copy, warm in the caches).

Each shape's figures are followed by the copy bandwidth measured in the same process right
before and after (one thread's copy of 256 MiB by NumPy, read and write bytes, as STREAM's copy
and benchmarks/decode.py count it; torch's copy there left its OpenMP threads spinning beside
ember's, and ember's calls at two threads took milliseconds) and the call's GB/s as a share of
the better of the two.

--against FILE times another version of c_attention_decode.py (another checkout's) in the same
process, the two alternating round by round; the best round's median of each is printed, wall
clock and the calling thread's CPU time.

    python benchmarks/attention_decode.py [--shapes llama,gpt2] [--context 1024] [--threads 1,2]
                                          [--rounds 4] [--calls 60] [--l3] [--against FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = {"llama": (4, 3, 64), "gpt2": (12, 1, 64)}  # key/value heads, query heads each, head dim
EVICT_BYTES = 96 * 2**20  # the copies' bytes in all: three times the L3


def compile_call(heads: int, groups: int, dim: int, routine=None):
    """The SDPA step (q, k, v, k_new, v_new) compiled alone; `routine` replaces the C writer of
    the decode routine for this compile (another version's attention_decode; the kernels' C
    rendered in this process forgotten before and after, as the renderer keeps it per function)."""
    import ember
    from ember.codegen import c, routines
    from ember.graph.core import Graph, TensorType
    from ember.ops.attention import SDPA
    from ember.ops.nodes import add_op

    g = Graph(name=f"attention_decode_{heads}x{groups}")
    q = g.add_input("q", TensorType((1, 1, heads * groups, dim), "float32"))
    k = g.add_input("k", TensorType((1, "past", heads, dim + 4), "int8"))
    v = g.add_input("v", TensorType((1, "past", heads, dim + 4), "int8"))
    kn = g.add_input("kn", TensorType((1, 1, heads, dim), "float32"))
    vn = g.add_input("vn", TensorType((1, 1, heads, dim), "float32"))
    (o,) = add_op(g, SDPA, [q, k, v, kn, vn], {"layout": "bshd", "appended": True, "gqa": True})
    g.set_outputs([o])
    saved = routines.c_attention_decode
    if routine is not None:
        routines.c_attention_decode = routine
        c._RENDERED.clear()
    try:
        return ember.compile(g)
    finally:
        routines.c_attention_decode = saved
        c._RENDERED.clear()


def load_routine(path: str):
    """attention_decode of the c_attention_decode.py at `path`, imported as a module of
    ember.codegen (its relative imports resolve to this tree's)."""
    spec = importlib.util.spec_from_file_location("ember.codegen._against_attention_decode", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.attention_decode


def copy_gbs(repeat: int = 5) -> float:
    """One thread's copy of 256 MiB: read and write bytes over the fastest of `repeat`."""
    src = np.ones(64 * 2**20, np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best / 1e9


def call_us(cm, inputs: list[list[np.ndarray]], calls: int) -> tuple[float, float]:
    """The median microseconds of the attention kernel over `calls` calls, cycling through the
    input sets: wall clock and the calling thread's CPU time (at one thread the figure least
    disturbed by other processes)."""
    wall, cpu = [], []
    for i in range(calls):
        profile = cm.profile(*inputs[i % len(inputs)], repeat=1)
        kernel = max(profile.kernels, key=lambda k: k.median_us)
        wall.append(kernel.median_us)
        cpu.append(kernel.cpu_us)
    return statistics.median(wall), statistics.median(cpu)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="llama,gpt2")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--l3", action="store_true", help="one copy of the cache, warm")
    ap.add_argument("--against", help="another c_attention_decode.py, timed alternating with this one")
    args = ap.parse_args(argv)
    from ember.tir.kv_int8 import quantize_rows

    rng = np.random.default_rng(0)
    versions = {"this": None}
    if args.against:
        versions["against"] = load_routine(args.against)
    for shape in args.shapes.split(","):
        heads, groups, dim = SHAPES[shape]
        past = args.context - 1
        cache_bytes = 2 * past * heads * (dim + 4)
        copies = 1 if args.l3 else max(2, EVICT_BYTES // cache_bytes)
        q, kn, vn = (rng.uniform(-1, 1, (1, 1, n, dim)).astype(np.float32) for n in (heads * groups, heads, heads))
        inputs = [[q, *(quantize_rows(rng.standard_normal((1, past, heads, dim)).astype(np.float32)) for _ in "kv"),
                   kn, vn] for _ in range(copies)]
        models = {name: compile_call(heads, groups, dim, routine) for name, routine in versions.items()}
        for threads in (int(t) for t in args.threads.split(",")):
            before = copy_gbs()
            rounds: dict[str, list[tuple[float, float]]] = {name: [] for name in models}
            for cm in models.values():
                cm.num_threads = threads
                call_us(cm, inputs, 4)
            for _ in range(args.rounds):
                for name, cm in models.items():
                    rounds[name].append(call_us(cm, inputs, args.calls))
            copy = max(before, copy_gbs(5))
            for name, times in rounds.items():
                wall, cpu = min(t[0] for t in times), min(t[1] for t in times)
                gbs = cache_bytes / wall / 1e3
                print(f"{shape:6s} context {args.context} threads {threads} {'L3' if args.l3 else 'memory':6s} "
                      f"{name:8s} wall {wall:6.1f} us {gbs:5.1f} GB/s = {gbs / copy:4.0%} of the copy "
                      f"({copy:.1f} GB/s), CPU {cpu:6.1f} us (rounds' wall {', '.join(f'{t[0]:.1f}' for t in times)})",
                      flush=True)


if __name__ == "__main__":
    main()

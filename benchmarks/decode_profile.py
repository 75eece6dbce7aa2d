"""One decode step of GPT-2 small or the LLaMA-architecture model (benchmarks/models/decode.py's
RowStep, compiled as benchmarks/decode.py compiles it) profiled kernel by kernel: each kernel's
calls per step, its median and 10th-percentile time (cm.profile: wall clock, each kernel's
OpenMP fork and join included), the bytes it reads and writes, and those bytes over its
10th percentile (on a shared machine the least disturbed figure).

A kernel's bytes are its nodes' inputs and outputs, each counted once at the profiled context (a
weight whole, a table the step only gathers from one row, the cache's prefix read by the
attention; a `size` reads none). The cache is random rows in the step's dtype (int8 rows
quantized by ember.tir.kv_int8), the token id fixed.

    python benchmarks/decode_profile.py [--model gpt2] [--contexts 128,991] [--threads 1,2]
                                        [--weights int8] [--kv-cache int8] [--repeat 200]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cache_inputs(step, context: int, rng) -> list[np.ndarray]:
    """The step's inputs at `context` positions: a token id and random cache rows in its dtype."""
    import ml_dtypes

    from ember.tir.kv_int8 import SCALE_BYTES, quantize_rows

    out = [np.array([[5]], np.int64)]
    for t in step.spec.inputs[1:]:
        shape = [context if isinstance(d, str) else d for d in t.shape]
        if t.dtype == "int8":
            out.append(quantize_rows(rng.standard_normal(shape[:-1] + [shape[-1] - SCALE_BYTES]).astype(np.float32)))
        else:
            out.append(rng.standard_normal(shape).astype(ml_dtypes.bfloat16 if t.dtype == "bfloat16" else t.dtype))
    return out


def kernel_bytes(step, binding: dict) -> dict[str, int]:
    """Bytes each kernel reads and writes at `binding` (see the module doc)."""
    from ember import dims

    graph = step.graph
    nodes = {n.name: n for n in graph.nodes}
    readers: dict[str, set[str]] = {}
    for n in graph.nodes:
        for v in n.inputs:
            readers.setdefault(v.name, set()).add(n.name)
    outputs = {v.name for v in graph.outputs}

    def size(v) -> int:
        shape = [dims.evaluate(d, binding) for d in v.shape]
        n = int(np.prod(shape)) * (2 if v.dtype == "bfloat16" else np.dtype(v.dtype).itemsize)
        table = graph.is_constant(v) and len(shape) > 1 and \
            {nodes[r].op for r in readers.get(v.name, ())} <= {"gather", "embedding"}
        return n // shape[0] if table else n

    out = {}
    for k in step.kernels:
        mine = [nodes[name] for name in k.nodes if name in nodes]
        made = {v.name: v for n in mine for v in n.outputs}
        # what the kernel's nodes read from outside it (a size's input: none) and what is read
        # outside it of what they make: the fused operators' intermediates stay in registers
        read = {v.name: v for n in mine if n.op != "size" for v in n.inputs if v.name not in made}
        written = {name: v for name, v in made.items()
                   if name in outputs or readers.get(name, set()) - set(k.nodes)}
        out[k.name] = sum(size(v) for v in (*read.values(), *written.values()))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("gpt2", "llama"), default="gpt2")
    ap.add_argument("--contexts", default="128,991")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--weights", default="int8", help="float32, int8 or int4")
    ap.add_argument("--kv-cache", default="int8", help="float32, bf16 or int8")
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args(argv)
    from benchmarks.decode import _model
    from benchmarks.models.decode import compile_step

    model = _model(args.model, small=False)
    weights = None if args.weights == "float32" else args.weights
    step = compile_step(model, 128, 1024, kv_cache=args.kv_cache, weights=weights, group_size=128)
    rng = np.random.default_rng(0)
    for context in (int(c) for c in args.contexts.split(",")):
        inputs = cache_inputs(step, context, rng)
        nbytes = kernel_bytes(step, {step.spec.symbols[0]: context})
        for threads in (int(t) for t in args.threads.split(",")):
            step.num_threads = threads
            step(*inputs)
            profile = step.profile(*inputs, repeat=args.repeat)
            p10 = sum(k.p10_us for k in profile.kernels)
            print(f"\n{args.model} {args.weights} weights, {args.kv_cache} cache, context {context}, {threads} "
                  f"thread(s): {profile.total_us:.0f} us a step (median), kernels' 10th percentiles {p10:.0f} us, "
                  f"{sum(nbytes.values()) / 1e6:.1f} MB: {sum(nbytes.values()) / p10 / 1e3:.1f} GB/s")
            print(f"  {'kernel':<36}{'calls':>6}{'median us':>11}{'p10 us':>9}{'KB':>10}{'GB/s':>8}")
            for k in profile.kernels:
                b = nbytes.get(k.name, 0)
                print(f"  {k.name[:35]:<36}{k.calls:>6}{k.median_us:>11.1f}{k.p10_us:>9.1f}{b / 1e3:>10.1f}"
                      f"{b / k.p10_us / 1e3 if k.p10_us else 0:>8.1f}")


if __name__ == "__main__":
    main()

"""One decode step of GPT-2 small or the LLaMA-architecture model (benchmarks/models/decode.py's
RowStep, compiled as benchmarks/decode.py compiles it) accounted for in one process: each
kernel's calls per step, its median and 10th-percentile time (cm.profile: wall clock, each
kernel's OpenMP fork and join included), the bytes it reads and writes, those bytes over its
10th percentile (on a shared machine the least disturbed figure), and its share of the step;
then where the rest of a step goes: the step as benchmarks/decode.py times it (generate_in_place:
the call, the rows written into the cache, the argmax) against the bare call and the entry
function's own time (the kernels and the gaps between them), and the bytes a step reads over its
time against the copy bandwidth measured in this process right before and after (STREAM's copy,
benchmarks/decode.py's copy_gbs: the bound decode.py divides by is the best copy of a whole run,
which a step timed minutes apart may never see).

A kernel's bytes are its nodes' inputs and outputs, each counted once at the profiled context (a
weight whole, a table the step only gathers from one row, the cache's prefix read by the
attention; a `size` reads none). The cache is random rows in the step's dtype (int8 rows
quantized by ember.tir.kv_int8), the token id fixed; the loop's prefill is not run (its rows
random). Each context and thread count is measured --rounds times, a copy before and after each;
the round of the fastest loop is printed.

    python benchmarks/decode_profile.py [--model gpt2] [--contexts 128,991] [--threads 1,2]
                                        [--weights int8] [--kv-cache int8] [--repeat 200] [--rounds 3]
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


def step_times(step, inputs: list[np.ndarray], context: int, max_len: int, repeat: int) -> dict:
    """Microseconds of one step at `context` positions: "loop", the median step of
    generate_in_place (its prefill's rows random); "python", the same loop's steps over a stand-in
    that returns the step's outputs at once (the loop's own work: the views, the rows written
    into the cache, the argmax); "call" and "entry", bare calls on `inputs` and the entry
    function's time (the profiling twin's), alternating, their medians; and the kernels'
    profile (ember.runtime.summary.Profile)."""
    import statistics
    import time

    from benchmarks.models.decode import generate_in_place

    rng = np.random.default_rng(1)
    outputs = step(*inputs)
    rows = [x if x.dtype != np.int8 else rng.standard_normal(x.shape[:-1] + (x.shape[-1] - 4,)).astype(np.float32)
            for x in inputs[1:]]
    prompt = np.zeros((1, context), np.int64)

    class Outputs:  # the loop's stand-in step
        spec = step.spec

        def __call__(self, *_):
            return outputs

    out = {}
    for name, run in (("loop", step), ("python", Outputs())):
        times: list[float] = []
        for _ in range(3):
            generate_in_place(lambda _: (outputs[0], *rows), run, prompt, 33, max_len, times)
        out[name] = 1e6 * statistics.median(times)
    calls, entries = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        step(*inputs)
        calls.append(1e6 * (time.perf_counter() - start))
        entries.append(step.profile(*inputs, repeat=1).total_us)
    return {**out, "call": statistics.median(calls), "entry": statistics.median(entries),
            "profile": step.profile(*inputs, repeat=repeat)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("gpt2", "llama"), default="gpt2")
    ap.add_argument("--contexts", default="128,991")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--weights", default="int8", help="float32, int8 or int4")
    ap.add_argument("--kv-cache", default="int8", help="float32, bf16 or int8")
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3, help="measurements of each context and thread count")
    args = ap.parse_args(argv)
    import torch

    from benchmarks.decode import _model, copy_gbs
    from benchmarks.models.decode import compile_step

    model = _model(args.model, small=False)
    weights = None if args.weights == "float32" else args.weights
    max_len = 1024 + 40
    step = compile_step(model, 128, max_len, kv_cache=args.kv_cache, weights=weights)
    rng = np.random.default_rng(0)
    for context in (int(c) for c in args.contexts.split(",")):
        inputs = cache_inputs(step, context, rng)
        nbytes = kernel_bytes(step, {step.spec.symbols[0]: context})
        for threads in (int(t) for t in args.threads.split(",")):
            step.num_threads = threads
            torch.set_num_threads(threads)
            step(*inputs)
            runs = []
            for _ in range(args.rounds):
                before = copy_gbs(5)
                runs.append((step_times(step, inputs, context, max_len, args.repeat), before, copy_gbs(5)))
            times, before, after = min(runs, key=lambda r: r[0]["loop"])
            copies = [round(c, 1) for r in runs for c in r[1:]]
            report(args, context, threads, times, nbytes, max(before, after), copies)


def report(args, context: int, threads: int, times: dict, nbytes: dict[str, int], copy: float, copies) -> None:
    profile, loop, call, entry = times["profile"], times["loop"], times["call"], times["entry"]
    total = sum(nbytes.values())
    kernels = sum(k.median_us for k in profile.kernels)
    print(f"\n{args.model} {args.weights} weights, {args.kv_cache} cache, context {context}, {threads} thread(s), "
          f"{total / 1e6:.1f} MB a step; copy in this process {copy:.1f} GB/s (its copies {copies})")
    print(f"  step in the loop {loop:.0f} us ({1e6 / loop:.1f} tokens/s, {total / loop / 1e3:.1f} GB/s = "
          f"{total / loop / 1e3 / copy:.0%} of the copy); the loop's own Python {times['python']:.0f} us a step; "
          f"a bare call {call:.0f} us = the entry {entry:.0f} + {call - entry:.0f} us (alternating, medians); the "
          f"kernels' medians sum to {kernels:.0f} us")
    print(f"  {'kernel':<36}{'calls':>6}{'median us':>11}{'p10 us':>9}{'KB':>10}{'GB/s':>8}{'of copy':>9}"
          f"{'of step':>9}")
    for k in profile.kernels:
        b = nbytes.get(k.name, 0)
        gbs = b / k.p10_us / 1e3 if k.p10_us else 0
        print(f"  {k.name[:35]:<36}{k.calls:>6}{k.median_us:>11.1f}{k.p10_us:>9.1f}{b / 1e3:>10.1f}{gbs:>8.1f}"
              f"{gbs / copy:>9.0%}{k.median_us / loop:>9.1%}")


if __name__ == "__main__":
    main()

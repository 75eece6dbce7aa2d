"""Compile time of a transformer whose blocks repeat: GPT-2 small (transformers' GPT2LMHeadModel,
default config, random weights, batch 1, 128 tokens; --small: the reduced model of
benchmarks/models/decode.py, 2 layers of width 64).

    torch.compile   the first forward of torch.compile(model, backend=B), with a graph break after
                    each block (a dynamo-disabled eager op): Dynamo traces the block once and calls
                    that graph with each layer's weights, so ember compiles it once per weight set.
                    B is ember, and the peers: "eager" (Dynamo's tracing alone, the floor every
                    backend adds to) and, with --inductor, inductor. Then the median of --runs
                    later forwards.
    ember.compile   ember.compile(model) twice in one process, the second time with other
                    weights: what a compile costs when the process compiled the same structure.

Every figure comes from a fresh process (nothing cached in memory; ember's build cache is shared,
as on any machine that compiled the model before, so no C compiler runs after the first round);
backends take turns over --rounds rounds and each figure is the median of its rounds. A noisy
machine shows in the spread (max/min over rounds), printed beside each figure.

    python benchmarks/compile_time.py [--rounds 3] [--runs 5] [--small] [--inductor]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.compare import run_child  # noqa: E402

SEQ = 128


def gpt2(small: bool, seed: int):
    import torch

    from benchmarks.models.decode import gpt2_lm

    model = gpt2_lm(small, seed)
    return model, torch.randint(0, model.config.vocab_size, (1, SEQ))


def logits(model):
    """The model as a module of the token ids alone (no cache) that returns the logits."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids, use_cache=False).logits

    return Logits().eval()


def with_breaks(model):
    """A graph break after every block but the last (a forward hook running an eager op)."""
    import torch

    @torch._dynamo.disable
    def eager(t):
        return t + 0.01 * torch.tanh(t)

    def hook(module, args, out):
        return (eager(out[0]), *out[1:]) if isinstance(out, tuple) else eager(out)

    for block in model.transformer.h[:-1]:
        block.register_forward_hook(hook)
    return model


def torch_compile(backend: str, small: bool, runs: int) -> dict:
    import torch

    if backend == "ember":
        import ember.torch_backend  # noqa: F401 (registers the backend)
    model, ids = gpt2(small, seed=0)
    model = with_breaks(model)
    compiled = torch.compile(logits(model), backend=backend)
    with torch.no_grad():
        t = time.perf_counter()
        got = compiled(ids)
        first = time.perf_counter() - t
        later = []
        for _ in range(runs):
            t = time.perf_counter()
            compiled(ids)
            later.append(time.perf_counter() - t)
        torch._dynamo.reset()
        torch.testing.assert_close(got, logits(model)(ids), rtol=1e-3, atol=1e-3)
    return {"first": first, "later": statistics.median(later)}


def ember_twice(small: bool) -> dict:
    import numpy as np
    import torch

    import ember

    out = {}
    for k, label in enumerate(("first", "again")):
        model, ids = gpt2(small, seed=k)
        model = logits(model)
        t = time.perf_counter()
        cm = ember.compile(model, (ids,))
        out[label] = time.perf_counter() - t
        with torch.no_grad():
            np.testing.assert_allclose(np.asarray(cm(ids.numpy())), model(ids).numpy(), rtol=1e-3, atol=1e-3)
    return out


def child(what: str, small: bool, runs: int) -> dict:
    import warnings

    warnings.filterwarnings("ignore")
    return ember_twice(small) if what == "ember.compile" else torch_compile(what, small, runs)


def measured(what: str, args) -> dict:
    """`child(what)`'s figures, from a fresh process (compare.run_child)."""
    got = run_child(["--child", what, "--runs", str(args.runs)] + ["--small"] * args.small, __file__)
    if "error" in got:
        raise SystemExit(f"{what} failed: {got['error']}")
    return got


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--small", action="store_true")
    p.add_argument("--inductor", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.small, args.runs)))
        return
    backends = ["ember", "eager", *(["inductor"] if args.inductor else [])]
    results: dict[str, list[dict]] = {b: [] for b in [*backends, "ember.compile"]}
    for r in range(args.rounds):
        for what in results:
            results[what].append(measured(what, args))
            print(f"round {r + 1}: {what} {results[what][-1]}", file=sys.stderr)

    def figure(what: str, key: str) -> tuple[float, float]:
        values = [res[key] for res in results[what]]
        return statistics.median(values), max(values) / min(values)

    print(f"GPT-2 {'(2 layers, width 64)' if args.small else 'small'}, {SEQ} tokens, {args.rounds} rounds "
          f"(medians; spread = max/min over rounds)")
    floor = figure("eager", "first")[0]
    print(f"{'torch.compile backend':24}{'first forward':>16}{'spread':>8}{'vs eager':>10}{'later forward':>16}")
    for b in backends:
        (first, spread), (later, _) = figure(b, "first"), figure(b, "later")
        print(f"{b:24}{first:>14.2f} s{spread:>8.2f}{first / floor:>9.2f}x{later * 1e3:>13.1f} ms")
    (first, s1), (again, s2) = figure("ember.compile", "first"), figure("ember.compile", "again")
    print(f"ember.compile: first {first:.2f} s (spread {s1:.2f}), again with other weights {again:.2f} s "
          f"(spread {s2:.2f}), {again / first:.2f}x of the first")


if __name__ == "__main__":
    main()

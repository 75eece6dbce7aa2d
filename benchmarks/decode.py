"""Greedy decode with a KV cache, GPT-2 small and a LLaMA-architecture model of its size (12 heads
over 4 key/value heads; benchmarks/models/decode.py: transformers' models, random weights):
tokens/s of ember (float32 weights, and weight-only int8 and int4, their cache in bfloat16 unless
--kv-cache says otherwise: float32, bf16, int8, or several, a step for each), ONNX Runtime on the
step exported to ONNX (float32, and its own MatMulNBits quantization at 8 and 4 bits: ort-*),
ember on that int4 ONNX file (ember-onnx-int4: pre-quantized weights in), torch eager and
transformers' `generate`, at two context lengths, next to the memory-bandwidth bound, each
runtime in its own process.

A decode step reads every weight once (the embedding tables but one row each; an LM head in
full) and the cache of its context once: at batch 1 it is a chain of GEMVs and an attention,
bound by memory bandwidth. Bytes per token are the compiled step's weights (ember's int8 and
int4: their codes and scales; ONNX Runtime's: its file's initializers; a table the step only
gathers from counted as one row) plus the cache read at that context (keys and values of every
layer, float32, bfloat16, or int8 rows with a float32 scale each: ember.compile's kv_cache
option); the bound is copy bandwidth / bytes per token, the copy bandwidth the best measured in the
same run (STREAM's copy: a 256 MiB array copied by torch on --threads threads, read + write bytes
counted, the fastest of 10 copies; measured by a process of its own and by each runtime's process
right before and after its timing, so that the bound is the memory's best over the run, not one
figure taken while other processes loaded the machine: a run with one copy figure, taken minutes
before the timings, read ember float32 at 141-167% of its bound where a re-run read 99%, most
likely a copy measured under load); a runtime above its bound is marked "!"
(its figure is not to be quoted). "of own" divides by the copy of the round's own process instead
(the better of its copies before and after that timing): the share of the memory's bandwidth at
the moments the step ran, where "of bound" divides by the run's best moment, which the steps'
medians, timed over seconds under other processes' load, may never see. It can pass 100%: a
step's GEMVs read up to twice the copy of their own process (decode_profile.py, docs/design.md;
a copy also writes its bytes, and part of a small model's weights may stay in the L3 between
steps).
Accuracy, against ember float32's greedy decode of --agree tokens (64) after the
prompt: the share of the tokens that are float32's (free running: one token that differs
changes the context of the rest) and the first that differs; teacher forced (each step fed
float32's token), the share of the steps whose argmax is float32's and the logits' ||delta|| /
||float32's|| (the mean over the prefill and the steps, and the prefill's alone).
"ember GEMV" is a chain of 12 GPT-2 MLPs (768x3072 and 3072x768 GEMVs, 226 MB of float32 weights,
more than the caches) compiled by ember with each weight format: its weight bytes (codes and
scales) per second, against the same copy bandwidth.

Runtimes (benchmarks/models/decode.py): ember runs RowStep's prefill and then the step compiled
once with the cache length a symbol, the cache in place (one preallocated buffer per key and
value of each layer, each step reading its prefix and writing its own row:
generate_in_place); ONNX Runtime runs the same RowStep exported (benchmarks/models/decode_onnx.py:
the past length a symbolic dimension) under the same loop, each step given the buffers' prefixes
(its graph concatenates them with the new row: a copy per step, as any exported torch cache
does); torch eager runs the Step module over the growing cache; transformers' generate uses its
DynamicCache. ember float32, eager and generate must give the same greedy tokens (ONNX Runtime
float32 too: printed). A first process compiles and saves ember's models and exports and
quantizes ONNX Runtime's; each timing process loads one runtime only (idle threads of one
runtime never slow another) and the runtimes take turns over --rounds rounds; each figure is the
best round's median time per token (prefill excluded). The prefill of --prompt tokens is timed
apart for ember's and ONNX Runtime's (on x86 with VNNI int8 and int4 weights' prefill multiplies
int8 rows: ember.passes.quantize_rows; MatMulNBits at accuracy level 4 does too).

    python benchmarks/decode.py [--small] [--models gpt2,llama] [--contexts 128,1024] [--tokens 32]
                                [--prompt 128] [--rounds 2] [--threads 2] [--group 128] [--kv-cache bf16]
                                [--agree 64] [--no-onnx]

(--small takes --group 32: its hidden size, 64, is no multiple of 128.)

On the GPU (`--device cuda`, float32 only, one process: `cuda_main`): the prefill and the step
compiled once for target "cuda" (the cache length a symbol, kernels whose grids each launch
computes from it), run by generate_in_place on torch CUDA tensors (the cache buffers on the GPU,
each step reading their prefix in place), next to transformers' `generate` and the eager Step loop
on the same GPU; the greedy tokens must be identical to both (checked at each context, a failure
is the exit status). Tokens/s is the median step (its token read back included) for ember and
eager, generate's by the difference of 1 and --tokens tokens. Most of a --small run is the
compile (GPT-2's reduced config: about 20 s on a 2-core AMD EPYC, NVRTC included; GPT-2 small's
prefill and step: about 110 s there):

    python benchmarks/decode.py --device cuda [--small] [--models gpt2] [--contexts 128,512] [--tokens 32]
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

WEIGHTS = ("float32", "int8", "int4")
ORT = ("ort-float32", "ort-int8", "ort-int4")  # ONNX Runtime on the exported step (its MatMulNBits)
ONNX_EMBER = "ember-onnx-int4"  # ember on ONNX Runtime's int4 file
OTHERS = ("eager", "generate")


def variants(args) -> list[tuple[str, str, str]]:
    """ember's compiled steps as (runtime, weights, kv_cache): float32 weights over a float32
    cache, and int8 and int4 weights over each --kv-cache (ember-int8, or ember-int8/bf16 where
    several caches are asked for)."""
    out = [("ember-float32", "float32", "float32")]
    for weights in WEIGHTS[1:]:
        for kv in args.kv_cache:
            out.append((f"ember-{weights}" + (f"/{kv}" if len(args.kv_cache) > 1 else ""), weights, kv))
    return out


def runtimes(args) -> list[str]:
    """Every runtime timed, in the tables' order."""
    return [r for r, _, _ in variants(args)] + ([ONNX_EMBER, *ORT] if args.onnx else []) + list(OTHERS)


def step_bytes(model) -> int:
    """Bytes of weights a compiled step reads per token: each weight once, but of a table the step
    only gathers from (an embedding) one row."""
    graph = model.graph
    readers: dict[str, set[str]] = {}
    for node in graph.nodes:
        for v in node.inputs:
            readers.setdefault(v.name, set()).add(node.op)
    total = 0
    for name, w in model.weights.items():
        table = w.ndim > 1 and readers.get(name, {"?"}) <= {"gather", "embedding"}
        total += w[0].nbytes if table else w.nbytes
    return total


def cache_bytes(model, context: int, kv_cache: str = "float32") -> int:
    """Bytes of keys and values a step reads at `context` positions (int8: each row's codes and
    its float32 scale, ember.tir.kv_int8)."""
    from benchmarks.models.decode import heads

    layers, n, dim = heads(model)
    row = {"float32": 4 * dim, "bf16": 2 * dim, "int8": dim + 4}[kv_cache]
    return 2 * layers * context * n * row


def _model(name: str, small: bool):
    from benchmarks.models.decode import gpt2_lm, llama_lm

    return (gpt2_lm if name == "gpt2" else llama_lm)(small=small)


def contexts(args, model) -> list[int]:
    """The prompt lengths timed: --contexts, each at most what the model's positions take."""
    limit = getattr(model.config, "n_positions", None) or model.config.max_position_embeddings
    return [min(c, limit - args.tokens - 1) for c in args.contexts]


def _file(runtime: str) -> str:
    return runtime.replace("/", "-")


def prepare(args, folder: Path, name: str) -> dict:
    import torch

    from benchmarks.models.decode import compile_prefill, compile_step, hf_generate, torch_generate

    model = _model(name, args.small)
    lengths = contexts(args, model)
    max_len = max(max(lengths) + args.tokens, args.prompt + args.agree) + 1
    prompt = torch.randint(0, model.config.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    compile_s, nbytes, runs, files, prefills, cache_of = {}, {}, {}, {}, {}, {}
    for runtime, weights, kv in variants(args):
        start = time.perf_counter()
        options = dict(weights=None if weights == "float32" else weights,
                       group_size=args.group if weights == "int4" else None)
        if weights not in prefills:
            prefills[weights] = compile_prefill(model, args.prompt, max_len, **options)
            prefills[weights].save(folder / f"{name}-prefill-{weights}")
        step = compile_step(model, args.prompt, max_len, kv_cache=kv, **options)
        compile_s[runtime] = time.perf_counter() - start
        step.save(folder / f"{name}-step-{_file(runtime)}")
        runs[runtime] = (prefills[weights], step)
        files[runtime] = [str(folder / f"{name}-prefill-{weights}"), str(folder / f"{name}-step-{_file(runtime)}")]
        nbytes[runtime], cache_of[runtime] = step_bytes(step), kv
    if args.onnx:
        prepare_onnx(args, folder / f"{name}-onnx", model, max_len, compile_s, nbytes, runs, files)
    accuracy = agreement(runs, prompt.numpy(), args.agree, max_len)
    reference = accuracy.pop("tokens")
    same = {"eager": reference[:args.tokens] == torch_generate(model, prompt, args.tokens),
            "generate": reference[:args.tokens] == hf_generate(model, prompt, args.tokens)}
    if args.onnx:
        same["ort-float32"] = accuracy["ort-float32"]["agree"] == 1.0
    np.save(folder / f"{name}-prompt.npy", prompt.numpy())
    nbytes |= {r: nbytes["ember-float32"] for r in OTHERS}
    return {"compile_s": compile_s, "same": same, "bytes": nbytes, "accuracy": accuracy, "files": files,
            "params": sum(p.numel() for p in model.parameters()), "contexts": lengths, "max_len": max_len,
            "cache": {r: {str(c): cache_bytes(model, c, cache_of.get(r, "float32")) for c in lengths}
                      for r in runtimes(args)}}


def prepare_onnx(args, folder: Path, model, max_len: int, compile_s, nbytes, runs, files) -> None:
    """ONNX Runtime's runtimes (benchmarks/models/decode_onnx.py): RowStep's prefill and step
    exported, float32 and quantized by ONNX Runtime (MatMulNBits, 8 and 4 bits, blocks of
    --group), each run by a session; and ember's compile of the int4 files."""
    import ember
    from benchmarks.models.decode_onnx import export, onnx_bytes, quantize, session

    folder.mkdir()
    start = time.perf_counter()
    plain = export(model, folder, args.prompt, max_len)
    exported = time.perf_counter() - start
    for runtime in ORT:
        start = time.perf_counter()
        bits = {"ort-int8": 8, "ort-int4": 4}.get(runtime)
        paths = plain if bits is None else tuple(quantize(p, p.with_name(f"{p.stem}-{runtime}.onnx"), bits, args.group)
                                                 for p in plain)
        compile_s[runtime] = exported + time.perf_counter() - start  # the export and ONNX Runtime's quantizer
        files[runtime] = [str(p) for p in paths]
        runs[runtime] = tuple(session(p, args.threads) for p in paths)
        nbytes[runtime] = onnx_bytes(paths[1])
    start = time.perf_counter()
    prefill, step = (ember.compile(str(p)) for p in files["ort-int4"])
    compile_s[ONNX_EMBER] = time.perf_counter() - start
    files[ONNX_EMBER] = [str(folder / "ember-prefill"), str(folder / "ember-step")]
    prefill.save(files[ONNX_EMBER][0])
    step.save(files[ONNX_EMBER][1])
    runs[ONNX_EMBER] = (prefill, step)
    nbytes[ONNX_EMBER] = step_bytes(step)


def agreement(runs: dict, prompt: np.ndarray, steps: int, max_len: int) -> dict:
    """Each runtime's greedy decode of `steps` tokens after the prompt against ember float32's:
    the share of the tokens that are float32's ("agree", free running: a token that differs
    changes the context of the rest) and the first that differs ("first"); teacher forced on
    float32's tokens, the share of the steps whose argmax is float32's ("forced") and the logits'
    ||delta|| / ||float32's|| (the prefill's and each step's: "error" their mean, "prefill" the
    first); "tokens": float32's."""
    from benchmarks.models.decode import generate_in_place

    ref_logits: list = []
    reference = generate_in_place(*runs["ember-float32"], prompt, steps, max_len, logits_out=ref_logits)
    out: dict = {"tokens": reference}
    for runtime, (prefill, step) in runs.items():
        free = np.array(generate_in_place(prefill, step, prompt, steps, max_len)) == reference
        logits: list = []
        forced = generate_in_place(prefill, step, prompt, steps, max_len, feed=reference, logits_out=logits)
        errors = [float(np.linalg.norm(a - b) / np.linalg.norm(b)) for a, b in zip(logits, ref_logits)]
        out[runtime] = {"agree": float(free.mean()), "first": int(steps if free.all() else np.argmin(free)),
                        "forced": float(np.mean(np.array(forced) == reference)), "error": float(np.mean(errors)),
                        "prefill": errors[0]}
    return out


def gemv_chain(layers: int = 12, d: int = 768):
    """x -> relu(x W1) W2, `layers` times: GPT-2 small's MLP GEMVs, weights out of the caches."""
    from ember.graph.core import Graph, TensorType
    from ember.ops.nodes import add_op

    rng = np.random.default_rng(0)
    g = Graph(name="gemv_chain")
    (x,) = [g.add_input("x", TensorType((1, d)))]
    for k in range(layers):
        w1 = g.add_constant((rng.standard_normal((d, 4 * d)) / 64).astype("float32"), f"w1_{k}")
        w2 = g.add_constant((rng.standard_normal((4 * d, d)) / 64).astype("float32"), f"w2_{k}")
        (h,) = add_op(g, "gemm", [x, w1])
        (h,) = add_op(g, "relu", [h])
        (x,) = add_op(g, "gemm", [h, w2])
    g.set_outputs([x])
    return g


def per_token(run, tokens: int, repeat: int, timed_steps: bool) -> float:
    """Seconds per decode step, the prefill excluded: the median of the steps' own times where the
    loop times each step (`timed_steps`: run(n, times)), else the difference of the medians of
    generating `tokens` tokens and 1 token, over (tokens - 1)."""
    if timed_steps:
        times: list[float] = []
        for _ in range(repeat):
            run(tokens, times)
        return statistics.median(times)
    whole, one = [], []
    for _ in range(repeat):
        for n, into in ((1, one), (tokens, whole)):
            t = time.perf_counter()
            run(n, None)
            into.append(time.perf_counter() - t)
    return (statistics.median(whole) - statistics.median(one)) / (tokens - 1)


def copy_gbs(repeat: int = 10) -> float:
    """STREAM's copy on torch's threads: a 256 MiB float32 array copied, read + write bytes over
    the fastest of `repeat` copies (the least disturbed by other processes: a bound is the most
    the memory gives)."""
    import torch

    src = torch.rand(64 * 2**20)
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t)
    return 2 * src.numel() * 4 / min(times) / 1e9


def worker(args, folder: Path) -> dict:
    """One runtime's figures (or the copy's, or the GEMV chain's); each runtime's worker measures
    the copy bandwidth too, right before and after its timing, in its own process: the bound
    is then the best bandwidth seen over the whole run, not one figure taken minutes away from
    the timings (under other processes' load it can be half the bandwidth a quiet moment gives,
    which put a runtime far above its bound)."""
    import torch

    torch.set_num_threads(args.threads)
    if args.worker == "copy":
        return {"copy_gbs": copy_gbs(20)}
    before = copy_gbs()
    out = timings(args, folder)
    return {**out, "copy_gbs": max(before, copy_gbs())}


def timings(args, folder: Path) -> dict:
    import torch

    import ember

    if args.worker == "gemv":
        x = np.random.default_rng().standard_normal((1, 768)).astype("float32")
        gbs = {}
        for weights in WEIGHTS:
            model = ember.load(folder / f"gemv-{weights}", num_threads=args.threads)
            t = ember.bench(lambda m=model: m(x), warmup=3, repeat=20, number=1).median
            gbs[weights] = sum(w.nbytes for w in model.weights.values()) / t / 1e9
        return {"gemv_gbs": gbs}
    model = _model(args.model, args.small)
    info = json.loads((folder / f"{args.model}-info.json").read_text())
    out, pair = {}, None
    if args.worker in info["files"]:
        if args.worker in ORT:
            from benchmarks.models.decode_onnx import session

            pair = tuple(session(Path(f), args.threads) for f in info["files"][args.worker])
        else:
            pair = tuple(ember.load(f, num_threads=args.threads) for f in info["files"][args.worker])
        prompt = np.load(folder / f"{args.model}-prompt.npy")
        out["prefill_s"] = ember.bench(lambda: pair[0](prompt), warmup=1, repeat=args.repeat, number=1).median
    for context in info["contexts"]:
        ids = torch.randint(0, model.config.vocab_size, (1, context), generator=torch.Generator().manual_seed(2))
        run = _runner(args.worker, model, ids, info["max_len"], pair)
        run(4, None)  # warm up
        repeat = args.repeat if args.worker != "generate" else max(args.repeat, 3)
        out[str(context)] = per_token(run, args.tokens, repeat, timed_steps=args.worker != "generate")
    return out


def _runner(runtime: str, model, ids, max_len: int, pair):
    """run(n, times): `runtime`'s greedy generation of n tokens after the prompt ids (`pair`: its
    prefill and step, ember's or ONNX Runtime's)."""
    from benchmarks.models.decode import generate_in_place, hf_generate, torch_generate

    if pair is not None:
        return lambda n, times: generate_in_place(*pair, ids.numpy(), n, max_len, times)
    if runtime == "eager":
        return lambda n, times: torch_generate(model, ids, n, times)
    return lambda n, times: hf_generate(model, ids, n)


def report(args, name: str, info: dict, results: dict, copy: float) -> None:
    """The model's lines: compile times, tokens' agreement, prefill, and per context the table."""
    label = {"gpt2": "GPT-2", "llama": "LLaMA"}[name] + (" (small config)" if args.small else "")
    print(f"\n{label}: {info['params'] / 1e6:.0f} M parameters; compiled in (ONNX Runtime: exported and quantized) " +
          ", ".join(f"{r} {s:.0f} s" for r, s in info["compile_s"].items()))
    print("greedy tokens identical to ember float32's: " + ", ".join(f"{r}: {v}" for r, v in info["same"].items()))
    print(f"against ember float32 over {args.agree} greedy tokens after the {args.prompt}-token prompt "
          "(forced: each step fed float32's token):")
    print(f"  {'runtime':<22}{'agree':>8}{'1st diff':>10}{'forced':>8}{'logits |d|/|ref|':>18}{'prefill':>9}")
    for r, a in info["accuracy"].items():
        print(f"  {r:<22}{a['agree']:>8.0%}{a['first']:>10}{a['forced']:>8.0%}{a['error']:>18.4f}{a['prefill']:>9.4f}")
    prefill = {r: min(x["prefill_s"] for x in results[r]) for r in results if "prefill_s" in results[r][0]}
    print(f"prefill of {args.prompt} tokens: " + ", ".join(f"{r} {1e3 * s:.1f} ms ({s / prefill['ember-float32']:.2f}x)"
                                                            for r, s in prefill.items()))
    for context in info["contexts"]:
        best = {r: min(results[r], key=lambda x: x[str(context)]) for r in results}  # each runtime's best round
        tps = {r: 1 / best[r][str(context)] for r in results}
        cache = {r: info["cache"][r][str(context)] for r in results}
        print(f"context {context} (cache read per token: " +
              ", ".join(f"{kv} {cache_bytes(_model(name, args.small), context, kv) / 1e6:.0f} MB"
                        for kv in dict.fromkeys(["float32", *args.kv_cache])) + "):")
        print(f"  {'runtime':<22}{'tokens/s':>10}{'ms/token':>10}{'MB/token':>10}{'bound':>10}{'of bound':>10}"
              f"{'of own':>8}{'x fp32':>10}")
        above = []
        for r in results:
            nbytes = info["bytes"][r] + cache[r]
            bound = copy * 1e9 / nbytes
            above += [r] if tps[r] > bound else []
            own = tps[r] * nbytes / (best[r]["copy_gbs"] * 1e9)
            print(f"  {r:<22}{tps[r]:>10.1f}{1e3 / tps[r]:>10.1f}{nbytes / 1e6:>10.0f}{bound:>10.1f}"
                  f"{tps[r] / bound:>10.0%}{own:>8.0%}{tps[r] / tps['ember-float32']:>10.2f}"
                  f"{' !' if tps[r] > bound else ''}")
        if above:
            print(f"  ! above its bound ({', '.join(above)}): the step read fewer bytes than counted, or the "
                  "memory gave it more than any copy measured in this run; not a figure to quote")


def cuda_main(args) -> int:
    """The GPU's decode (see the module doc): ember's step on target "cuda" against transformers'
    generate and the eager loop; 1 where the greedy tokens differ."""
    import torch

    from benchmarks.models.decode import compile_in_place

    if not torch.cuda.is_available():
        raise SystemExit("--device cuda needs a GPU that torch sees")
    device = torch.cuda.get_device_name()
    failed = 0
    for name in args.models.split(","):
        model = _model(name, args.small)
        lengths = contexts(args, model)
        max_len = max(lengths) + args.tokens + 1
        start = time.perf_counter()
        prefill, step = compile_in_place(model, min(args.prompt, max(lengths)), max_len, target="cuda")
        compile_s = time.perf_counter() - start
        model = model.cuda()
        label = {"gpt2": "GPT-2", "llama": "LLaMA"}[name] + (" (small config)" if args.small else "")
        print(f"\n{label} on {device}, float32: ember compiled the prefill and the step for 'cuda' in "
              f"{compile_s:.0f} s ({len(step.kernels)} kernels in the step)")
        print(f"  {'context':>8}{'runtime':>12}{'tokens/s':>10}{'ms/token':>10}{'x generate':>12}  same tokens")
        for context in lengths:
            ids = torch.randint(0, model.config.vocab_size, (1, context), generator=torch.Generator().manual_seed(2))
            seconds, same = cuda_context(args, prefill, step, model, ids.cuda(), max_len)
            failed += not all(same.values())
            for runtime, t in seconds.items():
                agrees = "" if runtime == "ember" else str(same[runtime])
                print(f"  {context:>8}{runtime:>12}{1 / t:>10.1f}{1e3 * t:>10.2f}{seconds['generate'] / t:>12.2f}  "
                      f"{agrees}")
        print(f"  ember's step: {step.summary().splitlines()[-1]}")
    return 1 if failed else 0


def cuda_context(args, prefill, step, model, ids, max_len: int) -> tuple[dict, dict]:
    """Seconds per token of ember, eager and generate after the prompt `ids` (on the GPU), and
    whether eager's and generate's greedy tokens are ember's."""
    from benchmarks.models.decode import generate_in_place, hf_generate, torch_generate

    tokens = generate_in_place(prefill, step, ids, args.tokens, max_len)
    same = {"generate": tokens == hf_generate(model, ids, args.tokens),
            "eager": tokens == torch_generate(model, ids, args.tokens)}
    runs = {"ember": lambda n, times: generate_in_place(prefill, step, ids, n, max_len, times),
            "eager": lambda n, times: torch_generate(model, ids, n, times),
            "generate": lambda n, times: hf_generate(model, ids, n)}
    seconds = {}
    for runtime, run in runs.items():
        run(4, None)  # warm up
        seconds[runtime] = per_token(run, args.tokens, args.repeat, timed_steps=runtime != "generate")
    return seconds, same


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="the reduced models (2 layers, hidden 64)")
    ap.add_argument("--models", default="gpt2,llama", help="gpt2, llama or both")
    ap.add_argument("--contexts", default="128,1024", help="context lengths (prompts) the steps are timed after")
    ap.add_argument("--tokens", type=int, default=32, help="tokens generated per timed generation")
    ap.add_argument("--prompt", type=int, default=128, help="the prompt length of the timed prefill")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="timed generations per process")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--group", type=int, default=128, help="int4's group size")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cuda: float32 decode on the GPU against transformers' generate there (cuda_main)")
    ap.add_argument("--kv-cache", default="bf16",
                    help="the cache's dtype of int8's and int4's steps, float32, bf16 or int8, or several "
                         "(float32,bf16,int8: a step of each; float32 weights' cache stays float32)")
    ap.add_argument("--agree", type=int, default=64, help="greedy tokens compared with float32's")
    ap.add_argument("--onnx", action=argparse.BooleanOptionalAction, default=True,
                    help="ONNX Runtime's rows (the step exported, float32 and MatMulNBits) and ember on its int4 file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.contexts = [int(c) for c in str(args.contexts).split(",")]
    args.kv_cache = str(args.kv_cache).split(",")
    if not set(args.kv_cache) <= {"float32", "bf16", "int8"}:
        ap.error(f"--kv-cache takes float32, bf16 and int8, got {args.kv_cache}")
    if args.device == "cuda":
        raise SystemExit(cuda_main(args))
    if args.worker:
        print(json.dumps(worker(args, Path(args.folder))))
        return
    names = args.models.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        infos = {}
        for name in names:
            infos[name] = prepare(args, folder, name)
            (folder / f"{name}-info.json").write_text(json.dumps(infos[name]))
            print(f"{name} compiled", flush=True)
        for weights in WEIGHTS:
            ember_compile_gemv(args, folder, weights)
        results: dict[tuple, list[dict]] = {}
        jobs = [(None, r) for r in ("copy", "gemv")] + [(n, r) for n in names for r in runtimes(args)]
        for rnd in range(args.rounds):
            for name, runtime in jobs:
                cmd = [sys.executable, __file__, "--worker", runtime, "--folder", str(folder), "--tokens",
                       str(args.tokens), "--repeat", str(args.repeat), "--threads", str(args.threads),
                       "--contexts", ",".join(map(str, args.contexts)), "--prompt", str(args.prompt),
                       "--kv-cache", ",".join(args.kv_cache)]
                cmd += ["--model", name] if name else []
                out = subprocess.run(cmd + ["--small"] * args.small, capture_output=True, text=True, cwd=ROOT,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
                if out.returncode:
                    raise SystemExit(f"{runtime} failed:\n{out.stderr[-3000:]}")
                results.setdefault((name, runtime), []).append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {rnd + 1}/{args.rounds} done", flush=True)
    copies = [x["copy_gbs"] for xs in results.values() for x in xs]
    copy = max(copies)
    gemv = {w: max(x["gemv_gbs"][w] for x in results[(None, "gemv")]) for w in WEIGHTS}
    print(f"\ncopy bandwidth {copy:.1f} GB/s ({args.threads} threads; the best of {len(copies)} measurements, one "
          f"before and after each runtime's timing, the lowest {min(copies):.1f}); ember GEMV chain (weight "
          "bytes / time): " + ", ".join(f"{w} {g:.1f} GB/s = {g / copy:.0%} of copy" for w, g in gemv.items()))
    for name in names:
        report(args, name, infos[name], {r: results[(name, r)] for n, r in jobs if n == name}, copy)


def ember_compile_gemv(args, folder: Path, weights: str) -> None:
    import ember

    ember.compile(gemv_chain(), num_threads=args.threads, weights=None if weights == "float32" else weights,
                  group_size=args.group if weights == "int4" else None).save(folder / f"gemv-{weights}")


if __name__ == "__main__":
    main()

"""ember next to PyTorch and ONNX Runtime in one process: is it as fast as in a fresh one?

Every figure is ember's time per inference (batch 1), measured in a fresh process per figure, for
ResNet-18, GPT-2 small (128 tokens), the zoo's MLP and the GEMV chain of a decode step
(benchmarks/decode.py: 12 GPT-2 MLPs at batch 1, its weights' bytes per second shown too):

    fresh          ember alone (torch and ONNX Runtime never imported)
    after torch    torch eager ran the model first in the same process (torch imported first,
                   so ember's kernels run on torch's libgomp)
    after ORT      an ONNX Runtime session (--threads intra-op threads) ran the model first and is
                   kept alive, as users keep theirs
    with ORT       (not by default) the session runs before each of ember's calls, so its threads
                   may still spin when ember starts
    torch.compile  torch.compile(model, backend="ember") of the model with graph breaks: an eager
                   torch op (a dynamo-disabled function) after several stages (ResNet-18: each of
                   layer1..3; GPT-2: every third block), so ember's graphs and torch's eager work
                   alternate on the same thread; the figure is the time spent in ember's calls per
                   forward (the whole forward is shown beside it)
    segments       the same ember graphs of torch.compile, saved, and replayed in a fresh process
                   with the inputs they received: the fresh baseline of torch.compile

A first process compiles and saves everything once; the timing processes load the artifacts and
take turns, scenario after scenario and policy after policy, over --rounds rounds (a slow spell of
the machine falls on all of them alike). Each process reports the median of --runs calls; a figure
is the median over rounds, with the spread (max/min over rounds) beside it, and the ratio to the
fresh figure under the same policy. `--policies` names environments to compare (each a list of
VAR=value, comma-separated; "default": none): ember's default wait policy, libgomp's own
(GOMP_SPINCOUNT=300000), passive, ...; "vs policy" is each fresh figure against the first policy's
(what a policy costs ember alone). "cpu" is the process's CPU time per call, every thread's:
spinning shows there, a thread waiting for a core of a busy machine does not.

    python benchmarks/coexist.py [--models resnet18 gpt2_small mlp gemv] [--small] [--runs 20]
        [--rounds 3] [--threads 2] [--scenarios fresh after_torch after_ort torch_compile]
        [--policies default GOMP_SPINCOUNT=300000 OMP_WAIT_POLICY=passive]
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

from benchmarks.compare import prepare  # noqa: E402 (after the path)

SCENARIOS = ("fresh", "after_torch", "after_ort", "with_ort", "torch_compile", "segments")
# where the graph breaks go: modules after which an eager torch op runs
BREAKS = {"resnet18": lambda m: [m.layer1, m.layer2, m.layer3],
          "gpt2_small": lambda m: [b for k, b in enumerate(m.model.h) if k % 3 == 2 and k < len(m.model.h) - 1]}


# --- the graph-break model ---------------------------------------------------------------------------

def with_breaks(name: str, model):
    """`model` with a forward hook on each module of BREAKS[name] that runs an eager torch op
    (dynamo-disabled: a graph break) on the module's output."""
    import torch

    @torch._dynamo.disable
    def eager(t):
        return t + 0.01 * torch.tanh(t)

    def hook(module, args, out):
        return (eager(out[0]), *out[1:]) if isinstance(out, tuple) else eager(out)

    for m in BREAKS[name](model):
        m.register_forward_hook(hook)
    return model


class EmberCalls:
    """Times every CompiledModel call of this process (the graphs torch.compile hands to ember)
    and, when `record` is set, keeps each call's model and inputs."""

    def __init__(self):
        from ember.runtime.model import CompiledModel

        self.seconds, self.record, self.calls = 0.0, False, []
        original = CompiledModel.__call__

        def timed(model, *args, **kwargs):
            if self.record:
                self.calls.append((model, [np.array(a) for a in args]))
            t = time.perf_counter()
            out = original(model, *args, **kwargs)
            self.seconds += time.perf_counter() - t
            return out

        CompiledModel.__call__ = timed


def compiled_with_breaks(name: str, small: bool):
    """(torch.compile(model with breaks, backend="ember"), its inputs, the call timer), warmed up."""
    import torch

    from benchmarks.models import ZOO

    model, inputs = ZOO[name](small=small)
    calls = EmberCalls()
    compiled = torch.compile(with_breaks(name, model), backend="ember")
    with torch.no_grad():
        for _ in range(3):
            compiled(*inputs)
    return compiled, inputs, calls


def prepare_segments(name: str, small: bool, folder: Path) -> dict:
    """torch.compile's ember graphs of the model with breaks, saved with the inputs of one forward
    (folder/segments/), checked against eager."""
    import torch

    from benchmarks.models import ZOO

    compiled, inputs, calls = compiled_with_breaks(name, small)
    calls.record = True
    with torch.no_grad():
        got = compiled(*inputs)
        expected = with_breaks(name, ZOO[name](small=small)[0])(*inputs)
    torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-3)
    seg = folder / "segments"
    seg.mkdir()
    models: dict[int, int] = {}
    order = []
    for step, (model, args) in enumerate(calls.calls):
        if id(model) not in models:
            models[id(model)] = len(models)
            model.save(seg / f"m{models[id(model)]}")
        for k, a in enumerate(args):
            np.save(seg / f"s{step}_{k}.npy", a)
        order.append([models[id(model)], len(args)])
    (seg / "order.json").write_text(json.dumps(order))
    return {"graphs": len(models), "calls": len(order)}


# --- the timing processes ----------------------------------------------------------------------------

def prepare_gemv(folder: Path) -> dict:
    """The GEMV chain of benchmarks/decode.py (a decode step's weight-bound products) compiled and
    saved with its input; ORT has no model of it."""
    import ember
    from benchmarks.decode import gemv_chain

    cm = ember.compile(gemv_chain())
    cm.save(folder / "ember")
    np.save(folder / "input0.npy", np.random.default_rng(1).standard_normal((1, 768)).astype("float32"))
    return {"ember": {"ember": {"weight_bytes": sum(w.nbytes for w in cm.weights.values())}}}


def _torch_runs(name: str, small: bool, inputs: list[np.ndarray], threads: int):
    """torch eager runs the model (the GEMV chain: GPT-2 MLP GEMVs) 5 times; returns the model."""
    import torch

    from benchmarks.models import ZOO

    torch.set_num_threads(threads)
    if name == "gemv":
        model = torch.nn.Sequential(*[torch.nn.Linear(768, 768) for _ in range(4)]).eval()
    else:
        model, _ = ZOO[name](small=small)
    with torch.no_grad():
        for _ in range(5):
            model(*(torch.from_numpy(x) for x in inputs))
    return model


def timed_calls(fn, runs: int) -> dict:
    """The median wall time of `fn` over `runs` calls after 3 warm-up calls, and the process's CPU
    time per call (every thread's: threads that spin count, threads waiting for a core do not)."""
    for _ in range(3):
        fn()
    walls, cpu = [], time.process_time()
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t)
    return {"median": statistics.median(walls), "cpu": (time.process_time() - cpu) / runs}


def _inputs(folder: Path) -> list[np.ndarray]:
    return [np.load(folder / f"input{k}.npy") for k in range(len(list(folder.glob("input*.npy"))))]


def measure(scenario: str, name: str, small: bool, folder: Path, runs: int, threads: int) -> dict:
    """ember's median time per inference in this process, after what `scenario` runs first."""
    inputs = _inputs(folder)
    keep = []  # what ran before ember stays alive while ember is timed
    if scenario == "after_torch":
        keep.append(_torch_runs(name, small, inputs, threads))
    if scenario in ("after_ort", "with_ort"):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        sess = ort.InferenceSession(str(folder / "model.onnx"), opts, providers=["CPUExecutionProvider"])
        feed = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
        for _ in range(5):
            sess.run(None, feed)
        keep.append(sess)
    if scenario == "torch_compile":
        import torch

        torch.set_num_threads(threads)
        compiled, tensors, calls = compiled_with_breaks(name, small)
        times, totals = [], []
        with torch.no_grad():
            for _ in range(runs):
                calls.seconds, t = 0.0, time.perf_counter()
                compiled(*tensors)
                totals.append(time.perf_counter() - t)
                times.append(calls.seconds)
        return {"median": statistics.median(times), "total": statistics.median(totals)}
    import ember

    if scenario == "segments":
        seg = folder / "segments"
        order = json.loads((seg / "order.json").read_text())
        models = [ember.load(seg / f"m{k}") for k in range(1 + max(m for m, _ in order))]
        args = [[np.load(seg / f"s{step}_{k}.npy") for k in range(n)] for step, (_, n) in enumerate(order)]

        def forward():
            for (m, _), a in zip(order, args):
                models[m](*a)

        return timed_calls(forward, runs)
    cm = ember.load(folder / "ember")
    if scenario == "with_ort":  # ORT runs before each of ember's calls; ember's calls are timed
        times = []
        for _ in range(runs):
            keep[0].run(None, feed)
            t = time.perf_counter()
            cm(*inputs)
            times.append(time.perf_counter() - t)
        return {"median": statistics.median(times)}
    return timed_calls(lambda: cm(*inputs), runs)


def _child(argv: list[str], env: dict[str, str]) -> dict:
    """This file in a fresh process with `argv` and `env` added; its last stdout line is JSON."""
    run = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    lines = run.stdout.strip().splitlines()
    if run.returncode != 0 or not lines:
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {run.returncode}: {tail[:100]}"}
    return json.loads(lines[-1])


# --- the parent --------------------------------------------------------------------------------------

def parse_policy(text: str) -> dict[str, str]:
    return {} if text == "default" else dict(item.split("=", 1) for item in text.split(","))


def run_model(name: str, args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "variants.json").write_text(json.dumps({"ember": {}}))
        scenarios = [s for s in args.scenarios if s not in ("torch_compile", "segments") or name in BREAKS]
        if name == "gemv":
            scenarios = [s for s in scenarios if s not in ("after_ort", "with_ort")]
        if "torch_compile" in scenarios and "segments" not in scenarios:
            scenarios.append("segments")
        prep = _child(["--prepare", name, "--folder", tmp, *(["--small"] if args.small else []),
                       *(["--onnx"] if {"after_ort", "with_ort"} & set(scenarios) else []),
                       *(["--segments"] if "torch_compile" in scenarios else [])], {})
        if "error" in prep or "error" in prep.get("ember", {}).get("ember", {}):
            print(f"{name:<12} prepare failed: {prep}", flush=True)
            return
        if "onnx_error" in prep:
            scenarios = [s for s in scenarios if s not in ("after_ort", "with_ort")]
        results: dict[tuple[str, str], list[dict]] = {}
        for _ in range(args.rounds):
            for policy in args.policies:
                for scenario in scenarios:
                    results.setdefault((policy, scenario), []).append(_child(
                        ["--measure", scenario, name, "--folder", tmp, "--runs", str(args.runs),
                         "--threads", str(args.threads), *(["--small"] if args.small else [])],
                        parse_policy(policy)))
    figures = {}
    for key, got in results.items():
        ok = [g["median"] for g in got if "error" not in g]
        totals = [g["total"] for g in got if "total" in g]
        cpu = [g["cpu"] for g in got if "cpu" in g]
        figures[key] = (statistics.median(ok) if ok else None, max(ok) / min(ok) if ok else None,
                        statistics.median(totals) if totals else None,
                        next((g["error"] for g in got if "error" in g), ""), statistics.median(cpu) if cpu else None)
    base = figures.get((args.policies[0], "fresh"), (None,))[0]
    weight_bytes = prep["ember"]["ember"].get("weight_bytes")
    for (policy, scenario), (med, spread, total, error, cpu) in figures.items():
        if med is None:
            print(f"{name:<12} {scenario:<14} {policy:<26} failed: {error}", flush=True)
            continue
        ref = figures.get((policy, "segments" if scenario == "torch_compile" else "fresh"), (None,))[0]
        vs = f"{med / ref:8.3f}" if ref and scenario not in ("fresh", "segments") else f"{'':>8}"
        vs_base = f"{med / base:9.3f}" if base and scenario == "fresh" else f"{'':>9}"
        note = f"forward {total * 1e3:.2f} ms" if total else ""
        note += f"{weight_bytes / med / 1e9:.1f} GB/s of weights" if weight_bytes else ""
        note += f"  ({error})" if error else ""
        cpu_s = f"{cpu * 1e3:8.3f}" if cpu else f"{'-':>8}"
        print(f"{name:<12} {scenario:<14} {policy:<26} {med * 1e3:10.3f} {spread:7.2f} {vs} {vs_base} {cpu_s}  {note}",
              flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet18", "gpt2_small", "mlp", "gemv"])
    ap.add_argument("--small", action="store_true", help="the reduced-size variants")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--scenarios", nargs="+", default=["fresh", "after_torch", "after_ort", "torch_compile"],
                    choices=SCENARIOS)
    ap.add_argument("--policies", nargs="+", default=["default"])
    # the child processes
    ap.add_argument("--prepare", metavar="MODEL")
    ap.add_argument("--measure", nargs=2, metavar=("SCENARIO", "MODEL"))
    ap.add_argument("--folder")
    ap.add_argument("--onnx", action="store_true")
    ap.add_argument("--segments", action="store_true")
    args = ap.parse_args(argv)
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    if args.prepare:
        folder = Path(args.folder)
        if args.prepare == "gemv":
            print(json.dumps(prepare_gemv(folder)))
            return
        report = prepare(args.prepare, args.small, folder, {"ember": {}}, args.onnx)
        if args.segments:
            report["segments"] = prepare_segments(args.prepare, args.small, folder)
        print(json.dumps(report))
        return
    if args.measure:
        scenario, name = args.measure
        print(json.dumps(measure(scenario, name, args.small, Path(args.folder), args.runs, args.threads)))
        return
    print(f"batch 1, {args.threads} threads; ember's time per inference, each figure a fresh process; "
          f"median over {args.rounds} alternating rounds of the median of {args.runs} calls")
    print(f"{'model':<12} {'scenario':<14} {'policy':<26} {'ember ms':>10} {'spread':>7} {'vs fresh':>8} "
          f"{'vs policy':>9} {'cpu ms':>8}")
    for name in args.models:
        run_model(name, args)
    print("spread: slowest round / fastest round; vs fresh: against fresh (torch.compile: against segments) "
          "under the same policy; vs policy: fresh against the first policy's fresh; cpu: the process's CPU "
          "time per call, all threads (spinning counts; waiting for a core does not)")


if __name__ == "__main__":
    main()

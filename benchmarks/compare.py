"""Every zoo model, compiled by ember and run next to its peers, each runtime in its own process.

For each model: latency (batch 1 or --batch, --threads threads) and compile time of ember, ONNX Runtime,
torch eager and torch.compile (inductor), with ratios to ONNX Runtime and to torch eager.

Runtimes disturb each other in one process (ONNX Runtime's and torch's idle OpenMP threads spin
on the 2 cores ember's threads want), so every latency is measured in a fresh process that runs
one runtime only, and the runtimes take turns over --rounds rounds (a slow spell of a noisy
machine falls on all of them alike); the table shows each runtime's best median. A first process
prepares the model once: torch eager's outputs, ember's compiled model saved as an artifact
(checked against eager) and the ONNX file; the timing processes load those. "ember after torch"
(--after-torch) times ember's model in a process where torch eager ran the model first.

--precision bf16 adds ember compiled with precision="bf16" ("ember-bf16": the weights of linear
layers and convolutions in bf16, their products on the CPU's bf16 unit), checked against torch's
fp32 at ||out - ref|| / ||ref|| <= 1e-2 (the note gives the error), and its peers become torch
eager under CPU autocast to bf16 ("autocast": oneDNN's bf16 kernels), ONNX Runtime in fp32 and
OpenVINO in bf16 ("openvino-bf16": its INFERENCE_PRECISION_HINT, from the ONNX file).

--int8 adds ember's int8 model ("ember-int8": ember.quantize, dynamic for transformers, static for
CNNs on --calibration batches of fresh inputs, as benchmarks/quantize.py does), with ONNX Runtime's
int8 model of the same ONNX export as a peer ("onnxruntime-int8": quantize_dynamic with per-channel
weights for transformers, quantize_static to QDQ for CNNs), next to the bf16 peers. A low-precision
peer's note gives its ||out - ref|| / ||ref|| against torch's fp32, and each model ends with ember's
best against the best of torch autocast bf16, OpenVINO bf16 and ONNX Runtime int8. OpenVINO is
optional: without it its peers are skipped, and the table says why.

    python benchmarks/compare.py [--models resnet18 bert_base] [--small] [--batch 1] [--runs 20] [--rounds 2]
                                 [--threads 2] [--peers onnxruntime inductor eager autocast] [--after-torch]
                                 [--precision fp32 | bf16] [--int8] [--cpu-time]
                                 [--peers ... openvino openvino-bf16 onnxruntime-int8]

--cpu-time: one thread, each run timed by the process's CPU time, not the wall clock (on a few
cores other processes load, a run's wall time is mostly its waits for a core).

--device cuda compares on the GPU instead (benchmarks/compare_cuda.py: ember in fp32 and fp16 next
to torch eager and torch.compile "default" and "reduce-overhead", CUDA events; --runs, --small and
--models as here; --peers names the torch.compile modes timed, "default" and/or "reduce-overhead"); without a
GPU it says so and exits with 1.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@contextlib.contextmanager
def quiet_fds():
    """Silence stdout and stderr at the file-descriptor level (exporters print whole graphs)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def export_onnx(model, inputs, path: Path) -> None:
    """The model as ONNX at path, silently: by the TorchScript exporter, else (it cannot take every
    model) by the dynamo one."""
    import torch

    with warnings.catch_warnings(), quiet_fds():
        warnings.simplefilter("ignore")
        buf = io.BytesIO()
        try:
            torch.onnx.export(model, inputs, buf, dynamo=False)
        except Exception:
            buf = io.BytesIO()
            torch.onnx.export(model, inputs, buf, dynamo=True)
    path.write_bytes(buf.getvalue())


CPU_TIME = False  # --cpu-time: each run timed by the process's CPU time (one thread)


def median_latency(fn, runs: int) -> float:
    import ember

    return cpu_latency(fn, runs) if CPU_TIME else ember.bench(fn, warmup=3, repeat=runs, number=1).median


def cpu_latency(fn, runs: int) -> float:
    """The median CPU time of this process per call (user and system, all its threads), after 3
    calls of warm-up."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return float(np.median(times))


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


# --- the child processes ----------------------------------------------------------------------------

TRANSFORMERS = {"bert_base", "gpt2_small"}  # int8: dynamic quantization of their linear layers
CALIBRATION = 4  # --int8: the batches a CNN's static quantization (ember's, ONNX Runtime's) calibrates on
INT8_BOUND = 0.1  # --int8: ember's int8 model is refused above this ||out - ref|| / ||ref|| (ONNX Runtime's: 2-4e-2)


def fresh(inputs, rng: np.random.Generator) -> list[np.ndarray]:
    """Inputs of the example's shapes and dtypes: normal floats, token ids below 1000."""
    return [rng.standard_normal(x.shape).astype(np.float32) if x.is_floating_point()
            else rng.integers(0, 1000, tuple(x.shape)).astype(x.numpy().dtype) for x in inputs]


def relative_error(out, ref) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))


def ort_int8(fp32: Path, int8: Path, dynamic: bool, calibration: list[list[np.ndarray]]) -> None:
    """ONNX Runtime's int8 model of the ONNX file fp32, written to int8: quantize_dynamic (int8
    weights per output channel, uint8 activations quantized at run time: its MatMulInteger or
    DynamicQuantizeMatMul kernels) where dynamic, else quantize_static to QDQ (per-channel int8
    weights, uint8 activations) calibrated on the batches."""
    import onnxruntime as ort
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    with quiet_fds():
        if dynamic:
            quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8, per_channel=True)
            return
        names = [i.name for i in ort.InferenceSession(str(fp32), providers=["CPUExecutionProvider"]).get_inputs()]

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.batches = iter(calibration)

            def get_next(self):
                batch = next(self.batches, None)
                return None if batch is None else dict(zip(names, batch))

        quantize_static(str(fp32), str(int8), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)


def prepare(name: str, small: bool, folder: Path, variants: dict[str, dict], onnx: bool, batch: int = 1,
            onnx_int8: bool = False) -> dict:
    """Inputs and torch eager's outputs as .npy, each ember variant compiled, checked and saved
    (folder/<label>/), and the ONNX file (and ONNX Runtime's int8 model of it where onnx_int8):
    what the timing processes load. A variant's option quantize="dynamic" | "static" makes it
    ember.quantize's (static: calibrated on fresh inputs)."""
    import torch

    import ember
    from benchmarks.models import ZOO

    if name in ZOO:
        model, inputs = ZOO[name](small=small, **({"batch": batch} if batch != 1 else {}))
    else:  # a hub model (benchmarks/models/hub.py: tv_densenet121, ...), at batch 1
        from benchmarks.models.hub import HUB

        model, inputs = HUB[name].build(small)
    with torch.no_grad():
        expected = model(*inputs)
    for k, x in enumerate(inputs):
        np.save(folder / f"input{k}.npy", x.numpy())
    np.save(folder / "expected.npy", expected.numpy())
    rng = np.random.default_rng(0)
    calibration = [fresh(inputs, rng) for _ in range(CALIBRATION)]
    report = {"inputs": len(inputs), "ember": {}}
    for label, options in variants.items():
        if "database" in options:  # a path: a Database is no JSON
            from ember.tune import Database

            options = {**options, "database": Database(options["database"])}
        try:
            quantize = options.get("quantize")
            if quantize:
                rest = {k: v for k, v in options.items() if k != "quantize"}
                cm, t_compile = timed(lambda rest=rest, dynamic=quantize == "dynamic": ember.quantize(
                    model, inputs, None if dynamic else calibration, dynamic=dynamic, progress=False, **rest))
            else:
                cm, t_compile = timed(lambda options=options: ember.compile(model, example_inputs=inputs, **options))
            out, note = cm(*inputs).numpy(), f"{len(cm.kernels)} kernels"
            if options.get("precision", "fp32") == "fp32" and not quantize:
                np.testing.assert_allclose(out, expected.numpy(), rtol=1e-3, atol=1e-3)
            else:  # rounded to bf16 or int8: the bound of the whole output's relative error
                error, bound = relative_error(out, expected.numpy()), INT8_BOUND if quantize else 1e-2
                assert error <= bound, f"||out - ref|| / ||ref|| = {error:.1e} > {bound}"
                note += f", rel. error {error:.1e}"
            cm.save(folder / label)
            report["ember"][label] = {"compile": t_compile, "note": note}
        except Exception as e:  # a benchmark reports what failed and goes on with the peers
            report["ember"][label] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"}
    if onnx:
        try:
            export_onnx(model, inputs, folder / "model.onnx")
        except Exception as e:
            report["onnx_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
    if onnx_int8 and "onnx_error" not in report:
        try:
            ort_int8(folder / "model.onnx", folder / "int8.onnx", name in TRANSFORMERS, calibration)
        except Exception as e:
            report["onnx_int8_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
    return report


def measure(runtime: str, name: str, small: bool, folder: Path, runs: int, threads: int, label: str) -> dict:
    """One runtime's median latency (and load or compile time) in this process."""
    inputs = [np.load(folder / f"input{k}.npy") for k in range(len(list(folder.glob("input*.npy"))))]
    if runtime == "ember":
        import ember

        cm = ember.load(folder / label)
        return {"median": median_latency(lambda: cm(*inputs), runs), "compile": None}
    if runtime in ("onnxruntime", "onnxruntime-int8"):
        import onnxruntime as ort

        def session():
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            path = folder / ("int8.onnx" if runtime == "onnxruntime-int8" else "model.onnx")
            return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

        sess, t_compile = timed(session)
        feed = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
        return {"median": median_latency(lambda: sess.run(None, feed), runs), "compile": t_compile,
                "rel": relative_error(sess.run(None, feed)[0], np.load(folder / "expected.npy"))}
    if runtime in ("openvino", "openvino-bf16"):
        import openvino as ov

        def compiled():
            core = ov.Core()
            return core.compile_model(core.read_model(str(folder / "model.onnx")), "CPU", {
                "INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
                "INFERENCE_PRECISION_HINT": "bf16" if runtime == "openvino-bf16" else "f32"})

        model, t_compile = timed(compiled)
        request = model.create_infer_request()
        return {"median": median_latency(lambda: request.infer(inputs), runs), "compile": t_compile,
                "rel": relative_error(request.infer(inputs)[model.output(0)], np.load(folder / "expected.npy"))}
    import torch

    from benchmarks.models import ZOO

    torch.set_num_threads(threads)
    model, _ = ZOO[name](small=small)
    tensors = [torch.from_numpy(x) for x in inputs]
    with torch.no_grad():
        if runtime == "eager":
            return {"median": median_latency(lambda: model(*tensors), runs), "compile": None}
        if runtime == "autocast":
            def autocast():
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    return model(*tensors)

            return {"median": median_latency(autocast, runs), "compile": None}
        if runtime == "inductor":
            compiled = torch.compile(model)
            _, t_compile = timed(lambda: compiled(*tensors))
            return {"median": median_latency(lambda: compiled(*tensors), runs), "compile": t_compile}
        if runtime == "ember_after_torch":
            for _ in range(5):
                model(*tensors)
            import ember

            cm = ember.load(folder / label)
            return {"median": median_latency(lambda: cm(*inputs), runs), "compile": None}
    raise ValueError(f"unknown runtime {runtime}")


def run_child(argv: list[str], script: str = __file__, env: dict[str, str] | None = None) -> dict:
    """Run `script` (this file) in a fresh process with `argv` (and `env` added to the environment);
    its last stdout line is a JSON object."""
    run = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    lines = run.stdout.strip().splitlines()
    if run.returncode != 0 or not lines:
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {run.returncode}: {tail[:100]}"}
    return json.loads(lines[-1])


# --- the parent --------------------------------------------------------------------------------------

Row = tuple[str, float | None, float | None, str]  # runtime, latency s, compile s, note
LABELS = {"onnxruntime": "onnxruntime", "eager": "torch eager", "inductor": "torch.compile",
          "ember_after_torch": "ember after torch", "autocast": "torch autocast bf16",
          "onnxruntime-int8": "onnxruntime int8", "openvino": "openvino", "openvino-bf16": "openvino bf16"}
ONNX_PEERS = {"onnxruntime", "onnxruntime-int8", "openvino", "openvino-bf16"}  # the peers that load the ONNX file
LOW_PRECISION = ("torch autocast bf16", "openvino bf16", "onnxruntime int8")  # the peers ember's best is held to


def compare_model(name: str, small: bool, runs: int, rounds: int, threads: int, peers: list[str],
                  variants: dict[str, dict] | None = None, after_torch: bool = False, batch: int = 1,
                  cpu_time: bool = False) -> list[Row]:
    """Rows for each ember variant (a label -> ember.compile options, a tuning database as its
    path; default "ember": none) and
    each peer, every latency the best median over `rounds` rounds of one fresh process each."""
    variants = variants or {"ember": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "variants.json").write_text(json.dumps(variants))
        prep = run_child(["--prepare", name, "--folder", tmp, "--batch", str(batch), *(["--small"] if small else []),
                          *(["--onnx"] if ONNX_PEERS & set(peers) else []),
                          *(["--onnx-int8"] if "onnxruntime-int8" in peers else [])])
        if "error" in prep:
            return [("prepare", None, None, prep["error"])]
        jobs = [("ember", label) for label, r in prep["ember"].items() if "error" not in r]
        jobs += [("ember_after_torch", "ember")] if after_torch and ("ember", "ember") in jobs else []
        jobs += [(p, "") for p in peers if not (p in ONNX_PEERS and "onnx_error" in prep)
                 and not (p == "onnxruntime-int8" and "onnx_int8_error" in prep)]
        results: dict = {job: [] for job in jobs}
        for _ in range(rounds):
            for runtime, label in jobs:
                results[(runtime, label)].append(run_child(
                    ["--measure", runtime, name, "--folder", tmp, "--label", label, "--runs", str(runs),
                     "--threads", str(threads), *(["--small"] if small else []),
                     *(["--cpu-time"] if cpu_time else [])]))
    rows: list[Row] = []
    for label, r in prep["ember"].items():
        if "error" in r:
            rows.append((label, None, None, f"failed: {r['error']}"))
    if "onnx_error" in prep:
        rows.append(("onnxruntime", None, None, f"export failed: {prep['onnx_error']}"))
    if "onnx_int8_error" in prep:
        rows.append(("onnxruntime int8", None, None, f"quantization failed: {prep['onnx_int8_error']}"))
    for (runtime, label), got in results.items():
        ok = [g for g in got if "error" not in g]
        shown = label if runtime == "ember" else LABELS[runtime]
        if not ok:
            rows.append((shown, None, None, f"failed: {got[0]['error']}"))
            continue
        compile_s = prep["ember"][label]["compile"] if runtime == "ember" else ok[0]["compile"]
        note = prep["ember"][label]["note"] if runtime == "ember" else \
            f"rel. error {ok[0]['rel']:.1e}" if "rel" in ok[0] else ""
        rows.append((shown, min(g["median"] for g in ok), compile_s, note))
    return rows


def best_low_precision(name: str, rows: list[Row]) -> None:
    """The line that holds ember's best variant to the best of the low-precision peers in rows."""
    ours = [(lat, runtime) for runtime, lat, _, _ in rows if runtime.startswith("ember") and lat]
    peers = [(lat, runtime) for runtime, lat, _, _ in rows if runtime in LOW_PRECISION and lat]
    if ours and peers:
        (lat, runtime), (peer, peer_name) = min(ours), min(peers)
        print(f"{name:<14} {runtime} / {peer_name} (the best of each): {lat / peer:.2f}x", flush=True)


def main(argv=None) -> None:
    from benchmarks.models import ZOO

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(ZOO))
    ap.add_argument("--small", action="store_true", help="the reduced-size variants")
    ap.add_argument("--batch", type=int, default=1, help="the batch size (models that take one)")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peers", nargs="*", help="default: onnxruntime eager inductor; with --precision bf16, "
                                               "onnxruntime autocast openvino-bf16; with --int8, those and "
                                               "onnxruntime-int8 (also: openvino, fp32)")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: also ember with precision='bf16'")
    ap.add_argument("--int8", action="store_true", help="also ember.quantize's int8 model (dynamic for "
                    "transformers, static for CNNs), and ONNX Runtime's int8 model as a peer")
    ap.add_argument("--cpu-time", action="store_true", help="one thread, each run timed by the process's CPU "
                    "time (a fair measure on a machine other processes load)")
    ap.add_argument("--after-torch", action="store_true", help="also time ember after torch ran in its process")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: ember in fp32 and fp16 on the GPU next to torch eager and torch.compile")
    ap.add_argument("--gpu-precisions", nargs="+", choices=["fp32", "fp16"], default=["fp32", "fp16"],
                    help="with --device cuda: the precisions compared (default fp32 fp16)")
    # the child processes
    ap.add_argument("--prepare", metavar="MODEL")
    ap.add_argument("--measure", nargs=2, metavar=("RUNTIME", "MODEL"))
    ap.add_argument("--folder")
    ap.add_argument("--label", default="ember")
    ap.add_argument("--onnx", action="store_true")
    ap.add_argument("--onnx-int8", action="store_true")
    args = ap.parse_args(argv)
    if args.device == "cuda":
        from benchmarks import compare_cuda

        modes = [p for p in args.peers if p in compare_cuda.TORCH_COMPILE_MODES] if args.peers is not None \
            else compare_cuda.TORCH_COMPILE_MODES
        compare_cuda.main(args.models, args.small, args.runs, args.gpu_precisions, modes)
        return
    if args.cpu_time:
        global CPU_TIME
        CPU_TIME, args.threads = True, 1
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    if args.prepare:
        variants = json.loads((Path(args.folder) / "variants.json").read_text())
        print(json.dumps(prepare(args.prepare, args.small, Path(args.folder), variants, args.onnx, args.batch,
                                 args.onnx_int8)))
        return
    if args.measure:
        runtime, name = args.measure
        print(json.dumps(measure(runtime, name, args.small, Path(args.folder), args.runs, args.threads, args.label)))
        return
    if args.peers is None:
        args.peers = ["onnxruntime", "autocast", "openvino-bf16"] if args.precision == "bf16" or args.int8 else \
            ["onnxruntime", "eager", "inductor"]
        args.peers += ["onnxruntime-int8"] if args.int8 else []
    if importlib.util.find_spec("openvino") is None and {"openvino", "openvino-bf16"} & set(args.peers):
        print("openvino and openvino-bf16 skipped: OpenVINO is not installed (pip install openvino)")
        args.peers = [p for p in args.peers if not p.startswith("openvino")]
    variants = {"ember": {}, **({"ember-bf16": {"precision": "bf16"}} if args.precision == "bf16" else {})}
    clock = ", the process's CPU time" if args.cpu_time else ""
    print(f"batch {args.batch}, {args.threads} threads{clock}; each runtime in its own process, {args.rounds} rounds, "
          f"best median of {args.runs} runs")
    print(f"{'model':<14} {'runtime':<18} {'latency ms':>11} {'vs ORT':>7} {'vs eager':>9} {'compile s':>10}  note")
    for name in args.models:
        int8 = {"ember-int8": {"quantize": "dynamic" if name in TRANSFORMERS else "static"}} if args.int8 else {}
        rows = compare_model(name, args.small, args.runs, args.rounds, args.threads, args.peers, {**variants, **int8},
                             after_torch=args.after_torch, batch=args.batch, cpu_time=args.cpu_time)
        ort = next((lat for runtime, lat, _, _ in rows if runtime == "onnxruntime" and lat), None)
        eager = next((lat for runtime, lat, _, _ in rows if runtime == "torch eager" and lat), None)
        for runtime, lat, comp, note in rows:
            lat_s = f"{lat * 1e3:11.3f}" if lat else f"{'-':>11}"
            vs_ort = f"{lat / ort:7.2f}" if lat and ort else f"{'-':>7}"
            vs_eager = f"{lat / eager:9.2f}" if lat and eager else f"{'-':>9}"
            comp_s = f"{comp:10.1f}" if comp is not None else f"{'-':>10}"
            print(f"{name:<14} {runtime:<18} {lat_s} {vs_ort} {vs_eager} {comp_s}  {note}", flush=True)
        best_low_precision(name, rows)
    print("vs ORT, vs eager: latency / the peer's latency (below 1: faster than the peer)")


if __name__ == "__main__":
    main()

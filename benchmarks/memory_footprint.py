"""Memory footprint of a compiled model: BERT-base (transformers' BertModel, default config, 128
tokens), BERT-large (bert-large: 24 layers, hidden 1024) and ResNet-18 (benchmarks/models/resnet.py,
224x224), each case in a fresh process.

    torch        the module itself, after one forward
    ort          an ONNX Runtime session of the module's ONNX export, after one run
    cold         ember.compile with an empty model cache (EMBER_CACHE_DIR a fresh folder)
    warm         ember.compile again: a model cache hit
    loaded       ember.load of the model saved with cm.save

Each row: the process's peak RSS (getrusage's maxrss), its RSS after gc (VmRSS), the growth of
the RSS over the process before the case (model built, nothing compiled), the bytes of the
module's parameters and buffers, and for ember the bytes of the distinct buffers the compiled
model holds (its weights and its graph's constants: ember.runtime.summary.held_bytes); then the
peak over the process before the model was built (torch imported), in units of the parameters'
bytes (the module's own copy counts one), and the wall and CPU seconds of the compile, the load,
the ONNX Runtime session's creation or torch's forward.

    python benchmarks/memory_footprint.py [--small] [--models bert bert-large resnet18] [--cases cold]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES = ("torch", "ort", "cold", "warm", "loaded")
MB = 1 << 20


def vm_rss() -> int:
    """This process's resident bytes now (after a gc)."""
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def lap(clock: tuple[float, float]) -> tuple[float, float]:
    """Wall and CPU seconds since `clock` (perf_counter, process_time)."""
    return time.perf_counter() - clock[0], time.process_time() - clock[1]


def build(name: str, small: bool):
    if name in ("bert", "bert-large"):
        from benchmarks.models.bert import bert_base, bert_large

        return (bert_base if name == "bert" else bert_large)(small)
    from benchmarks.models.resnet import resnet18

    return resnet18(small)


def child(case: str, name: str, small: bool, folder: Path) -> dict:
    import torch

    start = vm_rss()
    model, inputs = build(name, small)
    param_bytes = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    before = vm_rss()
    held = None
    clock = (time.perf_counter(), time.process_time())
    if case == "torch":
        with torch.no_grad():
            model(*inputs)
        seconds = lap(clock)
    elif case == "ort":
        import onnxruntime as ort

        from benchmarks.compare import export_onnx

        path = folder / f"{name}.onnx"
        export_onnx(model, inputs, path)
        del model
        gc.collect()
        before = vm_rss()
        clock = (time.perf_counter(), time.process_time())  # (the session's, not the export's)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        seconds = lap(clock)
        session.run(None, {session.get_inputs()[0].name: inputs[0].numpy()})
    else:
        import ember
        from ember.runtime.summary import held_bytes

        clock = (time.perf_counter(), time.process_time())
        cm = ember.load(folder / "saved") if case == "loaded" else ember.compile(model, inputs)
        seconds = lap(clock)
        if case == "cold":
            cm.save(folder / "saved")
        cm(*inputs)
        held = held_bytes(cm)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    rss = vm_rss()
    return {"case": case, "peak": peak, "rss": rss, "growth": rss - before, "params": param_bytes, "held": held,
            "start": start, "seconds": seconds}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--models", nargs="+", default=["bert", "resnet18"], choices=["bert", "bert-large", "resnet18"])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES,
                    help="warm and loaded read what cold wrote")
    ap.add_argument("--child", nargs=3, metavar=("CASE", "MODEL", "FOLDER"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        case, name, folder = args.child
        print(json.dumps(child(case, name, args.small, Path(folder))))
        return
    print(f"{'model':10} {'case':7} {'peak MB':>8} {'RSS MB':>8} {'growth MB':>9} {'params MB':>9} {'held MB':>8} "
          f"{'peak/params':>11} {'wall s':>7} {'CPU s':>6}")
    for name in args.models:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "EMBER_CACHE_DIR": str(Path(tmp) / "cache")}
            for case in args.cases:
                argv = [sys.executable, __file__, "--child", case, name, tmp] + (["--small"] if args.small else [])
                out = subprocess.run(argv, env=env, capture_output=True, text=True)
                if out.returncode != 0:
                    print(f"{name:10} {case:7} failed: {out.stderr.strip().splitlines()[-1:]}")
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                held = "" if r["held"] is None else f"{r['held'] / MB:8.1f}"
                print(f"{name:10} {case:7} {r['peak'] / MB:8.1f} {r['rss'] / MB:8.1f} {r['growth'] / MB:9.1f} "
                      f"{r['params'] / MB:9.1f} {held:>8} {(r['peak'] - r['start']) / r['params']:11.2f} "
                      f"{r['seconds'][0]:7.2f} {r['seconds'][1]:6.2f}", flush=True)


if __name__ == "__main__":
    main()

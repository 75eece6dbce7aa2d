"""The zoo on one GPU (`compare.py --device cuda`): ember (target "cuda", precision fp32 and fp16)
next to torch eager and torch.compile (mode "default" and "reduce-overhead"), fp32 and fp16
(`model.half()`), and for a convolution network ember without its channels-last
activations ("ember, NCHW": ember.passes.channels_last disabled), each latency the median of
CUDA-event intervals after a warm-up
(cuda_timing.timed), and each first call (compile included) timed. Every ember model is checked
against torch eager in fp32 first (||out - ref|| / ||ref|| within 1e-4 for fp32, 1e-2 for fp16);
a runtime that fails prints its error in its row and the others go on.

One process, unlike the CPU comparison: the peers share no cores here, and the GPU runs one
kernel at a time. Needs a GPU, torch with CUDA, cuda-bindings and NVRTC; without a GPU it says so
and exits with 1 before building anything.

    python benchmarks/compare.py --device cuda [--models resnet18 bert_base] [--small] [--runs 50]
"""

from __future__ import annotations

import time
import traceback

import numpy as np

from benchmarks.cuda_timing import timed

TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2}
TORCH_COMPILE_MODES = ["default", "reduce-overhead"]
Row = tuple[str, str, float | None, float | None, str]  # runtime, precision, latency s, first call s, note


def check_gpu() -> str:
    """The GPU's name, or SystemExit(1) saying why there is none."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("compare.py --device cuda: no GPU here (torch.cuda.is_available() is False); run it on a "
                         "machine with an NVIDIA GPU, torch with CUDA, cuda-bindings and NVRTC")
    return torch.cuda.get_device_name()


def relative_error(out, ref) -> float:
    out, ref = (np.asarray(x.detach().float().cpu()) for x in (out, ref))
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def first_call(fn):
    """fn's result and the seconds of its first call, the GPU's work included."""
    import torch

    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t


def half_inputs(inputs):
    return [x.half() if x.is_floating_point() else x for x in inputs]


def model_rows(name: str, small: bool, runs: int, precisions: list[str], peers: list[str]) -> list[Row]:
    import copy

    import torch

    import ember
    from benchmarks.models import ZOO

    host_model, host_inputs = ZOO[name](small=small)  # ember compiles from the host copy
    host_model = host_model.eval()
    model = copy.deepcopy(host_model).cuda()
    inputs = [x.cuda() for x in host_inputs]
    # fp32 is IEEE fp32 for every runtime: cuDNN's convolutions would take TF32 by default
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        ref = model(*inputs)
    rows: list[Row] = []

    def run(label: str, precision: str, make) -> None:
        try:
            fn, first_s, note = make()
            rows.append((label, precision, timed(fn, runs), first_s, note))
        except Exception as e:  # a benchmark reports what failed and goes on with the peers
            rows.append((label, precision, None, None, f"failed: {type(e).__name__}: {str(e).splitlines()[0][:90]}"))
            traceback.print_exc(limit=4)

    for precision in precisions:
        def ember_model(precision=precision, disabled=()):
            t = time.perf_counter()
            cm = ember.compile(host_model, example_inputs=host_inputs, target="cuda", precision=precision,
                               disabled_passes=disabled)
            out, _ = first_call(lambda: cm(*inputs))
            error = relative_error(out, ref)
            assert error <= TOLERANCE[precision], f"||out - ref|| / ||ref|| = {error:.1e} > {TOLERANCE[precision]}"
            return (lambda: cm(*inputs)), time.perf_counter() - t, f"{len(cm.kernels)} kernels, rel. error {error:.1e}"

        run("ember", precision, ember_model)
        if any(isinstance(m, torch.nn.Conv2d) for m in host_model.modules()):
            run("ember, NCHW", precision, lambda: ember_model(disabled=("channels_last",)))  # (channels_last's gain)
        peer = model if precision == "fp32" else copy.deepcopy(model).half()
        args = inputs if precision == "fp32" else half_inputs(inputs)
        with torch.no_grad():
            run("torch eager", precision, lambda peer=peer, args=args: (lambda: peer(*args), None, ""))
            for mode in (m for m in ("default", "reduce-overhead") if m in peers):
                def compiled(peer=peer, args=args, mode=mode):
                    torch._dynamo.reset()
                    fn = torch.compile(peer, mode=mode)
                    _, first_s = first_call(lambda: fn(*args))
                    return (lambda: fn(*args)), first_s, ""

                run(f"torch.compile {mode}", precision, compiled)
    return rows


def cell(value: float | None, width: int, spec: str) -> str:
    return f"{value:{width}{spec}}" if value else "-".rjust(width)


def main(models: list[str], small: bool, runs: int, precisions: list[str],
         peers: list[str] = TORCH_COMPILE_MODES) -> None:
    """peers: the torch.compile modes timed beside torch eager ("default", "reduce-overhead")."""
    print(f"{check_gpu()}; batch 1, medians of {runs} CUDA-event intervals")
    print(f"{'model':<14} {'runtime':<28} {'prec':<5} {'latency ms':>11} {'vs eager':>9} {'vs r-o':>7} "
          f"{'first call s':>13}  note")
    for name in models:
        rows = model_rows(name, small, runs, precisions, peers)
        for runtime, precision, lat, first_s, note in rows:
            latency = {r[0]: r[2] for r in rows if r[1] == precision}
            eager, overhead = latency.get("torch eager"), latency.get("torch.compile reduce-overhead")
            ratios = cell(lat and eager and lat / eager, 9, ".2f"), cell(lat and overhead and lat / overhead, 7, ".2f")
            print(f"{name:<14} {runtime:<28} {precision:<5} {cell(lat and lat * 1e3, 11, '.3f')} {' '.join(ratios)} "
                  f"{cell(first_s, 13, '.2f')}  {note}", flush=True)
    print("vs eager, vs r-o: latency / torch eager's, / torch.compile reduce-overhead's, in the same precision; "
          "first call: ember's compile and first call, torch.compile's first call")

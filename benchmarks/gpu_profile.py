"""Where a zoo model's time goes on the GPU, kernel by kernel: each model compiled for target
"cuda" in each precision, checked against torch, then `cm.profile` (CUDA events between the
launches, issued one by one), the kernels sorted by time, the top ones printed with their share
of the profiled call, their grid against the GPU's multiprocessors, and their bound: the longer
of their bytes over the device's copy bandwidth and their FLOPs over the products' peak, both
measured in the same run (torch's clone of 256 MiB; cuBLAS's 8192^3 fp16 product and 4096^3 fp32
one, TF32 off). "of bound" is the bound over the kernel's time: 100% would be a kernel at the
device's limits, a few % one that waits for its launch, its serial K loop, or idle SMs. The
profiled calls issue their launches one by one from Python, the stream held meanwhile (by
torch.cuda._sleep, for twice the host's issue time: `CUDAModel.profile(hold=)`), so a kernel's
interval is its own, not its launch's.

A kernel's bytes are its launches' arguments (each buffer once per launch: what it reads and
writes at least), its FLOPs those of the products among its nodes (2 x outputs x reduction;
elementwise work is not counted: such a kernel's bound is its bytes). Each model's head line
gives the profiled call (launches one by one), the same call replayed as one CUDA graph, and
torch eager's, medians of CUDA-event intervals, and the graph of the same model compiled
without each pass --without names (split_k by default: whether its parts pay on this GPU).

    python benchmarks/gpu_profile.py [--models resnet18 bert_base] [--precisions fp16 fp32] [--top 15]
                                     [--repeat 20] [--small] [--without split_k conv_gemm]
    python benchmarks/gpu_profile.py --grids [--models ...]   # no GPU needed: every kernel's blocks vs SMs

--grids compiles for the target's GPU (the device's facts, an H100's or H200's 132 SMs without
one) and prints each kernel's grid, blocks, threads and registers, in the order they run, flagging those
that leave multiprocessors idle.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from math import prod
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.compare_cuda import TOLERANCE, half_inputs, relative_error  # noqa: E402
from benchmarks.cuda_timing import timed  # noqa: E402


def node_flops(node) -> int:
    """The floating-point operations of a node's products (2 per multiply-add), 0 for other
    operators and symbolic shapes."""
    shapes = [v.type.shape for v in node.inputs]
    out = node.outputs[0].type.shape
    if any(isinstance(d, str) for s in (*shapes, out) for d in s):
        return 0
    if node.op == "matmul":
        k = shapes[0][-1]
    elif node.op == "gemm":
        k = shapes[0][0] if node.attrs["trans_a"] else shapes[0][1]
    elif node.op in ("conv2d_gemm", "gemm_partials", "conv2d_gemm_partials", "conv2d_nhwc_gemm",
                     "conv2d_nhwc_gemm_partials"):
        k = shapes[1][-1]
    elif node.op == "conv2d":
        k = prod(shapes[1][1:])  # (C / groups) x KH x KW an output
    elif node.op == "depthwise_conv2d_nhwc":
        k = prod(shapes[1][:2])  # KH x KW an output
    elif node.op == "flash_attention":  # q k^T and p v
        (*lead, queries, e), keys, ev = shapes[0], shapes[1][-2], shapes[2][-1]
        return 2 * prod(lead) * queries * keys * (e + ev)
    else:
        return 0
    return 2 * prod(out) * k


def kernel_work(cm) -> dict[str, tuple[int, int]]:
    """Kernel name -> (bytes its launches read and write, FLOPs of its products) per call."""
    from ember.program import Launch, numel
    from ember.tir import dtype as dt

    nodes = {n.name: n for n in cm.graph.nodes}
    work = {k.name: [0, sum(node_flops(nodes[n]) for n in k.nodes if n in nodes)] for k in cm.kernels}
    for st in cm.program.body:
        if isinstance(st, Launch):
            buffers = {(a.ref, a.dims, a.dtype) for a in st.args}  # (a buffer passed twice is read once)
            work[st.kernel][0] += sum(numel(d, ()) * dt.bits(t) // 8 for _, d, t in buffers)
    return {name: (b, f) for name, (b, f) in work.items()}


def blocks_of(grid) -> int | None:
    return None if grid is None else prod(grid)


def grid_lines(cm, sms: int) -> list[str]:
    """Each kernel's launch in run order: grid, blocks, threads a block, registers a thread, and
    whether the grid leaves some of the `sms` multiprocessors idle."""
    lines = [f"  {'kernel':34} {'grid':>14} {'blocks':>7} {'threads':>8} {'regs':>5}  ops"]
    for k in cm.kernels:
        launch = cm.device_kernels[k.name]
        blocks = blocks_of(launch.grid)
        idle = "" if blocks is None or blocks >= sms else f"  < {sms} SMs"
        lines.append(f"  {k.name[:34]:34} {str(launch.grid):>14} {blocks or '-':>7} {prod(launch.block):>8} "
                     f"{launch.registers or '-':>5}  {'+'.join(k.ops)}{idle}")
    return lines


def profile_lines(cm, profile, peaks: dict, sms: int, top: int, precision: str) -> list[str]:
    """The `top` kernels of `profile` by time: us, share of the profiled call, blocks vs `sms`,
    threads a block and registers a thread (what bounds the warps a multiprocessor holds), bytes,
    FLOPs, bound (us) and the bound's share of the time; then the rest in one line."""
    work = kernel_work(cm)
    ops = {k.name: "+".join(k.ops) for k in cm.kernels}
    peak = peaks["fp16_tflops"] if precision in ("fp16", "bf16") else peaks["fp32_tflops"]
    ranked = sorted(profile.kernels, key=lambda t: -t.median_us)
    bounds = {t.name: max(work[t.name][0] / (peaks["copy_gbs"] * 1e3), work[t.name][1] / (peak * 1e6))
              for t in ranked}
    lines = [f"  {'kernel':34} {'calls':>5} {'us':>8} {'share':>6} {'blocks':>7} {'thr':>4} {'regs':>4} {'KB':>9} "
             f"{'MFLOP':>9} {'bound us':>9} {'of bound':>9}  ops"]
    for t in ranked[:top]:
        (nbytes, flops), bound = work[t.name], bounds[t.name]
        launch = cm.device_kernels[t.name]
        lines.append(f"  {t.name[:34]:34} {t.calls:5d} {t.median_us:8.1f} {t.median_us / profile.total_us:6.1%} "
                     f"{blocks_of(launch.grid) or '-':>7} {prod(launch.block):>4} {launch.registers or '-':>4} "
                     f"{nbytes / 1e3:9.1f} {flops / 1e6:9.1f} {bound:9.2f} "
                     f"{bound / max(t.median_us, 1e-3):9.1%}  {ops[t.name]}")
    rest = ranked[top:]
    if rest:
        us = sum(t.median_us for t in rest)
        lines.append(f"  {len(rest)} more kernels: {us:.1f} us, {us / profile.total_us:.1%}")
    slow = sum(1 for k in cm.kernels if (blocks_of(cm.device_kernels[k.name].grid) or sms) < sms)
    lines.append(f"  {len(cm.kernels)} kernels, {slow} of them under {sms} blocks; profiled call "
                 f"{profile.total_us:.1f} us (kernels {sum(t.median_us for t in ranked):.1f} us, their bounds "
                 f"{sum(bounds.values()):.1f} us)")
    return lines


def measure_peaks(runs: int) -> dict:
    """Copy bandwidth (GB/s, bytes read + written), fp16 and fp32 product peaks (TFLOP/s) of this
    GPU, and the cycles of torch.cuda._sleep a microsecond (what holds a profiled call's stream)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(64 << 20, device="cuda")  # 256 MiB: far past the L2
    copy_s = timed(a.clone, runs)
    del a
    n = 8192
    x, y = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
    fp16_s = timed(lambda: x @ y, runs)
    m = 4096
    x, y = (torch.randn(m, m, device="cuda") for _ in range(2))
    fp32_s = timed(lambda: x @ y, runs)
    sleep_s = timed(lambda: torch.cuda._sleep(1 << 20), 3)
    return {"copy_gbs": 2 * (64 << 20) * 4 / copy_s / 1e9, "fp16_tflops": 2 * n**3 / fp16_s / 1e12,
            "fp32_tflops": 2 * m**3 / fp32_s / 1e12, "sleep_cycles_per_us": (1 << 20) / (sleep_s * 1e6)}


def profile_model(name: str, precision: str, small: bool, repeat: int, runs: int, peaks: dict, sms: int,
                  top: int, without: list[str]) -> list[str]:
    import copy

    import torch

    import ember
    from benchmarks.models import ZOO

    model, host_inputs = ZOO[name](small=small)
    model = model.eval()
    t = time.perf_counter()
    cm = ember.compile(model, example_inputs=host_inputs, target="cuda", precision=precision)
    compile_s = time.perf_counter() - t
    peer = copy.deepcopy(model).cuda()
    inputs = [x.cuda() for x in host_inputs]
    with torch.no_grad():
        ref = peer(*inputs)
        error = relative_error(cm(*inputs), ref)
        if precision != "fp32":
            peer, inputs = peer.half(), half_inputs(inputs)
        eager = timed(lambda: peer(*inputs), runs)
    if error > TOLERANCE[precision]:
        raise AssertionError(f"{name} {precision}: ||out - ref|| / ||ref|| = {error:.1e} > {TOLERANCE[precision]}")
    xs = [x.cuda() for x in host_inputs]
    replayed = timed(lambda: cm(*xs), runs)
    cm.profile(*xs, repeat=1)
    issue_us = cm.host_us  # the host's time issuing the launches one by one, events included
    cycles = int(2 * issue_us * peaks["sleep_cycles_per_us"])
    profile = cm.profile(*xs, repeat=repeat, hold=lambda: torch.cuda._sleep(cycles))
    head = (f"{name} {precision}: compiled in {compile_s:.1f} s, rel. error {error:.1e}; one CUDA graph "
            f"{replayed * 1e6:.1f} us, torch eager {eager * 1e6:.1f} us; launches one by one "
            f"{profile.total_us:.1f} us on the GPU (the stream held while the host issued them: {issue_us:.0f} us)")
    others = []
    for p in without:  # the same model compiled without a pass, its graph timed as this one's
        other = ember.compile(model, example_inputs=host_inputs, target="cuda", precision=precision,
                              disabled_passes=(p,))
        other_error = relative_error(other(*xs), ref)
        other_s = timed(lambda other=other: other(*xs), runs)
        others.append(f"without {p}: {len(other.kernels)} kernels, one CUDA graph {other_s * 1e6:.1f} us (rel. error "
                      f"{other_error:.1e})")
    return [head, *(f"  {line}" for line in others), *profile_lines(cm, profile, peaks, sms, top, precision)]


def grids(models: list[str], precisions: list[str], small: bool) -> int:
    import ember
    from benchmarks.models import ZOO
    from ember.target import Target

    target = Target("cuda")
    sms = target.gpu.multiprocessors
    for name in models:
        model, inputs = ZOO[name](small=small)
        for precision in precisions:
            cm = ember.compile(model.eval(), example_inputs=inputs, target=target, precision=precision)
            print(f"{name} {precision}: {len(cm.kernels)} kernels, {sms} SMs")
            print("\n".join(grid_lines(cm, sms)), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "bert_base"])
    parser.add_argument("--precisions", nargs="+", choices=list(TOLERANCE), default=["fp16", "fp32"])
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=20, help="profiled calls (medians over them)")
    parser.add_argument("--runs", type=int, default=30, help="timed calls of the peers and the graph replay")
    parser.add_argument("--small", action="store_true", help="the zoo's reduced-size variants")
    parser.add_argument("--grids", action="store_true", help="no GPU: each kernel's grid against the SMs")
    parser.add_argument("--without", nargs="*", default=["split_k"],
                        help="passes each model is also compiled without, its graph replay timed beside")
    args = parser.parse_args()
    if args.grids:
        return grids(args.models, args.precisions, args.small)
    import torch

    if not torch.cuda.is_available():
        print("no GPU: torch.cuda.is_available() is False")
        return 1
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    peaks = measure_peaks(args.runs)
    print(f"{props.name}, {sms} SMs, torch {torch.__version__}: copy {peaks['copy_gbs']:.0f} GB/s, cuBLAS fp16 "
          f"{peaks['fp16_tflops']:.0f} TFLOP/s, fp32 {peaks['fp32_tflops']:.1f} TFLOP/s (TF32 off)", flush=True)
    failed = False
    for name in args.models:
        for precision in args.precisions:
            try:
                lines = profile_model(name, precision, args.small, args.repeat, args.runs, peaks, sms, args.top,
                                      args.without)
                print("\n".join(lines), flush=True)
            except Exception:  # one model's failure must not hide the others' profiles
                failed = True
                print(f"--- {name} {precision} failed:")
                traceback.print_exc(limit=6, file=sys.stdout)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

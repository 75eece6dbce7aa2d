"""The Tensor Core products of ResNet-18 and BERT-base at batch 1 in fp16, measured per shape on a
GPU under the rules (`matmul.tensor_core_tiles`, `split_k.splits_for`) and under alternatives, next
to cuDNN / cuBLAS in the same run, so that the best can be written into
`ember.schedules.gpu.product_choices` (the lines to paste are printed last).

Each distinct layer (ResNet-18's convolutions with their bias and ReLU: implicit GEMMs, M the
output channels, N the positions, K the taps; BERT-base's linear layers at 128 tokens with their
bias) is compiled as a one-layer model for target "cuda" in fp16 once per configuration: the
parts of K (split-K) and the kernel's tiles forced through product_choices (the lowered-kernel
caches bypassed), checked against torch (rtol and atol 1e-2), then timed as the GPU's time alone
(cuda_timing.held: medians, the model's CUDA graph; split products count their sum's kernel too).
Configurations: the rules; 64x64 blocks of four 32x32 warps, or eight 32x16 ones, in 3 stages,
parts that fill the GPU once; 32x64 blocks of four 32x16 warps likewise; the rules' 32x32 blocks
in four 16x16 warps, 2 stages; the rules' tiles in parts that fill it
twice; 64-wide steps of k in 2 stages; 4 stages; and the rules with a convolution's columns
copied as before (not staged in registers across the products: ember.cuda.staged_copies); and
the rules with the epilogue through a float tile in shared memory (fragment_stores False: its
fragments stored to the tile, a barrier, the tile read back), beside the rules' default, which
computes it from each lane's fragments (ember.cuda.fragment_epilogue). A
convolution is timed in NCHW (conv2d_gemm, its columns gathered an element at a time) and
channels-last too (conv2d_nhwc_gemm on an NHWC input, as ember.passes.channels_last makes it: a
tap's channels copied 16 bytes at a time), under the rules and in 64x64 blocks of four warps,
next to cuDNN on channels_last tensors; the best of each layout is printed, and which the GPU
prefers (channels_last is the default of a model in fp16/bf16: where NCHW wins on the costliest
shapes, its default should change). Per
shape: us, TFLOP/s, % of torch's speed, the product kernel's registers and spills (ptxas's:
ember.cuda.nvrtc.resources); the best marked '*', and the product_choices entries
that would choose it (all of them again at the end; shapes in order of their share of the time,
so that a run cut short has measured the ones that matter). Last, a 4096^3 fp16 linear layer
(GEMMS, with --epilogues or --only gemm) under the rules in both epilogues beside cuBLAS (torch's
linear), and the verdict of the two epilogues over every shape timed in both: their summed times,
the shapes where each is WRONG, and which to make tensorcore_product's default.

    python benchmarks/product_configs.py [--runs 20] [--only conv|linear|gemm] [--shapes 3]
    python benchmarks/product_configs.py --dry [--only ...] [--shapes ...]   # no GPU: registers, spills
    python benchmarks/product_configs.py --epilogues [...]   # the rules in the two epilogues alone

Needs a GPU, torch with CUDA, cuda-bindings and NVRTC (benchmarks/gpu_checks.sh runs it as the
step `products`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

os.environ["EMBER_LOWERED_CACHE"] = "0"  # (a forced choice must reach the lowering: no kernel kept on disk)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# ResNet-18's convolutions at 224x224, (C, OC, H = W of the input, kernel, stride), the most time
# first (the last H200 profile's order: the deep 3x3 ones, then the strided ones, the stem, the 1x1s)
CONVS = ((256, 256, 14, 3, 1), (512, 512, 7, 3, 1), (128, 128, 28, 3, 1), (64, 64, 56, 3, 1), (128, 256, 28, 3, 2),
         (256, 512, 14, 3, 2), (64, 128, 56, 3, 2), (3, 64, 224, 7, 2), (64, 128, 56, 1, 2), (128, 256, 28, 1, 2),
         (256, 512, 14, 1, 2))
# BERT-base's linear layers at 128 tokens: (M, N, K): QKV, the attention's output, the MLP's up and down
LINEARS = ((128, 2304, 768), (128, 768, 768), (128, 3072, 768), (128, 768, 3072))
GEMMS = ((4096, 4096, 4096),)  # (M, N, K) of linear layers timed in the two epilogues alone, beside cuBLAS
SHARED = "shared-memory stores"  # a label's last words: the epilogue through a float tile (fragment_stores False)
PART = 256  # the shortest part of K an alternative splits into (split_k.MIN_PART)
UNSTAGED = {}  # (a configuration's tiles: the rules', computed copies not staged in registers, as before)
PRODUCTS = {"gemm", "gemm_partials", "conv2d_gemm", "conv2d_gemm_partials", "conv2d_nhwc_gemm",
            "conv2d_nhwc_gemm_partials"}  # the operators of a product kernel
NHWC = "NHWC"  # the label's first word of a channels-last convolution's configuration


def conv_graph(x, w, b, stride: int):
    """relu(conv2d(x, w, b)) in float16, padded to keep the size over the stride."""
    from ember.graph.core import Graph, TensorType
    from ember.ops.nodes import add_op

    g = Graph()
    pad = w.shape[-1] // 2
    (y,) = add_op(g, "conv2d", [g.add_input("x", TensorType(tuple(x.shape), "float16")), g.add_constant(w, "w"),
                                g.add_constant(b, "b")], {"padding": (pad,) * 4, "strides": (stride, stride)})
    (y,) = add_op(g, "relu", [y])
    g.set_outputs([y])
    return g


def nhwc_conv_graph(x_shape, w, b, stride: int):
    """relu(conv2d_nhwc_gemm(x, w, b)) in float16: x (N, C, H, W)'s values as (N, H, W, C), the
    weights as (OC, KH*KW*C), what ember.passes.channels_last makes of conv_graph's convolution."""
    from ember.graph.core import Graph, TensorType
    from ember.ops.conv_gemm import nhwc_weights
    from ember.ops.nodes import add_op

    g = Graph()
    n, c, h, wd = x_shape
    k = w.shape[-1]
    x = g.add_input("x", TensorType((n, h, wd, c), "float16"))
    (y,) = add_op(g, "conv2d_nhwc_gemm", [x, g.add_constant(nhwc_weights(w), "w"), g.add_constant(b, "b")],
                  {"kernel": (k, k), "padding": (k // 2,) * 4, "strides": (stride, stride)})
    (y,) = add_op(g, "relu", [y])
    g.set_outputs([y])
    return g


def linear_graph(M: int, w, b):
    """x w^T + b in float16, x (M, K)."""
    from ember.graph.core import Graph, TensorType
    from ember.ops.nodes import add_op

    g = Graph()
    (y,) = add_op(g, "gemm", [g.add_input("x", TensorType((M, w.shape[1]), "float16")), g.add_constant(w, "w"),
                              g.add_constant(b, "b")], {"trans_b": True})
    g.set_outputs([y])
    return g


def parts_to_fill(M: int, N: int, K: int, BM: int, BN: int, sms: int, waves: int = 1) -> int:
    """The fewest parts of K (each a whole number of 32-wide steps, at least PART) whose blocks
    of BM x BN fill the GPU `waves` times; the most such parts where none does."""
    blocks, best = -(-M // BM) * -(-N // BN), 1
    for s in range(1, K // PART + 1):
        if K % s == 0 and (K // s) % 32 == 0:
            best = s
            if blocks * s >= waves * sms:
                break
    return best


def configurations(M: int, N: int, K: int, sms: int, columns: bool = False, stores: bool = False) -> list[tuple]:
    """(label, parts, the kernel's tiles) to time; None: the rules'. `columns`: a convolution's
    (its columns computed as they are copied: the rules unstaged too); `stores`: the rules in
    the two epilogues alone."""
    from ember.schedules.gpu.matmul import tensor_core_tiles
    from ember.schedules.gpu.split_k import splits_for

    s = splits_for(1, M, N, K, sms)
    rules = tensor_core_tiles(s, M, N, K // s, "float16", sms)
    out = [("rules", None, None), (f"rules, {SHARED}", s, {**rules, "fragment_stores": False})]
    nhwc = [(f"{NHWC}, rules", None, None),  # (channels-last: M the positions, N the output channels)
            (f"{NHWC}, rules, {SHARED}", s, {**tensor_core_tiles(s, N, M, K // s, "float16", sms),
                                             "fragment_stores": False})] if columns else []
    if stores:
        return out + nhwc
    out += [("rules, columns unstaged", None, UNSTAGED)] if columns else []
    for label, tiles in (("64x64, 4 warps", {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "stages": 3}),
                         ("64x64, 8 warps", {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 16, "stages": 3}),
                         ("32x64, 4 warps", {"BM": 32, "BN": 64, "BK": 32, "WM": 32, "WN": 16, "stages": 3})):
        out.append((label, parts_to_fill(M, N, K, tiles["BM"], tiles["BN"], sms), tiles))
    if (rules["BM"], rules["BN"]) == (32, 32):  # (warps of 16 rows spilled 4 bytes in 3 stages on sm_90)
        out.append(("32x32, 4 warps, 2 stages", s, {**rules, "WM": 16, "WN": 16, "stages": 2}))
    twice = parts_to_fill(M, N, K, rules["BM"], rules["BN"], sms, waves=2)
    if twice != s:
        out.append(("rules' tiles, 2 waves", twice, {**rules, "stages": 3 if K // twice // 32 >= 6 else 2}))
    if (K // s) % 64 == 0:
        out.append(("BK 64, 2 stages", s, {**rules, "BK": 64, "stages": 2}))
    if K // s // rules["BK"] >= 8:
        out.append(("4 stages", s, {**rules, "stages": 4}))
    if columns:  # (their tiles keyed as the schedule sees them: tiles_key)
        out += [*nhwc, (f"{NHWC}, 64x64, 4 warps", parts_to_fill(N, M, K, 64, 64, sms),
                        {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "stages": 3})]
    return out


def tiles_key(label: str, splits: int, M: int, N: int, K: int) -> tuple:
    """product_choices.TILES' key of a configuration's kernel: (parts, M, N, K / parts) as the
    schedule sees the product, a channels-last convolution's M its positions (N here)."""
    return (splits, N, M, K // splits) if label.startswith(NHWC) else (splits, M, N, K // splits)


def compiled(g, M: int, N: int, K: int, splits: int | None, tiles: dict | None, target="cuda", label: str = ""):
    """g compiled in fp16 for `target` with its product in `splits` parts of `tiles`
    (product_choices' entries while it compiles; None: the rules; `label` says the layout)."""
    import ember
    from ember import lowering
    from ember.cuda import staged_copies
    from ember.schedules.gpu import product_choices

    if splits is not None:
        product_choices.SPLITS[M, N, K] = splits
    if tiles:
        product_choices.TILES[tiles_key(label, splits or 1, M, N, K)] = tiles
    lowering.LOWERED.clear()
    staged_copies.STAGED = tiles is not UNSTAGED
    try:
        layout = () if label.startswith(NHWC) else ("channels_last",)  # (NCHW's convolution stays NCHW)
        return ember.compile(g, target=target, precision="fp16", disabled_passes=layout)
    finally:
        product_choices.SPLITS.clear()
        product_choices.TILES.clear()
        staged_copies.STAGED = True


def product_kernel(cm, arch: str):
    """(name, nvrtc.Resources on `arch`, the one it was compiled for) of a compiled layer's product
    kernel (its partial sums where split), from its unit of the model's CUDA C."""
    from ember.cuda import nvrtc

    (name,) = [k.name for k in cm.kernels if set(k.ops) & PRODUCTS]
    return name, nvrtc.resources(product_unit(cm, name), arch)[name]


def product_unit(cm, name: str) -> str:
    """The CUDA C unit of kernel `name` in a compiled model's source."""
    header = "/* Generated by ember: "
    (unit,) = [u for u in cm.source.split(header) if u.startswith(f"{name}. */")]
    return header + unit


def _resources(cm):
    """product_kernel's Resources, or None where ptxas's report could not be read (the time stands)."""
    from ember.target import Target

    try:
        return product_kernel(cm, Target("cuda").gpu.arch)[1]
    except Exception as e:  # (a diagnostic: its failure must not discard a measured time)
        print(f"  (no ptxas report: {type(e).__name__}: {e})")
        return None


def layer(kind: str, shape: tuple, x, w, b, label: str = ""):
    """(the one-layer graph, M, N, K) of a convolution (C, OC, H, kernel, stride), channels-last
    where `label` says so, or a linear layer (M, N, K), its input x and weights w and b as NumPy
    arrays; M, N, K as split_k sees them (a convolution's M its output channels)."""
    if kind == "conv":
        C, OC, H, k, stride = shape
        OH = (H + 2 * (k // 2) - k) // stride + 1
        g = nhwc_conv_graph(x.shape, w, b, stride) if label.startswith(NHWC) else conv_graph(x, w, b, stride)
        return g, OC, OH * OH, C * k * k
    return linear_graph(shape[0], w, b), *shape  # (a linear layer's or a GEMM's)


def dry_run(shapes: list[tuple[str, tuple]], sms: int, epilogues: bool = False) -> None:
    """Each configuration compiled for the simulated GPU (NVRTC, sm_90; no GPU needed): its
    product kernel's registers, shared memory and spills."""
    import numpy as np

    from ember.target import Target

    rng = np.random.default_rng(0)
    for kind, shape in shapes:
        if kind == "conv":
            C, OC, H, k, _ = shape
            x, w = np.zeros((1, C, H, H), "float16"), rng.standard_normal((OC, C, k, k)).astype("float16")
        else:
            x, w = None, rng.standard_normal(shape[1:]).astype("float16")
        b = rng.standard_normal(w.shape[0]).astype("float16")
        _, M, N, K = layer(kind, shape, x, w, b)
        print(f"\n{kind} {shape}: M x N x K = {M}x{N}x{K}")
        for label, splits, tiles in configurations(M, N, K, sms, columns=kind == "conv",
                                                   stores=epilogues or kind == "gemm"):
            try:
                g = layer(kind, shape, x, w, b, label)[0]
                target = Target("cuda", simulate=True)
                cm = compiled(g, M, N, K, splits, tiles, target, label)
                name, used = product_kernel(cm, target.gpu.arch)
                unit = product_unit(cm, name)
                print(f"  {label:36} {name:26} {used.registers:4d} registers {used.shared / 1024:5.1f} KiB "
                      f"{used.spill_stores + used.spill_loads:4d} bytes spilled {unit.count('__syncthreads()'):2d} "
                      f"barriers {sum(unit.count(f'reinterpret_cast<{t}*>') for t in ('__half2', 'float2')):3d} "
                      f"pair stores")
            except Exception:
                print(f"--- {kind} {shape}, {label} ({splits} parts, {tiles}) failed:")
                traceback.print_exc(limit=4, file=sys.stdout)


def measure(kind: str, shape: tuple, runs: int, sms: int, epilogues: bool = False) -> tuple[tuple, list[tuple]]:
    """(M, N, K), and (label, parts, tiles, seconds or None) per configuration of one layer, torch's
    first as "torch"."""
    import torch
    from cuda_timing import held

    if kind == "conv":
        C, OC, H, k, stride = shape
        x = torch.randn(1, C, H, H, device="cuda", dtype=torch.float16)
        w = (torch.randn(OC, C, k, k, device="cuda") / (C * k * k) ** 0.5).half()
        b = torch.randn(OC, device="cuda", dtype=torch.float16)

        def peer(x=x, w=w):
            return torch.relu(torch.nn.functional.conv2d(x, w, b, stride=stride, padding=k // 2))

        x_last, w_last = (t.to(memory_format=torch.channels_last) for t in (x, w))  # (cuDNN's NHWC kernels)
    else:
        M, N, K = shape
        x = torch.randn(M, K, device="cuda", dtype=torch.float16)
        w = (torch.randn(N, K, device="cuda") / K ** 0.5).half()
        b = torch.randn(N, device="cuda", dtype=torch.float16)

        def peer():
            return torch.nn.functional.linear(x, w, b)

    _, M, N, K = layer(kind, shape, x, w.cpu().numpy(), b.cpu().numpy())
    expected = peer()
    rows = [("torch", None, None, held(peer, runs), None)]
    if kind == "conv":
        rows.append((f"{NHWC}, torch", None, None, held(lambda: peer(x_last, w_last), runs), None))
    stores = epilogues or kind == "gemm"
    for label, splits, tiles in configurations(M, N, K, sms, columns=kind == "conv", stores=stores):
        try:
            nhwc = label.startswith(NHWC)
            g = layer(kind, shape, x, w.cpu().numpy(), b.cpu().numpy(), label)[0]
            cm = compiled(g, M, N, K, splits, tiles, label=label)
            arg = x.permute(0, 2, 3, 1).contiguous() if nhwc else x  # (right or WRONG first)
            torch.testing.assert_close(cm(arg), expected.permute(0, 2, 3, 1) if nhwc else expected, rtol=1e-2,
                                       atol=1e-2)
            rows.append((label, splits, tiles, held(lambda cm=cm, arg=arg: cm(arg), runs), _resources(cm)))
        except Exception as e:  # one configuration's failure must not hide the others'
            what = "WRONG (against torch)" if isinstance(e, AssertionError) else "failed"
            print(f"--- {kind} {shape}, {label} ({splits} parts, {tiles}) {what}:")
            traceback.print_exc(limit=4, file=sys.stdout)
            rows.append((label, splits, tiles, None, None))
    return (M, N, K), rows


def report(kind: str, shape: tuple, mnk: tuple, rows: list[tuple], best_lines: list[str]) -> None:
    M, N, K = mnk
    flop = 2 * M * N * K
    torch_t = rows[0][3]
    timed = [r for r in rows[1:] if r[3] is not None and not r[0].endswith("torch")]
    best = min(timed, key=lambda r: r[3]) if timed else None
    print(f"\n{kind} {shape}: M x N x K = {M}x{N}x{K}")
    for label, splits, tiles, t, used in rows:
        if t is None:
            print(f"  {label:24} failed")
            continue
        mark = "*" if best is not None and label == best[0] else " "
        what = "" if not tiles else f"{splits} parts, {tiles}"
        regs = "" if used is None else f"{used.registers:3d} regs {used.spill_stores + used.spill_loads:2d} B spilled"
        print(f"{mark} {label:24} {t * 1e6:8.1f} us {flop / t / 1e12:7.2f} TFLOP/s {100 * torch_t / t:6.0f}% of torch "
              f"{regs:20} {what}")
    if kind == "conv":  # which layout the GPU prefers, each at its best
        layouts = {name: min((r[3] for r in timed if r[0].startswith(NHWC) == (name == NHWC)), default=None)
                   for name in ("NCHW", NHWC)}
        if None not in layouts.values():
            print(f"  NHWC / NCHW, each at its best: {layouts[NHWC] / layouts['NCHW']:.2f}")
    lines = []
    if best is not None and best[2] is UNSTAGED:
        lines.append(f"# {kind} {shape}: faster with its columns unstaged (ember.cuda.staged_copies)")
    elif best is not None and best[0] not in ("rules", f"{NHWC}, rules"):
        label, splits, tiles, _, _ = best
        layout = ", channels last" if label.startswith(NHWC) else ""
        lines = [f"SPLITS[{(M, N, K)}] = {splits}  # {kind} {shape}{layout}",
                 f"TILES[{tiles_key(label, splits, M, N, K)}] = {tiles}"]
    print("  " + "\n  ".join(lines) if lines else "  (the rules' choice is the best)", flush=True)
    best_lines += lines


def epilogues(kind: str, shape: tuple, rows: list[tuple]) -> list[tuple[str, float | None, float | None]]:
    """(what, seconds from the fragments, seconds through shared memory) of each layout of a shape
    timed in both epilogues (None: WRONG or failed); the pair's ratio printed."""
    times = {r[0]: r[3] for r in rows}
    out = []
    for rules in ("rules", f"{NHWC}, rules"):
        if f"{rules}, {SHARED}" not in times:
            continue
        fragments, shared = times.get(rules), times[f"{rules}, {SHARED}"]
        what = f"{kind} {shape}{', channels last' if rules.startswith(NHWC) else ''}"
        out.append((what, fragments, shared))
        if fragments is not None and shared is not None:
            print(f"  {rules}: stores from the fragments {fragments * 1e6:.1f} us, through shared memory "
                  f"{shared * 1e6:.1f} us: {shared / fragments:.2f}x")
    return out


def epilogue_verdict(pairs: list[tuple[str, float | None, float | None]]) -> None:
    """Which epilogue tensorcore_product should take by default, over every shape timed in both."""
    wrong = {name: [w for w, *ts in pairs if ts[k] is None] for k, name in enumerate(("fragments", "shared"))}
    both = [(f, s) for _, f, s in pairs if f is not None and s is not None]
    print(f"\nepilogues, over {len(both)} shapes timed in both:")
    for name, shapes in wrong.items():
        if shapes:
            print(f"  WRONG or failed from the {name}: {'; '.join(shapes)}")
    if both:
        frag, shared = sum(f for f, _ in both), sum(s for _, s in both)
        print(f"  summed: stores from the fragments {frag * 1e6:.1f} us, through shared memory {shared * 1e6:.1f} us "
              f"({shared / frag:.2f}x); faster from the fragments on {sum(f < s for f, s in both)} of {len(both)}")
    if wrong["fragments"] and not wrong["shared"]:
        print("  default: shared-memory stores (tensorcore_product's fragment_stores=False): the fragments' are WRONG")
    elif both:
        keep = frag <= shared
        print(f"  default: {'fragment stores, as now' if keep else 'shared-memory stores'} "
              f"(tensorcore_product's fragment_stores={keep}; per shape, the product_choices lines above)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--only", choices=("conv", "linear", "gemm"))
    parser.add_argument("--shapes", type=int, default=None, help="the first SHAPES of each kind")
    parser.add_argument("--dry", action="store_true", help="no GPU: each configuration's registers and spills")
    parser.add_argument("--epilogues", action="store_true",
                        help="the rules in the two epilogues alone (from the fragments, through shared memory)")
    args = parser.parse_args()
    shapes = [(kind, shape) for kind, group in (("linear", LINEARS), ("conv", CONVS)) if args.only in (None, kind)
              for shape in group[:args.shapes]]
    if args.only == "gemm" or args.only is None and args.epilogues:
        shapes += [("gemm", shape) for shape in GEMMS]
    if args.dry:
        from ember.schedules.gpu.matmul import SMS

        dry_run(shapes, SMS, args.epilogues)
        return 0
    import torch

    if not torch.cuda.is_available():
        print("no GPU: torch.cuda.is_available() is False")
        return 1
    from ember.target import Target

    t0 = time.perf_counter()
    sms = Target("cuda").gpu.multiprocessors
    print(f"{torch.cuda.get_device_name()}, {sms} multiprocessors, torch {torch.__version__}; fp16, batch 1")
    best_lines: list[str] = []
    pairs = []
    for kind, shape in shapes:
        mnk, rows = measure(kind, shape, args.runs, sms, args.epilogues)
        report(kind, shape, mnk, rows, best_lines)
        pairs += epilogues(kind, shape, rows)
    print("\nproduct_choices entries of the shapes whose best is not the rules':")
    print("\n".join(best_lines) if best_lines else "(none: the rules were best everywhere)")
    epilogue_verdict(pairs)
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Split-K's thresholds, measured on a GPU: float32 linear layers (gemm of weights read in place,
and a bias) of a few shapes, and fp16 convolutions with their bias and ReLU (ResNet-18's 3x3 ones
at each resolution, MobileNetV2's 1x1 projections: implicit GEMMs on Tensor Cores), each compiled
as a one-layer model for target "cuda" in one pass and split over K into 2, 4 and 8 parts (3, 6
and 12 too for the convolutions; ember.passes.split_k forced to that count: partial sums, then
their sum with the epilogue), each checked against torch, then timed with CUDA events around the
GPU's work alone (cuda_timing.held: medians, the stream held while the host issues the call; the
models' calls replay CUDA graphs), next to cuBLAS (TF32 off) and cuDNN (torch's conv2d and relu).
Per shape: the one pass's blocks against the GPU's multiprocessors, each count's time and
speed-up over the one pass, and the count `splits_for` chooses now (MIN_PART, matmul.SMALL and
the target's SM count), marked '*', so that the thresholds can be set from the numbers; the last
lines say where the measured best and the current choice differ.

    python benchmarks/split_k_sweep.py [--runs 30] [--splits 1 2 4 8] [--no-convs]

Needs a GPU, torch with CUDA, cuda-bindings and NVRTC (benchmarks/gpu_checks.sh runs it as the
step `splitk`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# (M, N, K): BERT-base's layers at 16 to 256 tokens, and wider ones of a long K
SHAPES = ((16, 768, 768), (16, 768, 3072), (64, 768, 768), (64, 768, 3072), (128, 768, 768), (128, 768, 3072),
          (128, 3072, 768), (256, 768, 768), (32, 4096, 4096), (128, 1024, 4096))
# (C, OC, H = W, kernel): ResNet-18's 3x3 convolutions at 56, 28, 14 and 7, MobileNetV2's 1x1 projections
CONVS = ((64, 64, 56, 3), (128, 128, 28, 3), (256, 256, 14, 3), (512, 512, 7, 3), (576, 160, 7, 1), (960, 160, 7, 1))
CONV_SPLITS = (1, 2, 3, 4, 6, 8, 12)
BK = 16  # cuda_core_product's panels of K: a part a whole number of them


def layer(M: int, N: int, K: int, w, b):
    """A graph of one linear layer y = x w^T + b, x (M, K) its input."""
    from ember.graph.core import Graph, TensorType
    from ember.ops.nodes import add_op

    g = Graph()
    (y,) = add_op(g, "gemm", [g.add_input("x", TensorType((M, K))), g.add_constant(w, "w"), g.add_constant(b, "b")],
                  {"trans_b": True})
    g.set_outputs([y])
    return g


def compiled(g, splits: int, target="cuda"):
    """The layer compiled with its K split into `splits` parts (1: one pass): the pass split_k
    asked for that count by a backend of its own, then compiled without the pass."""
    import ember
    from ember.passes.split_k import split_k

    if splits > 1:
        g = split_k(g, SimpleNamespace(backend=SimpleNamespace(k_splits=lambda m, n, k, target: splits)))
    return ember.compile(g, target=target, disabled_passes=("split_k",))


def conv_layer(x, w, b, padding: int):
    """A graph of relu(conv2d(x, w, b)) in float16, x (1, C, H, W) its input."""
    from ember.graph.core import Graph, TensorType
    from ember.ops.nodes import add_op

    g = Graph()
    (y,) = add_op(g, "conv2d", [g.add_input("x", TensorType(tuple(x.shape), "float16")),
                                g.add_constant(w, "w"), g.add_constant(b, "b")], {"padding": (padding,) * 4})
    (y,) = add_op(g, "relu", [y])
    g.set_outputs([y])
    return g


def compiled_conv(g, splits: int):
    """The convolution compiled in fp16 (an implicit GEMM) with its taps split into `splits`
    parts: the CUDA backend's k_splits answering that count while it compiles."""
    import ember
    from ember.backends import get

    backend = get("cuda")
    backend.k_splits = lambda m, n, k, target: splits
    try:
        # NCHW's implicit GEMM (a one-layer NCHW graph made channels-last would time its transposes too;
        # product_configs times the channels-last layers, their parts included)
        return ember.compile(g, target="cuda", precision="fp16", disabled_passes=("channels_last",))
    finally:
        del backend.k_splits


@contextlib.contextmanager
def k_step(bk: int):
    """Tensor Core products compiled meanwhile in `bk`-wide steps of k (tensor_core_tiles' BK;
    32 by default): half as many steps of the serial K loop at 64."""
    from ember.schedules.gpu import matmul

    original = matmul.tensor_core_tiles
    matmul.tensor_core_tiles = lambda *args, **kwargs: {**original(*args, **kwargs), "BK": bk}
    try:
        yield
    finally:
        matmul.tensor_core_tiles = original


def conv_sweep(runs: int) -> tuple[list[tuple], list[tuple]]:
    """As `sweep`, for CONVS in fp16 (M: the output channels, N: the positions, K: the taps), each
    count of CONV_SPLITS that makes whole panels; cuDNN's as splits 0. Then, where the block tiles
    are 32 wide (64-wide steps of larger ones pass 48 KiB of shared memory), in one pass and in
    `splits_for`'s parts: (the shape, parts, seconds in 32-wide steps of k, in 64-wide ones)."""
    import torch
    from cuda_timing import held

    from ember.schedules.gpu.matmul import tensor_core_tiles
    from ember.schedules.gpu.split_k import splits_for
    from ember.target import Target

    sms = Target("cuda").gpu.multiprocessors
    rows, steps = [], []
    for C, OC, H, k in CONVS:
        M, N, K = OC, H * H, C * k * k
        tiles = tensor_core_tiles(1, M, N, K, "float16", sms)
        blocks = -(-M // tiles["BM"]) * -(-N // tiles["BN"])
        chosen = splits_for(1, M, N, K, sms)
        x = torch.randn(1, C, H, H, device="cuda", dtype=torch.float16)
        w = (torch.randn(OC, C, k, k, device="cuda") / K ** 0.5).half()
        b = torch.randn(OC, device="cuda", dtype=torch.float16)
        expected = torch.relu(torch.nn.functional.conv2d(x, w, b, padding=k // 2))
        g = conv_layer(x, w.cpu().numpy(), b.cpu().numpy(), k // 2)
        for splits in CONV_SPLITS:
            if K % splits or (K // splits) % BK:
                continue
            try:
                cm = compiled_conv(g, splits)
                torch.testing.assert_close(cm(x), expected, rtol=1e-2, atol=1e-2)
                rows.append((M, N, K, blocks, splits, held(lambda cm=cm, x=x: cm(x), runs), chosen))
            except Exception:  # one count's failure must not hide the others'
                print(f"--- conv {C}->{OC} at {H}x{H}, {k}x{k}, in {splits} parts failed:")
                traceback.print_exc(limit=6, file=sys.stdout)
        t = held(lambda xs=(x, w, b), p=k // 2: torch.relu(torch.nn.functional.conv2d(*xs, padding=p)), runs)
        rows.append((M, N, K, blocks, 0, t, chosen))
        if max(tiles["BM"], tiles["BN"]) > 32:
            continue
        for splits in sorted({1, chosen}):
            at32 = next((r[5] for r in rows if r[:3] == (M, N, K) and r[4] == splits), None)
            try:
                with k_step(64):
                    cm = compiled_conv(g, splits)
                torch.testing.assert_close(cm(x), expected, rtol=1e-2, atol=1e-2)
                steps.append((f"{M}x{N}x{K}", splits, at32, held(lambda cm=cm, x=x: cm(x), runs)))
            except Exception:
                print(f"--- conv {C}->{OC} at {H}x{H}, {k}x{k}, in {splits} parts, 64-wide steps of k failed:")
                traceback.print_exc(limit=6, file=sys.stdout)
    return rows, steps


def sweep(runs: int, counts: list[int]) -> list[tuple]:
    """(M, N, K, the one pass's blocks, splits, seconds, chosen now) per shape and count, and
    cuBLAS's as splits 0."""
    import torch
    from cuda_timing import held

    from ember.schedules.gpu.matmul import cuda_core_tiles
    from ember.schedules.gpu.split_k import splits_for
    from ember.target import Target

    sms = Target("cuda").gpu.multiprocessors
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for M, N, K in SHAPES:
        tiles = cuda_core_tiles(1, M, N, sms)
        blocks = -(-M // tiles["BM"]) * -(-N // tiles["BN"])
        chosen = splits_for(1, M, N, K, sms)
        x, w, b = (torch.randn(shape, device="cuda") / shape[-1] ** 0.25 for shape in ((M, K), (N, K), (N,)))
        expected = torch.nn.functional.linear(x, w, b)
        g = layer(M, N, K, w.cpu().numpy(), b.cpu().numpy())
        for splits in counts:
            if K % splits or (K // splits) % BK:
                continue
            try:
                cm = compiled(g, splits)
                torch.testing.assert_close(cm(x), expected, rtol=1e-4, atol=1e-4)
                rows.append((M, N, K, blocks, splits, held(lambda cm=cm, x=x: cm(x), runs), chosen))
            except Exception:  # one count's failure must not hide the others'
                print(f"--- {M}x{N}x{K} in {splits} parts failed:")
                traceback.print_exc(limit=6, file=sys.stdout)
        t = held(lambda xs=(x, w, b): torch.nn.functional.linear(*xs), runs)
        rows.append((M, N, K, blocks, 0, t, chosen))
    return rows


def report(rows: list[tuple], sms: int, peer: str = "cuBLAS") -> None:
    print(f"\n{'M x N x K':18} {'blocks':>6} {'parts':>6} {'median us':>10} {'vs one pass':>12} {'TFLOP/s':>8}")
    best_of, mismatches = {}, []
    for M, N, K, blocks, splits, t, chosen in rows:
        one = next((r[5] for r in rows if r[:3] == (M, N, K) and r[4] == 1), None)
        label = peer if splits == 0 else f"{splits}{'*' if splits == chosen else ''}"
        speedup = f"{one / t:.2f}x" if one else ""
        tflops = 2 * M * N * K / t / 1e12
        print(f"{f'{M}x{N}x{K}':18} {blocks:6d} {label:>6} {t * 1e6:10.1f} {speedup:>12} {tflops:8.2f}")
        if splits and ((M, N, K) not in best_of or t < best_of[M, N, K][1]):
            best_of[M, N, K] = (splits, t, chosen, blocks)
    for (M, N, K), (best, t, chosen, blocks) in best_of.items():
        if best != chosen:
            at = next((r[5] for r in rows if r[:3] == (M, N, K) and r[4] == chosen), None)
            loss = f", {at / t:.2f}x the best's time" if at else ""
            mismatches.append(f"{M}x{N}x{K} ({blocks} blocks): best in {best} parts, splits_for chooses {chosen}{loss}")
    print(f"\n'*': splits_for's choice for {sms} multiprocessors; blocks: the one pass's grid")
    print("\n".join(mismatches) if mismatches else "splits_for chose the best count for every shape")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--splits", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--no-convs", dest="convs", action="store_false", help="the float32 linear layers only")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no GPU: torch.cuda.is_available() is False")
        return 1
    from ember.target import Target

    t0 = time.perf_counter()
    sms = Target("cuda").gpu.multiprocessors
    print(f"{torch.cuda.get_device_name()}, {sms} multiprocessors, torch {torch.__version__}")
    rows = sweep(args.runs, sorted(set(args.splits) | {1}))
    report(rows, sms)
    if args.convs:
        print("\nfp16 convolutions (+ bias, ReLU), implicit GEMMs: M the output channels, N the positions, K the taps")
        rows, steps = conv_sweep(args.runs)
        report(rows, sms, peer="cuDNN")
        print(f"\n{'M x N x K':18} {'parts':>6} {'BK 32 us':>9} {'BK 64 us':>9}")
        for shape, splits, at32, at64 in steps:
            print(f"{shape:18} {splits:6d} {'-' if at32 is None else f'{at32 * 1e6:.1f}':>9} {at64 * 1e6:9.1f}")
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""ember's first CUDA kernels next to their peers on one GPU, in one run: an elementwise chain (4
lanes a thread, 16-byte accesses), a row softmax (a row per block, its reductions through warp
shuffles, with and without 16-byte output accesses, with and without the row staged in shared
memory (read from global memory once); and a row per thread; its row's 1/sum and the
layer norm's 1/sqrt(var + eps) computed once per row) and a layer norm over
4096x4096 fp32 against device copy bandwidth (torch's `clone`, bytes read + written; the copy and
the elementwise chain also at 4x the rows, past the L2), and an fp32 GEMM 4096^3 with the
shared-memory tiled schedules of ember.cuda.schedules (block tiles, register tiles per thread,
K panels; `matmul` lays the tiles out for conflict-free shared reads, `gemm` keeps A's and B's,
"x4": 16-byte copies to shared memory and of B's tile into registers)
against cuBLAS fp32 (`torch.matmul`, TF32 off), and fp16 and bf16 GEMMs 4096^3 on Tensor Cores
(`ember.cuda.tensorcore.tensorcore_gemm`: accumulators held in registers across the K loop, each fragment of
A and B loaded once per k step, the K loop pipelined with cp.async; fp32 accumulators and output;
mma.sync and ldmatrix on swizzled tiles in several block tiles, warp tiles, stages and L2 groups,
its products at rows of 128, 256 and 512 bytes checked against torch first, and wmma on padded
rows; the best of each type and intrinsic printed) against cuBLAS on the same inputs (its
output in the inputs' type) and Triton's tutorial matmul where Triton is installed; and
operators (softmax, layer norm, a reduction of rows and of a whole tensor to one value (one
block: 2^20 and 2^24 elements), gelu, ResNet's global average pool at batch 1 in fp16, fp32 and
fp16 matmul) as the CUDA target schedules them by default (ember.schedules.gpu), and cumsum (`scans`:
4096 rows of 4096, GPT-2's position ids over 1024 tokens, 4 rows of 2^20) with 1, 2, 4 and 8
consecutive elements a thread, the best printed,
against torch; and a model's products in fp16 (a batch-1 linear layer of 128 tokens and of one,
a batched matmul, ResNet's 3x3 convolutions as implicit GEMMs) against torch's cuBLAS and cuDNN,
and in fp32 on CUDA cores (BERT-base's linear layers at 128 tokens, a batched matmul; TF32 off on
both sides), those of 128 rows also in other tiles than the default's (`fp32_tiles`) and built for
a symbolic number of tokens (`symbolic`: one kernel, its grid per launch, run at 128 and 384 tokens
next to the static kernel of that size and cuBLAS) and split over K where their grid leaves
multiprocessors idle (`split_k`: a model of one layer compiled with and without the pass
split_k: partial sums, then their sum with the bias); and, only when asked for (`--parts
attention`, the step `attention` of benchmarks/gpu_checks.sh), flash attention on Tensor Cores in
fp16 and bf16 (BERT-base's, 8x16x2048x64, causal 4x16x1024x64; static, over symbolic tokens, and
in other tiles of keys) against torch's scaled_dot_product_attention. Every kernel is
checked against torch before it is timed; times are medians of CUDA-event intervals. A part
that fails prints its error and the others still run.

    python benchmarks/cuda_kernels.py [--size 4096] [--runs 30] [--parts gemm tensorcore_gemm ...]
    python benchmarks/cuda_kernels.py --tune 64   # a tuning run of the fp32 GEMM: the curve, best vs default

Needs a GPU, torch with CUDA, cuda-bindings and NVRTC; runs in well under 3 minutes on an H100.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.cuda_operators import (  # noqa: E402
    attention,
    defaults,
    fp32_tiles,
    products,
    row_kernels,
    scans,
    split_k,
    symbolic,
)
from benchmarks.cuda_schedules import copy, elementwise, gemm, layer_norm, softmax, tensorcore_gemm  # noqa: E402
from benchmarks.cuda_tuning import tuning  # noqa: E402

PARTS = {"copy": copy, "elementwise": elementwise, "softmax": softmax, "layer_norm": layer_norm, "gemm": gemm,
         "tensorcore_gemm": tensorcore_gemm, "defaults": defaults, "products": products, "fp32_tiles": fp32_tiles,
         "symbolic": symbolic, "split_k": split_k, "attention": attention, "rows": row_kernels, "scans": scans}
DEFAULT_PARTS = [p for p in PARTS if p not in ("attention", "rows")]  # (each its own step of benchmarks/gpu_checks.sh)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--parts", nargs="+", choices=list(PARTS), default=DEFAULT_PARTS)
    parser.add_argument("--tune", type=int, metavar="TRIALS", default=0,
                        help="only tune the fp32 GEMM --size^3 on the GPU for TRIALS candidates: the curve, "
                             "and the best against the default schedule and cuBLAS")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no GPU: torch.cuda.is_available() is False")
        return 1
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    if args.tune:
        tuning(args.size, args.tune, args.runs)
        return 0
    rows: list = []
    failed = False
    for part in (PARTS[p] for p in args.parts):
        try:
            part(args.size, args.runs, rows)
        except Exception:  # one part's failure must not hide the others' numbers
            failed = True
            print(f"--- {part.__name__} failed:")
            traceback.print_exc(limit=6, file=sys.stdout)
    copies = {r[0].split()[-1]: r[3] for r in rows if r[0].startswith("device copy")}  # by shape
    print(f"\n{'kernel':26} {'implementation':36} {'median ms':>10} {'GB/s or TFLOP/s':>16} {'vs peer':>8} "
          f"{'build s':>8}")
    for name, impl, t, rate, build_s in rows:
        peer = next((r for r in rows if r[0] == name and r[1] != impl and r[4] is None), None)
        copy_bw = copies.get(name.split()[-1])
        if not name.startswith("device copy") and "GEMM" not in name and copy_bw:
            ratio = f"{rate / copy_bw:.0%}cp"
        elif peer is not None and build_s is not None:
            ratio = f"{rate / peer[3]:.0%}"
        else:
            ratio = ""
        print(f"{name:26} {impl:36} {t * 1e3:10.3f} {rate:16.1f} {ratio:>8} "
              f"{'' if build_s is None else f'{build_s:.2f}':>8}")
    print("\nGB/s: bytes read + written per second; 'cp': of the device copy bandwidth at the same shape; "
          "GEMM: of cuBLAS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

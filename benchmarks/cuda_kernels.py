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
(`schedules.tensorcore_gemm`: wmma fragments held across the K loop, each fragment of A and B
loaded once per k step, shared rows padded, the K loop pipelined with cp.async; fp32
accumulators and output; with and without the padding and the pipelining) against cuBLAS on the
same inputs (its output in the inputs' type); and operators (softmax, layer norm, a reduction,
gelu, fp32 and fp16 matmul) as the CUDA target schedules them by default (ember.schedules.gpu),
against torch; and a model's products in fp16 (a batch-1 linear layer of 128 tokens and of one,
a batched matmul, ResNet's 3x3 convolutions as implicit GEMMs) against torch's cuBLAS and cuDNN,
and in fp32 on CUDA cores (BERT-base's linear layers at 128 tokens, a batched matmul; TF32 off on
both sides), those of 128 rows also in other tiles than the default's (`fp32_tiles`) and built for
a symbolic number of tokens (`symbolic`: one kernel, its grid per launch, run at 128 and 384 tokens
next to the static kernel of that size and cuBLAS) and split over K where their grid leaves
multiprocessors idle (`split_k`: a model of one layer compiled with and without the pass
split_k: partial sums, then their sum with the bias). Every kernel is
checked against torch before it is timed; times are medians of CUDA-event intervals. A part
that fails prints its error and the others still run.

    python benchmarks/cuda_kernels.py [--size 4096] [--runs 30] [--parts gemm tensorcore_gemm ...]
    python benchmarks/cuda_kernels.py --tune 64   # a tuning run of the fp32 GEMM: the curve, best vs default

Needs a GPU, torch with CUDA, cuda-bindings and NVRTC; runs in well under 3 minutes on an H100.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def timed(fn, runs: int) -> float:
    """Median seconds of fn() between CUDA events, after warm-up calls for at least 50 ms (with 3
    warm-up calls, two runs on H200s measured one elementwise kernel at 0.086 and 0.128 ms: a
    freshly started GPU may not be at its clocks yet)."""
    import torch

    start = time.perf_counter()
    while time.perf_counter() - start < 0.05:
        fn()
        torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def build(make):
    """An ember CUDA kernel of a schedule, and the seconds it took to lower and compile."""
    import ember

    t0 = time.perf_counter()
    s, args = make()
    f = ember.build(s, args, target="cuda")
    return f, time.perf_counter() - t0


def elementwise(n: int, runs: int, rows: list) -> None:
    import torch

    from ember import te
    from ember.cuda import schedules

    for m in (n, 4 * n):
        def make(m=m):
            A, B = te.placeholder((m, n), name="A"), te.placeholder((m, n), name="B")
            C = te.compute((m, n), lambda i, j: te.exp(A[i, j]) * B[i, j] + A[i, j], name="C")
            s = te.create_schedule(C.op)
            schedules.elementwise(s, C, 256)
            return s, [A, B, C]

        f, build_s = build(make)
        a, b, c = (torch.randn(m, n, device="cuda") for _ in range(3))
        f(a, b, c)
        torch.testing.assert_close(c, a.exp() * b + a, rtol=1e-5, atol=1e-5)
        gb = 3 * a.numel() * 4 / 1e9
        name = f"elementwise {m}x{n}"
        t = timed(lambda f=f, a=a, b=b, c=c: f(a, b, c), runs)
        rows.append((name, "ember (4 lanes a thread)", t, gb / t, build_s))
        t = timed(lambda a=a, b=b, c=c: torch.add(torch.mul(torch.exp(a), b), a, out=c), runs)
        rows.append((name, "torch eager (3 kernels)", t, gb / t, None))
        del a, b, c


def softmax(n: int, runs: int, rows: list) -> None:
    import torch

    from ember.cuda import schedules, workloads

    def make(threads: int, vector: int, staged: bool):
        w = workloads.row_softmax(n, n)
        if threads:
            schedules.row_block(w.s, w.out, [w.mx, w.total, w.inv], threads, vector, staged=w.A if staged else None)
        else:
            w.s[w.inv].compute_inline()
            schedules.rows(w.s, w.out, [w.total, w.mx], 64)
        return w.s, w.args

    a, out = torch.randn(n, n, device="cuda"), torch.empty(n, n, device="cuda")
    gb = 2 * a.numel() * 4 / 1e9
    name = f"row softmax {n}x{n}"
    for threads, vector, staged in SOFTMAX:
        impl = f"ember row/block {threads}t x{vector}{' staged' if staged else ''}" if threads \
            else "ember (a row per thread)"
        try:
            f, build_s = build(lambda threads=threads, vector=vector, staged=staged: make(threads, vector, staged))
            out.zero_()
            f(a, out)
            torch.testing.assert_close(out, torch.softmax(a, 1), rtol=1e-5, atol=1e-6)
            t = timed(lambda f=f: f(a, out), runs)
            rows.append((name, impl, t, gb / t, build_s))
        except Exception:  # one schedule's failure must not hide the others'
            print(f"--- softmax, {impl}, failed:")
            traceback.print_exc(limit=6, file=sys.stdout)
    t = timed(lambda: torch.softmax(a, 1), runs)
    rows.append((name, "torch.softmax", t, gb / t, None))


def layer_norm(n: int, runs: int, rows: list) -> None:
    import torch

    from ember.cuda import schedules, workloads

    eps = 1e-5

    def make(threads: int, vector: int, staged: bool):
        w = workloads.layer_norm(n, n, eps)
        schedules.row_block(w.s, w.out, [w.mean, w.var, w.rstd], threads, vector, staged=w.A if staged else None)
        return w.s, w.args

    a, out = torch.randn(n, n, device="cuda") * 3 + 1, torch.empty(n, n, device="cuda")
    g, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    expected = torch.nn.functional.layer_norm(a, (n,), g, b, eps)
    gb = 2 * a.numel() * 4 / 1e9
    name = f"layer norm {n}x{n}"
    for threads, vector, staged in LAYER_NORM:
        impl = f"ember row/block {threads}t x{vector}{' staged' if staged else ''}"
        try:
            f, build_s = build(lambda threads=threads, vector=vector, staged=staged: make(threads, vector, staged))
            out.zero_()
            f(a, g, b, out)
            torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
            t = timed(lambda f=f: f(a, g, b, out), runs)
            rows.append((name, impl, t, gb / t, build_s))
        except Exception:  # one schedule's failure must not hide the others'
            print(f"--- layer norm, {impl}, failed:")
            traceback.print_exc(limit=6, file=sys.stdout)
    t = timed(lambda: torch.nn.functional.layer_norm(a, (n,), g, b, eps), runs)
    rows.append((name, "torch layer_norm", t, gb / t, None))


def copy(n: int, runs: int, rows: list) -> None:
    import torch

    for m in (n, 4 * n):
        a = torch.randn(m, n, device="cuda")
        t = timed(lambda a=a: a.clone(), runs)
        rows.append((f"device copy {m}x{n}", "torch clone", t, 2 * a.numel() * 4 / 1e9 / t, None))
        del a


# row softmax and layer norm: (threads a block, lanes a thread, the row staged in shared memory);
# 0 threads: a row per thread
SOFTMAX = ((256, 1, False), (256, 4, False), (512, 4, False), (256, 4, True), (512, 4, True), (1024, 4, True),
           (0, 1, False))
LAYER_NORM = ((256, 4, False), (512, 4, False), (256, 4, True), (512, 4, True), (1024, 4, True))
# (laid out for conflict-free reads: schedules.matmul, else schedules.gemm), BM, BN, BK, TM, TN, lanes, stages
# (2: the K loop pipelined, cp.async)
TILINGS = ((True, 128, 128, 8, 8, 8, 1, 1), (False, 128, 128, 8, 8, 8, 1, 1), (False, 128, 128, 8, 8, 8, 4, 1),
           (False, 128, 128, 16, 8, 8, 4, 1), (False, 128, 128, 32, 8, 8, 4, 1), (False, 128, 64, 8, 8, 4, 4, 1),
           (False, 128, 128, 8, 8, 8, 4, 2), (False, 128, 128, 16, 8, 8, 4, 2), (False, 128, 64, 16, 8, 4, 4, 2))


def gemm(n: int, runs: int, rows: list) -> None:
    import torch

    from ember import te
    from ember.cuda import schedules

    torch.backends.cuda.matmul.allow_tf32 = False
    a, b, c = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda"), torch.empty(n, n, device="cuda")
    expected = torch.matmul(a, b)
    tflop = 2 * n**3 / 1e12
    name = f"fp32 GEMM {n}^3"
    for views, BM, BN, BK, TM, TN, lanes, stages in TILINGS:
        tiles = {"BM": BM, "BN": BN, "BK": BK, "TM": TM, "TN": TN}

        def make(views=views, tiles=tiles, lanes=lanes, stages=stages):
            if views:
                return schedules.matmul(n, n, n, **tiles)
            A, B = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
            k = te.reduce_axis((0, n), name="k")
            C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
            s = te.create_schedule(C.op)
            schedules.gemm(s, A, B, C, **tiles, vector=lanes, stages=stages)
            return s, [A, B, C]

        impl = f"ember {'matmul' if views else 'gemm'} {BM}x{BN}x{BK}, {TM}x{TN}/thr x{lanes} s{stages}"
        try:
            f, build_s = build(make)
            c.zero_()
            f(a, b, c)
            torch.testing.assert_close(c, expected, rtol=1e-3, atol=1e-2)
            t = timed(lambda f=f: f(a, b, c), runs)
            rows.append((name, impl, t, tflop / t, build_s))
        except Exception:  # one tiling's failure must not hide the others'
            print(f"--- {impl} failed:")
            traceback.print_exc(limit=6, file=sys.stdout)
    t = timed(lambda: torch.matmul(a, b, out=c), runs)
    rows.append((name, "cuBLAS (TF32 off)", t, tflop / t, None))


# Tensor Core GEMM tilings (schedules.tensorcore_gemm): BM, BN, BK, a warp's WM x WN, the rows' padding, stages
# (2: the K loop pipelined, cp.async; larger tiles in 2 stages need more than 48 KiB of shared memory)
TC_TILINGS = ((128, 128, 32, 64, 32, 8, 2), (128, 128, 32, 64, 64, 8, 2), (128, 128, 32, 64, 32, 8, 1),
              (128, 128, 32, 64, 32, 0, 2), (128, 256, 32, 64, 64, 8, 1), (256, 128, 32, 64, 64, 8, 1))


def tensorcore_gemm(n: int, runs: int, rows: list) -> None:
    import torch

    from ember.cuda import schedules

    tflop = 2 * n**3 / 1e12
    for dtype, torch_dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        a = torch.randn(n, n, device="cuda").to(torch_dtype)
        b = torch.randn(n, n, device="cuda").to(torch_dtype)
        c = torch.empty(n, n, device="cuda")
        expected = torch.matmul(a.float(), b.float())  # fp32 products of the same inputs (TF32 off)
        name = f"{'fp16' if dtype == 'float16' else 'bf16'} GEMM {n}^3"
        for BM, BN, BK, WM, WN, pad, stages in TC_TILINGS:
            tiles = {"BM": BM, "BN": BN, "BK": BK, "WM": WM, "WN": WN, "pad": pad, "stages": stages}
            impl = f"ember wmma {BM}x{BN}x{BK}, warp {WM}x{WN} p{pad} s{stages}"
            try:
                f, build_s = build(lambda tiles=tiles, dtype=dtype: schedules.tensorcore_gemm(n, n, n, dtype, **tiles))
                c.zero_()
                f(a, b, c)
                torch.testing.assert_close(c, expected, rtol=1e-3, atol=1e-2)
                t = timed(lambda f=f, a=a, b=b, c=c: f(a, b, c), runs)
                rows.append((name, impl, t, tflop / t, build_s))
            except Exception:  # one tiling's failure must not hide the others'
                print(f"--- {name} {impl} failed:")
                traceback.print_exc(limit=6, file=sys.stdout)
        out = torch.empty(n, n, device="cuda", dtype=torch_dtype)
        t = timed(lambda a=a, b=b, out=out: torch.matmul(a, b, out=out), runs)
        rows.append((name, f"cuBLAS ({dtype} out)", t, tflop / t, None))


# operators with the GPU family's default schedules (ember.schedules.gpu), as a model's kernels get them:
# (operator, input shapes, dtype, attributes, the torch function, GB/s (True) or TFLOP/s (False))
DEFAULTS = (("softmax", ((4096, 4096),), "float32", {"axis": 1}, lambda x: x.softmax(1), True),
            ("layer_norm", ((4096, 4096), (4096,), (4096,)), "float32", {"normalized_ndim": 1, "eps": 1e-5},
             lambda x, g, b: _functional().layer_norm(x, (x.shape[-1],), g, b, 1e-5), True),
            ("sum", ((4096, 4096),), "float32", {"axes": [1]}, lambda x: x.sum(1), True),
            ("gelu", ((4096, 4096),), "float32", {}, lambda x: _functional().gelu(x), True),
            ("matmul", ((4096, 4096), (4096, 4096)), "float32", {}, lambda a, b: a @ b, False),
            ("matmul", ((4096, 4096), (4096, 4096)), "float16", {}, lambda a, b: a @ b, False))


def _functional():
    import torch

    return torch.nn.functional


def defaults(n: int, runs: int, rows: list) -> None:
    """The operators of DEFAULTS as the CUDA target schedules them by default, against torch."""
    import torch

    import ember
    from ember.graph.core import TensorType
    from ember.ops.registry import infer_types
    from ember.schedules.apply import node_kernel
    from ember.target import Target

    torch.backends.cuda.matmul.allow_tf32 = False
    for op, shapes, dtype, attrs, torch_fn, memory_bound in DEFAULTS:
        name = f"default {op} {dtype}"
        try:
            types = [TensorType(shape, dtype) for shape in shapes]
            bound, outs = infer_types(op, types, attrs)
            t0 = time.perf_counter()
            s, args = node_kernel(op, types, bound, outs, target=Target("cuda"))
            f = ember.build(s, args, target="cuda")
            build_s = time.perf_counter() - t0
            xs = [torch.randn(shape, device="cuda").to(getattr(torch, dtype)) for shape in shapes]
            ys = [torch.empty(tuple(int(d) for d in t.shape), device="cuda", dtype=getattr(torch, t.dtype))
                  for t in outs]
            f(*xs, *ys)
            torch.testing.assert_close(ys[0].float(), torch_fn(*xs).float(), rtol=2e-2, atol=2e-2)
            work = (sum(x.numel() * x.element_size() for x in (*xs, *ys)) / 1e9 if memory_bound
                    else 2 * shapes[0][0] * shapes[0][1] * shapes[1][1] / 1e12)
            t = timed(lambda f=f, xs=xs, ys=ys: f(*xs, *ys), runs)
            rows.append((name, f"ember grid {f.grid} block {f.block}", t, work / t, build_s))
            t = timed(lambda xs=xs, fn=torch_fn: fn(*xs), runs)
            rows.append((name, "torch", t, work / t, None))
        except Exception:  # one operator's failure must not hide the others'
            print(f"--- {name} failed:")
            traceback.print_exc(limit=6, file=sys.stdout)


# a model's products as the CUDA target schedules them (ember.schedules.gpu.matmul: Tensor Cores at any shape
# in fp16, CUDA cores in fp32, the bias fused): (name, operator, input shapes, attributes, torch's function on the
# same inputs, the types it runs in)
FP16, BOTH = ("float16",), ("float16", "float32")
PRODUCTS = (("linear 128x768->3072 +b", "gemm", ((128, 768), (3072, 768), (3072,)), {"trans_b": True},
             lambda x, w, b: _functional().linear(x, w, b), BOTH),  # BERT-base's MLP up, 128 tokens, batch 1
            ("linear 128x3072->768 +b", "gemm", ((128, 3072), (768, 3072), (768,)), {"trans_b": True},
             lambda x, w, b: _functional().linear(x, w, b), ("float32",)),  # its MLP down
            ("linear 128x768->768 +b", "gemm", ((128, 768), (768, 768), (768,)), {"trans_b": True},
             lambda x, w, b: _functional().linear(x, w, b), ("float32",)),  # its attention projections
            ("linear 1x768->3072 +b", "gemm", ((1, 768), (3072, 768), (3072,)), {"trans_b": True},
             lambda x, w, b: _functional().linear(x, w, b), BOTH),  # a decoded token
            ("bmm 12x128x64x128", "matmul", ((12, 128, 64), (12, 64, 128)), {}, lambda a, b: a @ b, BOTH),
            # ResNet's 3x3 convolutions at batch 1 as implicit GEMMs (ember.ops.conv_gemm: the weights (OC, C*9))
            ("conv3x3 64ch 56^2 +b", "conv2d_gemm", ((1, 64, 56, 56), (64, 576), (64,)),
             {"kernel": (3, 3), "padding": (1, 1, 1, 1)},
             lambda x, w, b: _functional().conv2d(x, w.view(64, 64, 3, 3), b, padding=1), FP16),
            ("conv3x3 256ch 14^2 +b", "conv2d_gemm", ((1, 256, 14, 14), (256, 2304), (256,)),
             {"kernel": (3, 3), "padding": (1, 1, 1, 1)},
             lambda x, w, b: _functional().conv2d(x, w.view(256, 256, 3, 3), b, padding=1), FP16))


def products(n: int, runs: int, rows: list) -> None:
    """The products of PRODUCTS in each of their types as the CUDA target schedules them, against
    torch (cuBLAS, cuDNN; TF32 off) on the same inputs; TFLOP/s of the products' 2 M N K."""
    import torch

    import ember
    from ember.graph.core import TensorType
    from ember.ops.registry import infer_types
    from ember.schedules.apply import node_kernel
    from ember.target import Target

    torch.backends.cuda.matmul.allow_tf32 = False
    for name, op, shapes, attrs, torch_fn, dtypes in PRODUCTS:
        for dtype in dtypes:
            short = "fp16" if dtype == "float16" else "fp32"
            try:
                types = [TensorType(shape, dtype) for shape in shapes]
                bound, outs = infer_types(op, types, attrs)
                t0 = time.perf_counter()
                s, args = node_kernel(op, types, bound, outs, target=Target("cuda"))
                f = ember.build(s, args, target="cuda")
                build_s = time.perf_counter() - t0
                xs = [(torch.randn(shape, device="cuda") / shape[-1] ** 0.25).to(getattr(torch, dtype))
                      for shape in shapes]
                y = torch.empty(tuple(int(d) for d in outs[0].shape), device="cuda", dtype=getattr(torch, dtype))
                f(*xs, y)
                tolerance = 2e-2 if dtype == "float16" else 1e-4
                torch.testing.assert_close(y.float(), torch_fn(*xs).float(), rtol=tolerance, atol=tolerance)
                out, k = y.numel(), shapes[1][-1] if op == "conv2d_gemm" else shapes[0][-1]
                tflop = 2 * out * k / 1e12
                t = timed(lambda f=f, xs=xs, y=y: f(*xs, y), runs)
                rows.append((f"{name} {short}", f"ember grid {f.grid} block {f.block}", t, tflop / t, build_s))
                t = timed(lambda xs=xs, fn=torch_fn: fn(*xs), runs)
                rows.append((f"{name} {short}", f"torch {short}", t, tflop / t, None))
            except Exception:  # one product's failure must not hide the others'
                print(f"--- {name} {short} failed:")
                traceback.print_exc(limit=6, file=sys.stdout)


# BERT-base's fp32 linear layers at 128 tokens on CUDA cores in other tiles than the default's (BM, BN, TM, TN):
# which one the default should take (ember.schedules.gpu.matmul.cuda_core_tiles) is for a GPU to say
FP32_TILES = ((32, 32, 2, 2), (32, 32, 4, 4), (64, 32, 4, 2), (64, 64, 4, 4), (32, 64, 2, 4))


def fp32_tiles(n: int, runs: int, rows: list) -> None:
    """PRODUCTS' fp32 linear layers of 128 rows in each of FP32_TILES, against cuBLAS (TF32 off)."""
    import torch

    import ember
    from ember.graph.core import TensorType
    from ember.ops.registry import infer_types
    from ember.schedules.apply import node_kernel
    from ember.schedules.gpu.default import reductions_of
    from ember.schedules.gpu.matmul import cuda_cores
    from ember.target import Target

    torch.backends.cuda.matmul.allow_tf32 = False
    for name, op, shapes, attrs, torch_fn, dtypes in PRODUCTS:
        if "float32" not in dtypes or op != "gemm" or shapes[0][0] != 128:
            continue
        types = [TensorType(shape, "float32") for shape in shapes]
        bound, outs = infer_types(op, types, attrs)
        xs = [torch.randn(shape, device="cuda") / shape[-1] ** 0.25 for shape in shapes]
        y = torch.empty(tuple(int(d) for d in outs[0].shape), device="cuda")
        tflop = 2 * y.numel() * shapes[0][-1] / 1e12
        for BM, BN, TM, TN in FP32_TILES:
            try:
                t0 = time.perf_counter()
                s, args = node_kernel(op, types, bound, outs, schedule=False, target=Target("cuda"))
                out = args[-1]
                (C,) = [out] if out.op.reduce_axis else reductions_of(s, out)
                cuda_cores(s, C, out, {"BM": BM, "BN": BN, "BK": 16, "TM": TM, "TN": TN})
                f = ember.build(s, args, target="cuda")
                build_s = time.perf_counter() - t0
                f(*xs, y)
                torch.testing.assert_close(y, torch_fn(*xs), rtol=1e-4, atol=1e-4)
                t = timed(lambda f=f, xs=xs, y=y: f(*xs, y), runs)
                rows.append((f"{name} fp32", f"{BM}x{BN} tiles, {TM}x{TN} a thread", t, tflop / t, build_s))
            except Exception:  # one variant's failure must not hide the others'
                print(f"--- {name} fp32 in tiles {BM}x{BN} ({TM}x{TN}) failed:")
                traceback.print_exc(limit=6, file=sys.stdout)
        t = timed(lambda xs=xs, fn=torch_fn: fn(*xs), runs)
        rows.append((f"{name} fp32", "torch fp32", t, tflop / t, None))


def symbolic(n: int, runs: int, rows: list) -> None:
    """PRODUCTS' fp32 linear layers of 128 rows built once with a symbolic number of tokens (a model
    compiled with `dynamic_shapes`), launched at 128 and 384 tokens, next to the kernel built for
    that size and cuBLAS (TF32 off); each checked against torch first."""
    import torch

    import ember
    from ember.cuda.driver import device
    from ember.graph.core import TensorType
    from ember.ops.registry import infer_types
    from ember.schedules.apply import node_kernel
    from ember.target import Target

    def kernel(op, shapes, attrs):
        types = [TensorType(shape, "float32") for shape in shapes]
        bound, outs = infer_types(op, types, attrs)
        t0 = time.perf_counter()
        s, args = node_kernel(op, types, bound, outs, target=Target("cuda"))
        return ember.build(s, args, target="cuda"), time.perf_counter() - t0

    torch.backends.cuda.matmul.allow_tf32 = False
    device().activate()  # (`launch`, unlike a call, expects the context current)
    stream = torch.cuda.current_stream().cuda_stream
    for name, op, shapes, attrs, torch_fn, dtypes in PRODUCTS:
        if "float32" not in dtypes or op != "gemm" or shapes[0][0] != 128:
            continue
        name = name.replace("128x", "")
        try:
            f, build_s = kernel(op, [("tokens", shapes[0][1]), *shapes[1:]], attrs)
            for tokens in (128, 384):
                sized = [(tokens, shapes[0][1]), *shapes[1:]]
                xs = [torch.randn(shape, device="cuda") / shape[-1] ** 0.25 for shape in sized]
                y = torch.empty(tokens, shapes[1][0], device="cuda")
                pointers = [x.data_ptr() for x in (*xs, y)]
                f.launch(pointers, stream, [tokens])
                torch.testing.assert_close(y, torch_fn(*xs), rtol=1e-4, atol=1e-4)
                tflop = 2 * y.numel() * shapes[0][-1] / 1e12
                t = timed(lambda f=f, pointers=pointers, tokens=tokens: f.launch(pointers, stream, [tokens]), runs)
                rows.append((f"{name} fp32, {tokens} tokens", f"ember symbolic grid {f.grid_of([tokens])}", t,
                             tflop / t, build_s))
                static, static_s = kernel(op, sized, attrs)
                static(*xs, y)
                torch.testing.assert_close(y, torch_fn(*xs), rtol=1e-4, atol=1e-4)
                t = timed(lambda f=static, xs=xs, y=y: f(*xs, y), runs)
                rows.append((f"{name} fp32, {tokens} tokens", f"ember static grid {static.grid}", t, tflop / t,
                             static_s))
                t = timed(lambda xs=xs, fn=torch_fn: fn(*xs), runs)
                rows.append((f"{name} fp32, {tokens} tokens", "torch fp32", t, tflop / t, None))
        except Exception:  # one layer's failure must not hide the others'
            print(f"--- {name} fp32 with symbolic tokens failed:")
            traceback.print_exc(limit=6, file=sys.stdout)


def split_k(n: int, runs: int, rows: list) -> None:
    """PRODUCTS' fp32 linear layers of 128 rows whose grid leaves multiprocessors idle, compiled as a
    model of one layer for target "cuda" with split-K (ember.passes.split_k: partial sums, then
    their sum with the bias) and without (the one pass, fewer blocks), and cuBLAS (TF32 off); each
    checked against torch first. The models' calls replay CUDA graphs (from their second call)."""
    import torch

    import ember
    from ember.graph.core import Graph, TensorType
    from ember.ops.nodes import add_op
    from ember.schedules.gpu.split_k import splits_for

    torch.backends.cuda.matmul.allow_tf32 = False
    for name, op, shapes, attrs, torch_fn, dtypes in PRODUCTS:
        (M, K), (N, _) = shapes[0], shapes[1]
        if "float32" not in dtypes or op != "gemm" or M != 128 or (splits := splits_for(1, M, N, K)) == 1:
            continue
        x, w, b = (torch.randn(shape, device="cuda") / shape[-1] ** 0.25 for shape in shapes)
        g = Graph()
        (y,) = add_op(g, "gemm", [g.add_input("x", TensorType((M, K))), g.add_constant(w.cpu().numpy(), "w"),
                                  g.add_constant(b.cpu().numpy(), "b")], attrs)
        g.set_outputs([y])
        expected = torch_fn(x, w, b)
        tflop = 2 * M * N * K / 1e12
        for label, disabled in ((f"ember split-K, {splits} parts", ()), ("ember one pass", ("split_k",))):
            try:
                t0 = time.perf_counter()
                cm = ember.compile(g, target="cuda", disabled_passes=disabled)
                build_s = time.perf_counter() - t0
                torch.testing.assert_close(cm(x), expected, rtol=1e-4, atol=1e-4)
                t = timed(lambda cm=cm, x=x: cm(x), runs)
                kernels = ", ".join("+".join(sorted(k.ops)) for k in cm.kernels)
                rows.append((f"{name} fp32", f"{label}: {kernels}", t, tflop / t, build_s))
            except Exception:  # one variant's failure must not hide the others'
                print(f"--- {name} fp32 ({label}) failed:")
                traceback.print_exc(limit=6, file=sys.stdout)
        t = timed(lambda fn=torch_fn, xs=(x, w, b): fn(*xs), runs)
        rows.append((f"{name} fp32", "torch fp32", t, tflop / t, None))


def tuning(n: int, trials: int, runs: int) -> None:
    """A search of `trials` GPU candidates for the fp32 GEMM n^3 (ember.tune's GPU sketches,
    measured with CUDA events in worker processes): the best latency after each round, then the
    winner against the GPU family's default schedule (ember.schedules.gpu.matmul, the search's
    baseline) and cuBLAS."""
    import os

    import torch

    from ember import te
    from ember.cuda import schedules
    from ember.schedules.gpu.matmul import TILES
    from ember.target import Target
    from ember.tune import GPURunner, Task, task_from_tensors
    from ember.tune.tuner import TaskTuner

    A, B = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    schedules.gemm(s, A, B, C, **TILES, vector=4, stages=2)
    plain = task_from_tensors([A, B, C], f"gemm{n}")
    task = Task(plain.name, plain.func, default_trace=s.trace)
    tflop = 2 * n**3 / 1e12
    with GPURunner(workers=min(8, os.cpu_count() or 1)) as runner:
        tuner = TaskTuner(task, runner=runner, target=Target("cuda"), progress=True)
        default_s = tuner.measure_default()
        print(f"\ntuning fp32 GEMM {n}^3, {trials} trials; the default schedule: {default_s * 1e3:.3f} ms "
              f"({tflop / default_s:.1f} TFLOP/s)")
        print(f"{'trials':>7} {'best ms':>9} {'TFLOP/s':>8} {'elapsed s':>10}")
        while tuner.trials < trials and tuner.step(min(16, trials - tuner.trials)):
            measured, best, elapsed = tuner.history[-1]
            print(f"{measured:7d} {best * 1e3:9.3f} {tflop / best:8.1f} {elapsed:10.0f}", flush=True)
        result = tuner.result()
    failures = "; ".join(f"{count} x {error.splitlines()[0][:100]}" for error, count in tuner.failures.most_common(3))
    print(f"invalid candidates: {sum(tuner.failures.values())} ({failures or 'none'})")
    torch.backends.cuda.matmul.allow_tf32 = False
    a, b, c = (torch.randn(n, n, device="cuda") for _ in range(3))
    cublas = timed(lambda: torch.matmul(a, b, out=c), runs)
    print(f"best {result.latency_s * 1e3:.3f} ms ({result.gflops / 1e3:.1f} TFLOP/s), "
          f"{tuner.baseline_s / result.latency_s:.2f}x the default schedule ({tuner.baseline_s * 1e3:.3f} ms), "
          f"{cublas / result.latency_s:.0%} of cuBLAS fp32 ({cublas * 1e3:.3f} ms)")
    decisions = [line for line in str(result.trace).splitlines() if "sample_" in line]
    print("its decisions (BM, BN, BK, TM, TN, vector, stages):\n" + "\n".join(decisions))


PARTS = {"copy": copy, "elementwise": elementwise, "softmax": softmax, "layer_norm": layer_norm, "gemm": gemm,
         "tensorcore_gemm": tensorcore_gemm, "defaults": defaults, "products": products, "fp32_tiles": fp32_tiles,
         "symbolic": symbolic, "split_k": split_k}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS))
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

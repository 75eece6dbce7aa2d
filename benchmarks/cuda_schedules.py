"""The parts of benchmarks/cuda_kernels.py that time kernels scheduled by hand with
ember.cuda.schedules: an elementwise chain, row softmax and layer norm in several row schedules,
the device copy they are measured against, the fp32 GEMM's shared-memory tilings and the fp16 and
bf16 Tensor Core GEMMs, each next to its torch or cuBLAS peer. A part appends its rows (kernel,
implementation, seconds, GB/s or TFLOP/s, build seconds or None for a peer) to `rows`."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.cuda_timing import build, timed, timed_graph  # noqa: E402


def elementwise(n: int, runs: int, rows: list) -> None:
    """An elementwise chain, exp(a) * b + a, at n x n and 4n x n (past the L2), 4 lanes a thread, in the
    layouts of ELEMENTWISE (threads a block, vectors a thread), against torch eager and the device copy
    of the same shape, each timed as 20 launches in a CUDA graph (`timed_graph`: the GPU's time,
    without the host's between launches)."""
    import torch

    from ember import te
    from ember.cuda import schedules
    from ember.cuda.driver import device

    device().activate()  # (`launch`, unlike a call, expects the context current)
    for m in (n, 4 * n):
        def make(m=m, threads=256, per_thread=1):
            A, B = te.placeholder((m, n), name="A"), te.placeholder((m, n), name="B")
            C = te.compute((m, n), lambda i, j: te.exp(A[i, j]) * B[i, j] + A[i, j], name="C")
            s = te.create_schedule(C.op)
            schedules.elementwise(s, C, threads, per_thread=per_thread)
            return s, [A, B, C]

        a, b, c = (torch.randn(m, n, device="cuda") for _ in range(3))
        name = f"elementwise {m}x{n}"
        t, graphed = timed_graph(lambda a=a, c=c: c.copy_(a), runs)
        rows.append((f"device copy {m}x{n}", f"torch copy_{'' if graphed else ' (no graph)'}", t,
                     2 * a.numel() * 4 / 1e9 / t, None))
        gb = 3 * a.numel() * 4 / 1e9
        pointers = [a.data_ptr(), b.data_ptr(), c.data_ptr()]
        for threads, per_thread in ELEMENTWISE:
            impl = f"ember {threads}t, {per_thread} x 4 lanes a thread"
            try:
                f, build_s = build(lambda m=m, threads=threads, per_thread=per_thread: make(m, threads, per_thread))
                c.zero_()
                f(a, b, c)
                torch.testing.assert_close(c, a.exp() * b + a, rtol=1e-5, atol=1e-5)
                t, graphed = timed_graph(lambda f=f, p=pointers: f.launch(p, torch.cuda.current_stream().cuda_stream),
                                         runs)
                rows.append((name, f"{impl}{'' if graphed else ' (no graph)'}", t, gb / t, build_s))
            except Exception:  # one layout's failure must not hide the others'
                print(f"--- {name}, {impl}, failed:")
                traceback.print_exc(limit=6, file=sys.stdout)
        t, graphed = timed_graph(lambda a=a, b=b, c=c: torch.add(torch.mul(torch.exp(a), b), a, out=c), runs)
        rows.append((name, f"torch eager (3 kernels){'' if graphed else ' (no graph)'}", t, gb / t, None))
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


# the elementwise chain's layouts: (threads a block, vectors of 4 lanes a thread; the first is the default's)
ELEMENTWISE = ((256, 1), (256, 2), (256, 4), (128, 4), (512, 1))
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


# Tensor Core GEMM configurations (ember.cuda.tensorcore.tensorcore_gemm): the intrinsic, BM, BN, BK, a warp's WM x WN,
# the cp.async stages, the rows of tiles a group of blocks runs down (the L2 swizzle). mma: swizzled tiles of rows
# of any power of two bytes (ember.intrinsics.mma_lanes: B's rows 256 bytes at BN 128, 512 at 256); past 48 KiB of
# them, dynamic shared memory; wmma: rows padded by 8. The first is the default, the last wmma's of before.
TC_CONFIGS = (("mma", 128, 128, 32, 64, 64, 3, 8), ("mma", 128, 128, 32, 64, 64, 4, 8),
              ("mma", 128, 256, 32, 64, 64, 3, 8), ("mma", 256, 128, 32, 64, 64, 3, 8),
              ("mma", 128, 128, 64, 64, 64, 3, 8), ("mma", 128, 64, 32, 64, 32, 3, 8),
              ("wmma", 128, 128, 32, 64, 64, 2, 1))
# mma.sync GEMMs 512^3 checked first, at rows of A (BK) and B (BN) of 128, 256 and 512 bytes: BM, BN, BK, WM, WN, stages
TC_ROWS = ((64, 64, 64, 32, 32, 3), (64, 128, 128, 32, 64, 3), (64, 256, 256, 32, 64, 1))


def tensorcore_gemm(n: int, runs: int, rows: list) -> None:
    """mma.sync's products at each row length of TC_ROWS against torch first, then the
    configurations of TC_CONFIGS in fp16 and bf16 at n^3, then cuBLAS and Triton's tutorial; the
    best of all and of each intrinsic printed with its share of cuBLAS."""
    import torch

    from ember.cuda import tensorcore

    tflop = 2 * n**3 / 1e12
    for dtype, torch_dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        _check_long_rows(dtype, torch_dtype)
        a = torch.randn(n, n, device="cuda").to(torch_dtype)
        b = torch.randn(n, n, device="cuda").to(torch_dtype)
        c = torch.empty(n, n, device="cuda")
        expected = torch.matmul(a.float(), b.float())  # fp32 products of the same inputs (TF32 off)
        name = f"{'fp16' if dtype == 'float16' else 'bf16'} GEMM {n}^3"
        mine = []
        for intrinsic, BM, BN, BK, WM, WN, stages, group in TC_CONFIGS:
            tiles = {"BM": BM, "BN": BN, "BK": BK, "WM": WM, "WN": WN, "stages": stages, "intrinsic": intrinsic,
                     "group": group}
            impl = f"ember {intrinsic} {BM}x{BN}x{BK} w{WM}x{WN} s{stages} g{group}"
            try:
                f, build_s = build(lambda tiles=tiles, dtype=dtype: tensorcore.tensorcore_gemm(n, n, n, dtype, **tiles))
                c.zero_()
                f(a, b, c)
                torch.testing.assert_close(c, expected, rtol=1e-3, atol=1e-2)
                t = timed(lambda f=f, a=a, b=b, c=c: f(a, b, c), runs)
                rows.append((name, f"{impl} r{f.registers}", t, tflop / t, build_s))
                mine.append((t, impl))
            except Exception:  # one configuration's failure must not hide the others'
                print(f"--- {name} {impl} failed:")
                traceback.print_exc(limit=6, file=sys.stdout)
        out = torch.empty(n, n, device="cuda", dtype=torch_dtype)
        t = timed(lambda a=a, b=b, out=out: torch.matmul(a, b, out=out), runs)
        rows.append((name, f"cuBLAS ({dtype} out)", t, tflop / t, None))
        peer = _triton_matmul(a, b, c, expected, runs)
        if peer is not None:
            rows.append((name, "Triton tutorial 128x256x64 w8 s3", peer, tflop / peer, None))
        for kind in ("mma", "wmma"):
            timed_ = [(tm, impl) for tm, impl in mine if impl.split()[1] == kind]
            if timed_:
                best, impl = min(timed_)
                print(f"best {kind} {name}: {impl}, {tflop / best:.1f} TFLOP/s, {t / best:.0%} of cuBLAS")
        if mine:
            best, impl = min(mine)
            triton = f", Triton {tflop / peer:.1f} ({t / peer:.0%})" if peer else ""
            print(f"best {name}: {impl}, {tflop / best:.1f} TFLOP/s, {t / best:.0%} of cuBLAS ({tflop / t:.1f})"
                  f"{triton}")


def _check_long_rows(dtype: str, torch_dtype) -> None:
    """mma.sync's GEMM 512^3 at each row length of TC_ROWS against torch: one line each, right or
    its largest error (the step's first answer: the swizzle of long rows on a GPU)."""
    import torch

    from ember.cuda import tensorcore

    n = 512
    a, b = (torch.randn(n, n, device="cuda").to(torch_dtype) for _ in range(2))
    expected = torch.matmul(a.float(), b.float())
    for BM, BN, BK, WM, WN, stages in TC_ROWS:
        what = f"{dtype} mma {BM}x{BN}x{BK} s{stages}, rows of A {2 * BK} bytes, of B {2 * BN}"
        tiles = {"BM": BM, "BN": BN, "BK": BK, "WM": WM, "WN": WN, "stages": stages, "intrinsic": "mma"}
        try:
            f, _ = build(lambda tiles=tiles: tensorcore.tensorcore_gemm(n, n, n, dtype, **tiles))
            c = torch.full((n, n), float("nan"), device="cuda")
            f(a, b, c)
            error = (c - expected).abs().max().item()
            print(f"{what}: {'right' if error <= 1e-2 else 'WRONG'} (largest error {error:.2e})")
        except Exception:  # one row length's failure must not hide the others'
            print(f"--- {what} failed:")
            traceback.print_exc(limit=6, file=sys.stdout)


def _triton_matmul(a, b, c, expected, runs: int) -> float | None:
    """Seconds per call of Triton's tutorial matmul (benchmarks/tile.py's kernel compiled by the real
    Triton) in its first configuration, fp32 out; None without Triton or where it fails."""
    from benchmarks.tile import triton_twins

    try:
        twins = triton_twins()
        if twins is None:
            return None
        n = a.shape[0]

        def run():
            twins.matmul_kernel[(n // 128 * (n // 256),)](a, b, c, n, n, n, n, 1, n, 1, n, 1, BM=128, BN=256, BK=64,
                                                          GROUP=8, num_warps=8, num_stages=3)

        c.zero_()
        run()
        import torch

        torch.testing.assert_close(c, expected, rtol=1e-3, atol=1e-2)
        return timed(run, runs)
    except Exception:  # a peer's failure must not hide ember's numbers
        print("--- Triton's matmul failed:")
        traceback.print_exc(limit=4, file=sys.stdout)
        return None

"""Tile kernels (ember.triton, compiled to C) against their peers, each peer in its own process.

    vector add     GB/s (bytes read and written) against a copy of the same size (numpy.copyto)
    softmax        (4096, N), N in 256, 1024, 4096: ms against torch.softmax and ember's compiled
                   softmax operator
    matmul         512, 1024, 2048 in GFLOP/s, the best of a few block configs, against NumPy's BLAS
    attention      fused attention forward (online softmax) against torch's scaled_dot_product_attention
    compile time   of each kernel, cold (empty build cache) and cached (a new process, same cache)

Rounds alternate the peers; a figure is the median over rounds of each process's median.

    python benchmarks/tile.py [--rounds 3] [--only vadd softmax matmul attention compile]

With `--device cuda` the same kernels run on the GPU (target "cuda", torch CUDA tensors) against
Triton compiling the very same source (the kernels' text imported under the real `triton`, where it
is installed) and torch, timed with CUDA events (median of --reps launches, in one process; the
host's time a launch and the GPU's alone, launches replayed in a CUDA graph, after each line):

    vector add     GB/s against a copy of the same size (torch's copy_): the bandwidth of the GPU
    softmax        (4096, N), N in 1024, 4096: ms against Triton and torch.softmax
    matmul         float16 4096^3 in TFLOP/s, the best of a few block configs each, against Triton;
                   ember's tl.dot on wmma and on mma.sync (EMBER_TILE_MMA=1), the faster named
    attention      float16 (8 heads, 2048, 64) against Triton and torch's scaled_dot_product_attention

Every case first checks ember's result (and Triton's) against torch. Without a GPU it compiles
every case for sm_90 (NVRTC) and says that the timings need one.

    python benchmarks/tile.py --device cuda [--reps 50] [--only vadd softmax matmul attention]
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

import ember.triton as triton  # noqa: E402
import ember.triton.language as tl  # noqa: E402
from benchmarks.cuda_timing import timed as gpu_timed  # noqa: E402 (CUDA events after a warm-up)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    num_m, num_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = GROUP * num_n
    first_m = (pid // group) * GROUP
    size_m = tl.minimum(num_m - first_m, GROUP)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    start = tl.program_id(0) * BM
    head = tl.program_id(1) * S * D
    rm = start + tl.arange(0, BM)
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + head + rm[:, None] * D + rd[None, :], mask=rm[:, None] < S, other=0.0)
    m_i = tl.full((BM,), -float("inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for j in range(0, tl.cdiv(S, BN)):
        rn = j * BN + tl.arange(0, BN)
        k = tl.load(k_ptr + head + rn[None, :] * D + rd[:, None], mask=rn[None, :] < S, other=0.0)
        s = tl.dot(q, k) * scale
        s = tl.where(rn[None, :] < S, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + head + rn[:, None] * D + rd[None, :], mask=rn[:, None] < S, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    tl.store(o_ptr + head + rm[:, None] * D + rd[None, :], acc / l_i[:, None], mask=rm[:, None] < S)


MATMUL_CONFIGS = [(64, 64, 32), (64, 128, 32), (128, 128, 32), (32, 128, 64)]
# BM, BN, BK, warps, stages (Triton's default num_stages is 3; 1: the copies in their own iteration)
GPU_MATMUL_CONFIGS = [(128, 64, 32, 4, 3), (128, 128, 32, 8, 1), (128, 128, 32, 8, 2), (128, 128, 32, 8, 3),
                      (128, 128, 32, 8, 4), (128, 128, 64, 8, 3), (64, 128, 64, 4, 3)]
KERNELS = (add_kernel, softmax_kernel, matmul_kernel, attention_kernel)


def triton_twins():
    """The kernels above compiled by the real Triton (the same source under `import triton`), or
    None where Triton is not installed."""
    import importlib.util

    if importlib.util.find_spec("triton") is None or importlib.util.find_spec("triton.language") is None:
        return None
    folder = Path(tempfile.mkdtemp(prefix="ember-tile-twins-"))
    path = folder / "twins.py"
    path.write_text("import triton\nimport triton.language as tl\n\n\n" + "\n\n".join(k.src for k in KERNELS))
    spec = importlib.util.spec_from_file_location("ember_tile_twins", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_cases(ns, only: list[str]):
    """(name, {peer: launch}, check) per case, on torch CUDA tensors; `ns` holds the kernels (ember's
    module or Triton's twins); check(run) compares what run() leaves against torch."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    cases = []
    if "vadd" in only:
        n = 1 << 26
        x, y = (torch.rand(n, device="cuda", generator=g) for _ in range(2))
        out = torch.empty_like(x)
        cases.append(("vadd", n, lambda k, x=x, y=y, out=out, n=n: lambda: k.add_kernel[(triton.cdiv(n, 4096),)](
            x, y, out, n, BLOCK=4096), lambda x=x, y=y, out=out: torch.testing.assert_close(out, x + y, rtol=0, atol=0),
            lambda x=x, out=out: out.copy_(x)))
    if "softmax" in only:
        for n in (1024, 4096):
            x = torch.randn(4096, n, device="cuda", generator=g)
            out = torch.empty_like(x)
            cases.append((f"softmax{n}", n, lambda k, x=x, out=out, n=n: lambda: k.softmax_kernel[(4096,)](
                out, x, n, n, n, BLOCK=n), lambda x=x, out=out: torch.testing.assert_close(
                out, torch.softmax(x, 1), rtol=1e-5, atol=1e-6), lambda x=x: torch.softmax(x, 1)))
    if "matmul" in only:
        n = 4096
        a, b = (torch.randn(n, n, device="cuda", generator=g).half() for _ in range(2))
        c = torch.empty(n, n, device="cuda", dtype=torch.float16)
        for bm, bn, bk, warps, stages in GPU_MATMUL_CONFIGS:
            grid = (triton.cdiv(n, bm) * triton.cdiv(n, bn),)
            cases.append((f"matmul {bm}x{bn}x{bk} w{warps} s{stages}", n, lambda k, grid=grid, bm=bm, bn=bn, bk=bk,
                          w=warps, st=stages: (
                lambda: k.matmul_kernel[grid](a, b, c, n, n, n, n, 1, n, 1, n, 1, BM=bm, BN=bn, BK=bk, GROUP=8,
                                              num_warps=w, num_stages=st)),
                lambda: torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-1),
                lambda: a @ b))
    if "attention" in only:
        heads, s, d = 8, 2048, 64
        q, k_, v = (torch.randn(heads, s, d, device="cuda", generator=g).half() for _ in range(3))
        o = torch.empty_like(q)
        sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(q[None], k_[None], v[None])  # noqa: E731
        cases.append(("attention", s, lambda k: lambda: k.attention_kernel[(triton.cdiv(s, 64), heads)](
            q, k_, v, o, s, d ** -0.5, D=d, BM=64, BN=64),
            lambda: torch.testing.assert_close(o.float(), sdpa()[0].float(), rtol=1e-2, atol=1e-2), sdpa))
    return cases


def gpu_main(args) -> None:
    import torch

    if not torch.cuda.is_available():
        compile_for_sm90(args.only)
        return
    twins = triton_twins()
    print(f"ember.triton on {torch.cuda.get_device_name()}, medians of {args.reps} launches (CUDA events); "
          f"Triton {'installed' if twins else 'not installed'}")
    ember_ns = sys.modules[__name__]
    best: dict[str, tuple[float, str]] = {}  # each peer's fastest matmul config
    for name, size, launch, check, peer in gpu_cases(ember_ns, args.only):
        times, host, graphed = {}, {}, {}
        kernels = {}
        peers = [("ember", ember_ns), ("triton", twins),  # (mma.sync last: a fault of its would lose no other figure)
                 *([("ember mma", ember_ns)] if name.startswith("matmul") else [])]
        for who, ns in peers:
            if ns is None:
                continue
            os.environ["EMBER_TILE_MMA"] = "1" if who == "ember mma" else "0"  # (tl.dot on mma.sync, else wmma)
            try:
                run = launch(ns)
                compiled = run()
                if who.startswith("ember"):
                    kernels[who] = describe(compiled)
                check()  # every figure is of a correct kernel
            except Exception as e:  # noqa: BLE001 (a peer that fails is reported, the others still run)
                print(f"{name}: {who} failed: {type(e).__name__}: {str(e)[:300]}")
                continue
            times[who] = gpu_timed(run, args.reps)
            if who != "ember mma":  # (its host's part is the other lowering's)
                host[who], graphed[who] = host_time(run, args.reps), graph_time(run, max(3, args.reps // 3))
        os.environ.pop("EMBER_TILE_MMA")
        if "ember" not in times:
            continue
        times["torch"] = gpu_timed(peer, args.reps)
        print(gpu_line(name, size, times))
        for who, kernel in kernels.items():
            print(f"  {who}'s kernel: {kernel}")
        print("  host time a launch: " + ", ".join(f"{p} {v * 1e6:.0f} us" for p, v in host.items())
              + "; a kernel replayed in a CUDA graph (no host): " + ", ".join(
                  f"{p} {v * 1e3:.3f} ms" if v else f"{p} (no capture)" for p, v in graphed.items()))
        if name == "softmax1024":  # (the smallest kernel: where the host's part shows most)
            host_profile(launch(ember_ns), args.reps * 10)
        if name.startswith("matmul"):
            for p, v in times.items():
                if p != "torch" and v < best.get(p, (float("inf"), ""))[0]:
                    best[p] = (v, name.removeprefix("matmul "))
    if "ember" in best:
        tf = {p: (2 * 4096 ** 3 / v / 1e12, cfg) for p, (v, cfg) in best.items()}
        print("matmul float16 4096^3, best config each: " + ", ".join(
            f"{p} {v:.1f} TFLOP/s ({cfg})" for p, (v, cfg) in tf.items()) + "".join(
            f", {p} / triton {tf[p][0] / tf['triton'][0]:.2f}" for p in ("ember", "ember mma")
            if p in tf and "triton" in tf))
        if "ember mma" in tf:
            faster = "ember mma" if tf["ember mma"][0] > tf["ember"][0] else "ember"
            print(f"  the faster lowering of tl.dot: {'mma.sync (EMBER_TILE_MMA=1)' if faster != 'ember' else 'wmma'}, "
                  f"x{tf['ember mma'][0] / tf['ember'][0]:.2f} mma over wmma")


def graph_time(fn, runs: int, launches: int = 10) -> float | None:
    """Seconds a launch of fn takes on the GPU alone: `launches` of it captured in one CUDA graph
    (on torch's capture stream, which ember's launches and Triton's take as the current one),
    replayed between CUDA events; None where the capture fails."""
    import torch

    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(launches):
                fn()
        return gpu_timed(graph.replay, runs) / launches
    except Exception as e:  # noqa: BLE001 (reported, the other figures stand)
        print(f"  (CUDA graph capture failed: {type(e).__name__}: {str(e)[:200]})")
        return None


def host_profile(fn, runs: int, top: int = 12) -> None:
    """Where the host's time of ember's launches goes: the functions taking the most of `runs`
    launches (cProfile, the thread's CPU time)."""
    import cProfile
    import io
    import pstats

    import torch

    profile = cProfile.Profile(time.thread_time)
    profile.enable()
    for _ in range(runs):
        fn()
    profile.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(top)
    lines = [x for x in out.getvalue().splitlines() if x.strip()]
    print(f"  ember's host time, {runs} launches (cProfile, CPU seconds):")
    print("\n".join(f"    {x}" for x in lines[-top - 1:]))


def host_time(fn, runs: int) -> float:
    """Seconds of the host a call of fn takes, launches queued back to back (the GPU's time hidden
    where it is shorter): whether CUDA events around one launch time the host or the kernel."""
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / runs


def gpu_line(name: str, size: int, t: dict[str, float]) -> str:
    vs = "".join(f", {p} {v * 1e3:.3f} ms (x{v / t['ember']:.2f})" for p, v in t.items() if p != "ember")
    if name == "vadd":
        add, copy = 12 * size / t["ember"] / 1e9, 8 * size / t["torch"] / 1e9
        return f"vector add {size}: {add:.0f} GB/s, copy {copy:.0f} GB/s, {100 * add / copy:.0f}% of copy{vs}"
    if name.startswith("matmul"):
        tf = {p: 2 * size ** 3 / v / 1e12 for p, v in t.items()}
        return f"{name} float16 {size}^3: ember {tf['ember']:.1f} TFLOP/s" + "".join(
            f", {p} {v:.1f} TFLOP/s (ratio {tf['ember'] / v:.2f})" for p, v in tf.items() if p != "ember")
    return f"{name}: ember {t['ember'] * 1e3:.3f} ms{vs}"


def compile_for_sm90(only: list[str]) -> None:
    """Without a GPU: every case's kernel compiled for target "cuda" (its CUDA C, NVRTC's sm_90 cubin)."""
    f32, f16 = np.zeros(1 << 12, np.float32), np.zeros(1 << 12, np.float16)
    m16 = f16.reshape(64, 64)
    built = []
    if "vadd" in only:
        built.append(add_kernel.compile(f32, f32, f32, 4096, BLOCK=4096, target="cuda"))
    if "softmax" in only:
        built += [softmax_kernel.compile(f32, f32, n, n, n, BLOCK=n, target="cuda") for n in (1024, 4096)]
    if "matmul" in only:
        for mma in ("0", "1"):  # (tl.dot on wmma, then on mma.sync)
            os.environ["EMBER_TILE_MMA"] = mma
            built += [matmul_kernel.compile(m16, m16, m16, 64, 64, 64, 64, 1, 64, 1, 64, 1, BM=bm, BN=bn, BK=bk,
                                            GROUP=8, num_warps=w, num_stages=st, target="cuda")
                      for bm, bn, bk, w, st in GPU_MATMUL_CONFIGS]
        os.environ.pop("EMBER_TILE_MMA")
    if "attention" in only:
        built.append(attention_kernel.compile(m16, m16, m16, m16, 64, 0.125, D=64, BM=64, BN=64, target="cuda"))
    print(f"no GPU here: compiled {len(built)} kernels for {built[0].cfunc.arch} with NVRTC; the timings need a GPU")
    for c in built:
        print(f"  {c.name}: {describe(c)}")


def describe(compiled) -> str:
    """What the CUDA C of a tile kernel does per block: its threads, registers a thread (from the
    cubin), shared memory, and the barriers, Tensor Core calls, 16-byte copies (plain, or
    cp.async: num_stages) and pair stores (two elements of an accumulator's row, ember.cuda.vectors)
    in its source."""
    from ember.cuda.limits import cubin_registers
    from ember.cuda.vectors import PAIRS

    launcher = compiled.cfunc
    src = compiled.source.split("_body(", 1)[1]  # (the kernel, not the helpers' definitions)
    mma = sum(src.count(f"ember_wmma_{w}") for w in ("warp_mma_", "mma_", "shared_mma_"))
    mma += src.count("ember_mma_warp_") - src.count("_f32_fill(")  # (mma.sync's steps, not its fragments' zeroing)
    vectors = sum(src.count(f"*reinterpret_cast<{t}*>(") for t in ("uint4", "float4"))
    pairs = sum(src.count(f"*reinterpret_cast<{t}*>(") for t, _ in PAIRS.values())
    return (f"block {'x'.join(map(str, launcher.block))}, {cubin_registers(launcher.binary)} registers, "
            f"{launcher.shared} B shared, {src.count('__syncthreads')} barriers, {mma} Tensor Core calls, "
            f"{vectors} 16-byte stores, {pairs} pair stores and {src.count('cp.async.cg')} cp.async in the source, "
            f"{len(launcher.binary)} B of cubin")


def timed(fn, runs: int) -> float:
    """Median seconds of fn over runs, after a warm-up."""
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def matmul_launch(a, b, c, cfg):
    bm, bn, bk = cfg
    M, K = a.shape
    N = b.shape[1]
    grid = (-(-M // bm) * -(-N // bn),)
    return lambda: matmul_kernel[grid](a, b, c, M, N, K, K, 1, N, 1, N, 1, BM=bm, BN=bn, BK=bk, GROUP=8)


def worker(case: str, peer: str, size: int, runs: int) -> float:
    """Seconds per call of `peer` on `case` (in this process)."""
    rng = np.random.default_rng(0)
    if case == "vadd":
        x, y = rng.random(size, dtype=np.float32), rng.random(size, dtype=np.float32)
        out = np.empty_like(x)
        if peer == "ember":
            return timed(lambda: add_kernel[(-(-size // 4096),)](x, y, out, size, BLOCK=4096), runs)
        return timed(lambda: np.copyto(out, x), runs)
    if case == "softmax":
        x = rng.standard_normal((4096, size), dtype=np.float32)
        out = np.empty_like(x)
        if peer == "ember":
            block = 1 << (size - 1).bit_length()
            return timed(lambda: softmax_kernel[(4096,)](out, x, size, size, size, BLOCK=block), runs)
        import torch

        if peer == "torch":
            t = torch.from_numpy(x)
            return timed(lambda: torch.softmax(t, 1), runs)
        import ember

        model = ember.compile(torch.nn.Softmax(dim=1), (torch.from_numpy(x),))
        return timed(lambda: model(x), runs)
    if case == "matmul":
        a = rng.standard_normal((size, size), dtype=np.float32)
        b = rng.standard_normal((size, size), dtype=np.float32)
        c = np.empty((size, size), np.float32)
        if peer == "numpy":
            return timed(lambda: np.matmul(a, b, out=c), runs)
        best = min(timed(matmul_launch(a, b, c, cfg), max(2, runs // 3)) for cfg in MATMUL_CONFIGS)
        return best
    if case == "attention":
        heads, d = 8, 64
        q, k, v = (rng.standard_normal((heads, size, d), dtype=np.float32) for _ in range(3))
        o = np.empty_like(q)
        if peer == "ember":
            return timed(lambda: attention_kernel[(-(-size // 64), heads)](q, k, v, o, size, d ** -0.5, D=d, BM=64,
                                                                            BN=64), runs)
        import torch

        tq, tk, tv = (torch.from_numpy(t)[None] for t in (q, k, v))
        return timed(lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv), runs)
    raise SystemExit(f"unknown case {case}")


def compile_time(kernel: str) -> float:
    """Seconds of the first launch of kernel (compilation included) in this process, the
    compiler's modules already imported."""
    import ember.triton.compiler  # noqa: F401

    x = np.random.default_rng().random(4096, dtype=np.float32)
    out = np.empty_like(x)
    t = time.perf_counter()
    if kernel == "add":
        add_kernel[(1,)](x, x, out, 4096, BLOCK=4096)
    elif kernel == "softmax":
        softmax_kernel[(1,)](out, x, 4096, 4096, 4096, BLOCK=4096)
    elif kernel == "matmul":
        a = x.reshape(64, 64)
        matmul_launch(a, a, out.reshape(64, 64), (64, 64, 32))()
    else:
        q = x.reshape(64, 64)
        attention_kernel[(1, 1)](q, q, q, out.reshape(64, 64), 64, 0.125, D=64, BM=64, BN=64)
    return time.perf_counter() - t


def spawn(args: list[str], env: dict | None = None) -> float:
    r = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                       env={**os.environ, **(env or {})}, timeout=1200)
    if r.returncode:
        raise SystemExit(f"{args}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def compare(case: str, peers: list[str], size: int, rounds: int, runs: int) -> dict[str, float]:
    times: dict[str, list[float]] = {p: [] for p in peers}
    for r in range(rounds):
        for p in peers if r % 2 == 0 else reversed(peers):
            times[p].append(spawn(["--worker", case, p, str(size), str(runs)]))
    return {p: statistics.median(t) for p, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=["vadd", "softmax", "matmul", "attention", "compile"])
    ap.add_argument("--worker", nargs=4, metavar=("CASE", "PEER", "SIZE", "RUNS"))
    ap.add_argument("--compile", metavar="KERNEL")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--reps", type=int, default=50, help="launches timed per figure on the GPU")
    args = ap.parse_args()
    if args.device == "cuda":
        gpu_main(args)
        return
    if args.worker:
        case, peer, size, runs = args.worker
        print(json.dumps(worker(case, peer, int(size), int(runs))))
        return
    if args.compile:
        print(json.dumps(compile_time(args.compile)))
        return
    print(f"ember.triton on {os.cpu_count()} cores; medians of {args.rounds} rounds, each peer in its own process")
    if "vadd" in args.only:
        n = 1 << 24
        t = compare("vadd", ["ember", "copy"], n, args.rounds, 20)
        add, copy = 12 * n / t["ember"] / 1e9, 8 * n / t["copy"] / 1e9
        print(f"vector add {n}: {add:.1f} GB/s, copy {copy:.1f} GB/s, ratio {add / copy:.2f}")
    if "softmax" in args.only:
        for n in (256, 1024, 4096):
            t = compare("softmax", ["ember", "torch", "ember_op"], n, args.rounds, 10)
            print(f"softmax (4096, {n}): ember.triton {t['ember'] * 1e3:.2f} ms, torch {t['torch'] * 1e3:.2f} ms "
                  f"(x{t['torch'] / t['ember']:.2f}), ember operator {t['ember_op'] * 1e3:.2f} ms "
                  f"(x{t['ember_op'] / t['ember']:.2f})")
    if "matmul" in args.only:
        for n in (512, 1024, 2048):
            t = compare("matmul", ["ember", "numpy"], n, args.rounds, 6 if n < 2048 else 3)
            g = {p: 2 * n ** 3 / s / 1e9 for p, s in t.items()}
            print(f"matmul {n}: ember.triton {g['ember']:.1f} GFLOP/s, numpy {g['numpy']:.1f} GFLOP/s, "
                  f"ratio {g['ember'] / g['numpy']:.2f}")
    if "attention" in args.only:
        for s in (512, 2048):
            t = compare("attention", ["ember", "torch"], s, args.rounds, 5)
            print(f"attention (8 heads, {s}, 64): ember.triton {t['ember'] * 1e3:.2f} ms, torch sdpa "
                  f"{t['torch'] * 1e3:.2f} ms (x{t['torch'] / t['ember']:.2f})")
    if "compile" in args.only:
        for kernel in ("add", "softmax", "matmul", "attention"):
            with tempfile.TemporaryDirectory() as cache:
                cold = spawn(["--compile", kernel], {"EMBER_CACHE_DIR": cache})
                cached = spawn(["--compile", kernel], {"EMBER_CACHE_DIR": cache})
            print(f"compile {kernel}: cold {cold:.2f} s, cached (new process) {cached * 1e3:.1f} ms")


if __name__ == "__main__":
    main()

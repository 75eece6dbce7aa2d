"""bf16 and int8 GEMM on the CPU's matrix units (`python benchmarks/gemm.py --dtype bf16 | int8`):
ember's tiled GEMM on the best unit this machine has (ember.intrinsics.tiles: AMX, else
AVX512-BF16's vdpbf16ps for bf16; AMX, else AVX512-VNNI's vpdpbusd for int8, ember.intrinsics.avx512;
the VNNI GEMM of ember.intrinsics.vnni, one vpdpbusd per call, is shown next to it) against
the unit's peak measured in the same run by a throughput loop (independent chains of the unit's
instruction in every thread: vdpbf16ps, vpdpbusd, or AMX's tile product), torch's matmul in
bf16 (int8: torch has no CPU int8 matmul that uses the unit; its int32 matmul is shown) and
NumPy's fp32 BLAS (in a process of its own, its BLAS given the same number of threads). Square
sizes; weights packed beforehand (as a compiled model packs them at compile time), a already in
the unit's input type; GFLOP/s (GOP/s) as 2 n^3 / median time.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time

import numpy as np

# independent accumulators of the throughput loop: their best (how many keep the pipes full
# depends on the core: latency times throughput, and what the front end makes of the loop)
PEAK_CHAINS = (8, 12, 16, 24)

PEAK_C = r"""#include <immintrin.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>
#define CHAINS %(chains)d

__attribute__((target("avx512f,avx512bf16")))
float ember_peak_vdpbf16ps(int64_t iters) {
  __m512 c[CHAINS];
  for (int i = 0; i < CHAINS; ++i) c[i] = _mm512_setzero_ps();
  __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x3c003c00);
  for (int64_t n = 0; n < iters; ++n)
    for (int i = 0; i < CHAINS; ++i) c[i] = _mm512_dpbf16_ps(c[i], a, b);
  float s = 0;
  for (int i = 0; i < CHAINS; ++i) s += _mm512_reduce_add_ps(c[i]);
  return s;
}

__attribute__((target("avx512f,avx512vnni")))
float ember_peak_vpdpbusd(int64_t iters) {
  __m512i c[CHAINS];
  for (int i = 0; i < CHAINS; ++i) c[i] = _mm512_setzero_si512();
  __m512i a = _mm512_set1_epi32(0x01010101), b = _mm512_set1_epi32(0x01010101);
  for (int64_t n = 0; n < iters; ++n)
    for (int i = 0; i < CHAINS; ++i) c[i] = _mm512_dpbusd_epi32(c[i], a, b);
  int32_t s = 0;
  for (int i = 0; i < CHAINS; ++i) s += _mm512_reduce_add_epi32(c[i]);
  return (float)s;
}

/* AMX: 4 accumulator tiles, each tile product 16 x 16 x 32 bf16 (or 16 x 16 x 64 int8) */
__attribute__((target("amx-tile,amx-bf16,amx-int8")))
float ember_peak_amx(int64_t iters, int int8) {
  if (syscall(SYS_arch_prctl, 0x1023, 18)) return -1;
  struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } cfg = {1};
  for (int t = 0; t < 8; ++t) { cfg.colsb[t] = 64; cfg.rows[t] = 16; }
  _tile_loadconfig(&cfg);
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); _tile_zero(4); _tile_zero(5); _tile_zero(6);
  _tile_zero(7);
  for (int64_t n = 0; n < iters; ++n) {
    if (int8) {
      _tile_dpbusd(0, 4, 6); _tile_dpbusd(1, 4, 7); _tile_dpbusd(2, 5, 6); _tile_dpbusd(3, 5, 7);
    } else {
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_release();
  return 0;
}

/* fp32 FMA in vectors of the target's width (GNU C contracts c * a + b into one FMA) */
typedef float ember_peak_vf __attribute__((vector_size(%(vector_bytes)d)));
float ember_peak_fma(int64_t iters) {
  ember_peak_vf c[CHAINS], a = (ember_peak_vf){} + 0.999f, b = (ember_peak_vf){} + 1e-3f;
  for (int i = 0; i < CHAINS; ++i) c[i] = (ember_peak_vf){} + (float)i;
  for (int64_t n = 0; n < iters; ++n)
    for (int i = 0; i < CHAINS; ++i) c[i] = c[i] * a + b;
  float s = 0;
  for (int i = 0; i < CHAINS; ++i) s += c[i][0];
  return s;
}

float ember_peak_run(int which, int64_t iters, int threads) {
  float s = 0;
  #pragma omp parallel num_threads(threads) reduction(+:s)
  s += which == 0 ? ember_peak_vdpbf16ps(iters) : which == 1 ? ember_peak_vpdpbusd(iters)
       : which == 4 ? ember_peak_fma(iters) : ember_peak_amx(iters, which == 3);
  return s;
}
"""
# operations per instruction (AMX: per iteration, 4 tile products; fp32 FMA: 2 a lane, see measure_peak)
PEAK_OPS = {0: 16 * 2 * 2, 1: 16 * 4 * 2, 2: 4 * 16 * 16 * 32 * 2, 3: 4 * 16 * 16 * 64 * 2, 4: 2}
PEAK_NAMES = {0: "vdpbf16ps", 1: "vpdpbusd", 2: "AMX tdpbf16ps", 3: "AMX tdpbusd", 4: "fp32 FMA"}
FP32_FMA = 4  # measure_peak's fp32 FMA, in vectors of the target's width


def measure_peak(which: int, threads: int, cpu_time: bool, repeat: int = 10) -> float:
    """GFLOP/s (GOP/s) of the unit's instruction in `threads` threads: the best of `repeat` runs of
    each number of chains (with cpu_time, one thread timed by its own CPU time)."""
    from ember.runtime.build import build_library
    from ember.target import Target

    here, best = Target(), 0.0
    lanes = here.lanes("float32") if which == FP32_FMA else 1
    for chains in PEAK_CHAINS if which in (0, 1, FP32_FMA) else (1,):
        lib = ctypes.CDLL(str(build_library(PEAK_C % {"chains": chains, "vector_bytes": 4 * here.lanes("float32")},
                                            cc=here.cc, cflags=here.cflags)))
        run = lib.ember_peak_run
        run.argtypes, run.restype = [ctypes.c_int, ctypes.c_int64, ctypes.c_int], ctypes.c_float
        # (short runs, many: on a shared machine the best finds the cores free; in several threads 20
        # times longer, since the clock then counts waking the threads, whole time slices where the
        # machine is loaded)
        iters = (5_000 if which in (2, 3) else 50_000) * (20 if threads > 1 else 1)
        ops = PEAK_OPS[which] * lanes * (1 if which in (2, 3) else chains) * iters * threads
        clock = time.thread_time if cpu_time else time.perf_counter
        for _ in range(repeat):
            start = clock()
            if run(which, iters, threads) < 0:
                return float("nan")  # Linux refused the tile state
            best = max(best, ops / (clock() - start) / 1e9)
    return best


NUMPY_TIMER = """import sys, time, numpy as np
n, repeat, clock = int(sys.argv[1]), int(sys.argv[2]), getattr(time, sys.argv[3])
a, b = np.random.rand(n, n).astype("float32"), np.random.rand(n, n).astype("float32")
ts = []
for i in range(repeat + 2):
    start = clock()
    a @ b
    ts.append(clock() - start)
print(float(np.median(ts[2:])))
"""


def numpy_seconds(n: int, threads: int, repeat: int, cpu_time: bool) -> float:
    """The median time of NumPy's fp32 (n, n) matmul in a process of its own whose BLAS runs
    `threads` threads (its thread count is read when the BLAS loads, already done in this one);
    with cpu_time (one thread), timed by that thread's CPU time."""
    env = {**os.environ, **{v: str(threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}}
    clock = "thread_time" if cpu_time else "perf_counter"
    out = subprocess.run([sys.executable, "-c", NUMPY_TIMER, str(n), str(repeat), clock], env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(out)


def run(dtype: str, sizes: list[int], threads: int, repeat: int, cpu_times=None) -> None:
    """With `cpu_times(f, inputs, repeat)` (one thread), each run timed by its thread's CPU time."""
    import ember
    from ember.intrinsics import amx, avx512, cpu_has, tiles, vnni
    from ember.tir import dtype as dt

    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        torch = None
    has_amx = cpu_has("amx_bf16" if dtype == "bf16" else "amx_int8")
    needs = "avx512_bf16" if dtype == "bf16" else "avx512_vnni"
    if not (has_amx or cpu_has(needs)):
        sys.exit(f"skipped: this CPU has neither AMX nor {needs} (/proc/cpuinfo)")
    which = {"bf16": 0, "int8": 1}[dtype] + (2 if has_amx else 0)
    unit = amx.UNITS["bf16" if dtype == "bf16" else "u8s8"] if has_amx else avx512.UNITS["bf16" if dtype == "bf16"
                                                                                        else "u8s8"]
    peak = measure_peak(which, threads, cpu_times is not None)
    ops = "GOP/s" if dtype == "int8" else "GFLOP/s"
    clock = "thread CPU time" if cpu_times is not None else "wall clock"
    print(f"{dtype} GEMM on {unit.name} ({PEAK_NAMES[which]}), {threads} thread(s), {clock}, median of {repeat} runs; "
          f"the instruction's peak: {peak:.1f} {ops}", file=sys.stderr)
    peer = "torch bf16" if dtype == "bf16" else "torch int32"
    vnni_col = f" {'vnni.gemm':>10}" if dtype == "int8" else ""
    # (next to the median, ember's fastest run: on a shared machine a parallel run whose thread lost
    # its core waits for it, and the median then measures the neighbours; the peak is a best too)
    print(f"{'size':>6} {'ember ' + ops:>16} {'% of peak':>10} {'best':>8} {'%':>6}{vnni_col} {peer:>12} "
          f"{'NumPy fp32':>11} {'ember/torch':>12}")
    rng = np.random.default_rng(0)
    for n in sizes:
        g = unit.group
        if dtype == "bf16":
            a = rng.standard_normal((n, n)).astype(dt.to_numpy("bfloat16"))
            b = rng.standard_normal((n, n)).astype(dt.to_numpy("bfloat16"))
            ref, tol = a.astype(np.float32) @ b.astype(np.float32), 1e-4 * np.sqrt(n)
            ta, tb = (torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) for x in (a, b)) if torch else (0, 0)
        else:
            a = rng.integers(0, 256, (n, n), dtype=np.uint8)
            b = rng.integers(-128, 128, (n, n), dtype=np.int8)
            ref, tol = a.astype(np.int32) @ b.astype(np.int32), 0
            ta, tb = (torch.from_numpy(a.astype(np.int32)), torch.from_numpy(b.astype(np.int32))) if torch else (0, 0)
        inputs = (a.reshape(n, n // g, g), tiles.pack(b, g), np.zeros((n, n // 16, 16), unit.acc_dtype))
        f = ember.build(*tiles.gemm(unit, n, n, n), target="c", num_threads=threads)
        f(*inputs)
        np.testing.assert_allclose(inputs[2].reshape(n, n), ref, rtol=1e-5, atol=tol)
        rate = lambda t, n=n: 2.0 * n**3 / t / 1e9  # noqa: E731

        def times(g, *args, repeat=repeat):
            return ember.bench(g, *args, repeat=repeat).times if cpu_times is None else cpu_times(g, args, repeat)

        def median(g, *args, repeat=repeat):
            return float(np.median(times(g, *args, repeat=repeat)))

        runs = times(f, *inputs)
        t_ember, t_best = float(np.median(runs)), min(runs)
        vnni_rate = ""
        if dtype == "int8":  # the VNNI GEMM of one vpdpbusd per call, its accumulators in memory
            f8 = ember.build(*vnni.gemm(n, n, n), target="c", num_threads=threads)
            vnni_rate = f" {rate(median(f8, a, inputs[1], inputs[2])):10.1f}"
        t_np = numpy_seconds(n, threads, repeat, cpu_times is not None)
        t_torch = median(torch.matmul, ta, tb, repeat=repeat if dtype == "bf16" else 3) if torch else float("nan")
        print(f"{n:>6} {rate(t_ember):16.1f} {100 * rate(t_ember) / peak:9.0f}% {rate(t_best):8.1f} "
              f"{100 * rate(t_best) / peak:5.0f}%{vnni_rate} {rate(t_torch):12.1f} {rate(t_np):11.1f} "
              f"{t_torch / t_ember:12.2f}")

"""ember.triton's matmul on the GPU: tl.dot on mma.sync and on wmma, checked, then timed beside
Triton and cuBLAS in the same run (the `tilemm` step of benchmarks/gpu_checks.sh, under 90 s).

    python benchmarks/tile_matmul.py [--size 4096] [--reps 20]

1. Checks first, a line each, right or WRONG: every configuration (block shape x warps x stages)
   on each lowering of tl.dot (LOWERINGS: "mma", mma.sync through ldmatrix from swizzled tiles and
   c stored from the lanes' fragments, the default; "mma block", the same with c through a float
   block in shared memory, EMBER_TILE_FRAGMENT_STORES=0, the epilogue before; "wmma",
   EMBER_TILE_MMA=0, wmma from padded tiles), fp16 and bf16 at an odd size (masks on every edge),
   against torch's product in float32.
2. Then each configuration on each lowering at size^3 fp16 (its output checked too), next to
   the same kernel's source compiled by Triton at the tutorial's autotuning configurations (its best
   is what `@triton.autotune` would keep) and torch.matmul (cuBLAS): TFLOP/s, % of Triton's best,
   and the best of each, and the fragment stores' speed-up over the block at each configuration.
   Where mma prints WRONG and mma block right, EMBER_TILE_FRAGMENT_STORES=0 is the fallback;
   where both are WRONG and wmma right, EMBER_TILE_MMA=0.

The kernels are compiled before anything runs, in parallel processes (ember's disk caches keep
them for the launches). Without a GPU every configuration is compiled for sm_90 (NVRTC) and
described (registers, shared memory, barriers, cp.async), and the timings are said to need one.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.cuda_timing import timed  # noqa: E402 (CUDA events after a warm-up)
from benchmarks.tile import describe, matmul_kernel, triton_twins  # noqa: E402 (the kernel Triton compiles too)

# (BM, BN, BK, warps, stages): Triton's usual shapes for fp16 on Hopper-class GPUs without wgmma
CONFIGS = [(128, 128, 32, 8, 3), (128, 128, 32, 4, 4), (128, 128, 64, 8, 3), (128, 256, 32, 8, 3),
           (128, 256, 64, 8, 3), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (256, 128, 32, 8, 3)]
# the tutorial's autotuning configurations for fp16 on CUDA (triton/python/tutorials/03-matrix-multiplication.py)
# but its two of 2 warps (never the best at 4096^3; each Triton build is seconds of the step's 60)
TRITON_CONFIGS = [(128, 256, 64, 8, 3), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4),
                  (64, 128, 32, 4, 4), (128, 32, 32, 4, 4)]
# each lowering of tl.dot: its name, the options it sets
LOWERINGS = {"mma": {"EMBER_TILE_MMA": "1", "EMBER_TILE_FRAGMENT_STORES": "1"},
             "mma block": {"EMBER_TILE_MMA": "1", "EMBER_TILE_FRAGMENT_STORES": "0"},
             "wmma": {"EMBER_TILE_MMA": "0", "EMBER_TILE_FRAGMENT_STORES": "1"}}
ODD = (300, 259, 200)  # M, N, K of the checks: no block divides them; rows of c at odd offsets every other row
DTYPES = ("float16", "bfloat16")


def _launch(a, b, c, cfg):
    """The launch of matmul_kernel on (M, K) a, (K, N) b into c (any arrays of one kind)."""
    bm, bn, bk, warps, stages = cfg
    (M, K), N = a.shape, b.shape[1]
    grid = (-(-M // bm) * -(-N // bn),)
    return matmul_kernel[grid](a, b, c, M, N, K, K, 1, N, 1, N, 1, BM=bm, BN=bn, BK=bk, GROUP=8,
                               num_warps=warps, num_stages=stages)


def _compile(job) -> str:
    """Compile one (config, lowering, dtype, size) for the GPU (target "cuda", arrays on the host:
    the specialization a launch on the GPU will look up); its description, or the error."""
    cfg, lowering, dtype, (M, N, K) = job
    os.environ.update(LOWERINGS[lowering])
    dt = np.dtype("float16") if dtype == "float16" else _bf16()
    a, b, c = np.zeros((M, K), dt), np.zeros((K, N), dt), np.zeros((M, N), dt)
    bm, bn, bk, warps, stages = cfg
    try:
        compiled = matmul_kernel.compile(a, b, c, M, N, K, K, 1, N, 1, N, 1, BM=bm, BN=bn, BK=bk, GROUP=8,
                                         num_warps=warps, num_stages=stages, target="cuda")
    except Exception as e:  # noqa: BLE001 (one configuration that fails to build is reported, not fatal)
        return f"failed to build: {type(e).__name__}: {str(e)[:200]}"
    return describe(compiled)


def _bf16():
    from ember.tir.dtype import to_numpy

    return to_numpy("bfloat16")


def _name(cfg) -> str:
    bm, bn, bk, warps, stages = cfg
    return f"{bm}x{bn}x{bk} w{warps} s{stages}"


def compile_all(configs: list, size: int, checks: bool) -> dict:
    """Every kernel the run launches (`checks`: those of the odd size too), built in parallel
    processes: {(cfg, lowering, dtype, shape): its description}."""
    cases = [*(((d, ODD) for d in DTYPES) if checks else ()), ("float16", (size, size, size))]
    jobs = [(cfg, lowering, dtype, shape) for cfg in configs for lowering in LOWERINGS for dtype, shape in cases]
    spawn = multiprocessing.get_context("spawn")  # (nothing of this process's CUDA state in the workers)
    with ProcessPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1), mp_context=spawn) as pool:
        return dict(zip(jobs, pool.map(_compile, jobs)))


def check(torch, cfg, lowering: str, dtype: str) -> str:
    """right or WRONG (with the error) for one configuration and lowering at the odd size."""
    os.environ.update(LOWERINGS[lowering])
    M, N, K = ODD
    g = torch.Generator(device="cuda").manual_seed(1)
    t = getattr(torch, dtype)
    a, b = torch.randn(M, K, device="cuda", generator=g).to(t), torch.randn(K, N, device="cuda", generator=g).to(t)
    c = torch.empty(M, N, device="cuda", dtype=t)
    try:
        _launch(a, b, c, cfg)
        want = a.float() @ b.float()
        err = ((c.float() - want).norm() / want.norm()).item()
    except Exception as e:  # noqa: BLE001 (reported, the other configurations still run)
        return f"WRONG ({type(e).__name__}: {str(e)[:160]})"
    return f"right (error {err:.1e})" if err < 1e-2 else f"WRONG (relative error {err:.2e})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--first", type=int, default=len(CONFIGS), help="only the first N of ember's configurations")
    args = ap.parse_args()
    configs = CONFIGS[:args.first]
    import torch

    gpu = torch.cuda.is_available()
    built = compile_all(configs, args.size, checks=gpu)
    if not gpu:
        print("no GPU here: the kernels compiled for sm_90 with NVRTC (the timings need a GPU):")
        for (cfg, lowering, _, _), text in built.items():
            print(f"  {_name(cfg)} {lowering}: {text}")
        return
    print(f"ember.triton matmul on {torch.cuda.get_device_name()}; checks at {'x'.join(map(str, ODD))} (M, N, K) "
          "against torch in float32 (relative error, at most 1e-2):")
    ok: dict[tuple, bool] = {}
    for cfg in configs:
        for lowering in LOWERINGS:
            results = {d: check(torch, cfg, lowering, d) for d in DTYPES}
            ok[cfg, lowering] = all(r.startswith("right") for r in results.values())
            print(f"  {_name(cfg)} {lowering}: " + ", ".join(f"{d} {r}" for d, r in results.items()))
    n = args.size
    g = torch.Generator(device="cuda").manual_seed(0)
    a, b = (torch.randn(n, n, device="cuda", generator=g).half() for _ in range(2))
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    tflops = lambda s: 2 * n ** 3 / s / 1e12  # noqa: E731
    cublas = tflops(timed(lambda: torch.matmul(a, b, out=c), args.reps))
    print(f"{n}^3 float16: cuBLAS (torch.matmul) {cublas:.1f} TFLOP/s; ember's configurations first (a step cut "
          "short keeps them), then Triton's:")
    kernel = {(cfg, lowering): text for (cfg, lowering, _, shape), text in built.items() if shape == (n, n, n)}
    ember = time_ember(configs, a, b, c, tflops, args.reps, lambda v, cfg, lowering: print(
        f"  ember {_name(cfg)} {lowering}: {v:.1f} TFLOP/s, {100 * v / cublas:.0f}% of cuBLAS"
        f"{'' if ok[cfg, lowering] else ' (WRONG at the odd size)'}; {kernel[cfg, lowering]}"))
    triton = time_triton(a, b, c, tflops, args.reps)
    best_triton = max(triton.values(), default=0.0)
    for cfg, v in triton.items():
        print(f"  triton {_name(cfg)}: {v:.1f} TFLOP/s, {100 * v / cublas:.0f}% of cuBLAS")
    if triton:
        print(f"Triton's best of the tutorial's configurations (what its autotuner keeps): {best_triton:.1f} TFLOP/s "
              f"({_name(max(triton, key=triton.get))}); ember's % of it: " + ", ".join(
                  f"{_name(cfg)} {lowering} {100 * v / best_triton:.0f}%" for v, cfg, lowering in ember))
    best: dict[str, tuple[float, tuple]] = {}
    for v, cfg, lowering in ember:
        if ok[cfg, lowering] and v > best.get(lowering, (0.0, None))[0]:
            best[lowering] = (v, cfg)
    _default()
    for lowering, (v, cfg) in best.items():
        share = f" = {100 * v / best_triton:.0f}% of Triton's best" if best_triton else ""
        print(f"best ember {lowering}: {v:.1f} TFLOP/s ({_name(cfg)}){share}, {100 * v / cublas:.0f}% of cuBLAS")
    timed_at = {(cfg, lowering): v for v, cfg, lowering in ember}
    gains = [f"{_name(cfg)} x{timed_at[cfg, 'mma'] / timed_at[cfg, 'mma block']:.2f}" for cfg in configs
             if (cfg, "mma") in timed_at and (cfg, "mma block") in timed_at]
    if gains:
        print("c stored from the fragments over the float block (mma over mma block): " + ", ".join(gains))
    for lowering, fallback in (("mma", "EMBER_TILE_FRAGMENT_STORES=0 (mma block)"), ("mma block",
                                                                                     "EMBER_TILE_MMA=0 (wmma)")):
        wrong = [_name(cfg) for (cfg, name), right in ok.items() if name == lowering and not right]
        if wrong:
            print(f"{lowering} WRONG at {', '.join(wrong)}: set {fallback} until it is fixed")
    if len(best) == len(LOWERINGS):
        faster = max(best, key=lambda k: best[k][0])
        options = " ".join(f"{k}={v}" for k, v in LOWERINGS[faster].items())
        print(f"the faster lowering of tl.dot: {faster} (x{best['mma'][0] / best['wmma'][0]:.2f} mma over wmma); "
              f"{'keep the default' if faster == 'mma' else f'consider {options} as the default'}")


def time_ember(configs, a, b, c, tflops, reps: int, report) -> list[tuple[float, tuple, str]]:
    """(TFLOP/s, config, lowering) of each configuration on each lowering whose output at this size is
    right, each reported as it is measured (a WRONG or failing one is printed and left out)."""
    n = a.shape[0]
    want = a.float() @ b.float()
    out = []
    for cfg in configs:
        for lowering in LOWERINGS:
            os.environ.update(LOWERINGS[lowering])
            try:
                _launch(a, b, c, cfg)
                err = ((c.float() - want).norm() / want.norm()).item()
                if err > 1e-2:
                    print(f"  ember {_name(cfg)} {lowering}: WRONG at {n}^3 (relative error {err:.2e})")
                    continue
                out.append((tflops(timed(lambda cfg=cfg: _launch(a, b, c, cfg), reps)), cfg, lowering))
                report(*out[-1])
            except Exception as e:  # noqa: BLE001 (reported, the others still run)
                print(f"  ember {_name(cfg)} {lowering}: failed: {type(e).__name__}: {str(e)[:160]}")
    _default()
    return out


def time_triton(a, b, c, tflops, reps: int) -> dict[tuple, float]:
    """{config: TFLOP/s} of the same kernel compiled by Triton at the tutorial's configurations ({}
    where Triton is not installed)."""
    twins, out = triton_twins(), {}
    n = a.shape[0]
    for cfg in TRITON_CONFIGS if twins else ():
        bm, bn, bk, warps, stages = cfg
        run = lambda bm=bm, bn=bn, bk=bk, w=warps, s=stages: twins.matmul_kernel[  # noqa: E731
            (-(-n // bm) * -(-n // bn),)](a, b, c, n, n, n, n, 1, n, 1, n, 1, BM=bm, BN=bn, BK=bk, GROUP=8,
                                          num_warps=w, num_stages=s)
        try:
            out[cfg] = tflops(timed(run, reps))
        except Exception as e:  # noqa: BLE001 (a config Triton cannot run here is skipped)
            print(f"  triton {_name(cfg)} failed: {type(e).__name__}: {str(e)[:160]}")
    if not twins:
        print("  Triton is not installed")
    return out


def _default() -> None:
    """The options back to their defaults (the lowerings' settings unset)."""
    for name in LOWERINGS["mma"]:
        os.environ.pop(name, None)


if __name__ == "__main__":
    main()

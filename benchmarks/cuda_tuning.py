"""A short tuning run of the fp32 GEMM n^3 on the GPU (`cuda_kernels.py --tune TRIALS`): ember.tune's
GPU sketch (block and thread tiles, K panels, pipeline depth, unrolling; gpu_space.gemm_rules)
searched from the GPU family's default schedule (ember.schedules.gpu.matmul's TILES, vector 4,
two stages: the baseline, told to the search first), candidates built in parallel by compiler
processes and timed one at a time with CUDA events by one device process (ember.tune.gpu_measure).
Prints the curve (trials, best ms, TFLOP/s, seconds since the start), the invalid candidates and
why, where the time went (search, builds, runs, cost model), and the best against the default,
the best hand-picked tiling of `cuda_kernels.py --parts gemm` (128 x 128 x 16, 8 x 8 a thread,
re-measured in the same runner) and cuBLAS fp32 (TF32 off) in the same run.
"""

from __future__ import annotations

import os
import time

from benchmarks.cuda_timing import timed

BATCH = 16  # candidates a round: the cost model retrains between rounds
TOP = 6  # the fastest candidates printed with their decisions
HAND_PICKED = {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8}


def tuning(n: int, trials: int, runs: int) -> None:
    import torch

    from ember import te
    from ember.schedules.gpu.matmul import TILES
    from ember.target import Target
    from ember.tune import GPURunner, MeasureInput, Task, task_from_tensors
    from ember.tune.gpu_space import gemm_candidate
    from ember.tune.tuner import REMEASURE_REPEATS, TaskTuner

    started = time.perf_counter()
    A, B = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    plain = task_from_tensors([A, B, C], f"gemm{n}")
    target = Target("cuda")
    default = gemm_candidate(plain, target, **TILES, stages=2)
    task = Task(plain.name, plain.func, default_trace=default.trace)
    tflop = 2 * n**3 / 1e12
    builders = max(1, (os.cpu_count() or 2) - 1)
    with GPURunner(workers=builders) as runner:
        tuner = TaskTuner(task, runner=runner, target=target)
        default_s = tuner.measure_default()
        print(f"\ntuning fp32 GEMM {n}^3, {trials} trials in rounds of {BATCH}, {builders} compiler processes; "
              f"the default schedule {_tiles(TILES)}: {default_s * 1e3:.3f} ms ({tflop / default_s:.1f} TFLOP/s), "
              f"measured {time.perf_counter() - started:.1f} s after the start (processes, context, reference)")
        print(f"{'trials':>7} {'best ms':>9} {'TFLOP/s':>8} {'elapsed s':>10} {'invalid':>8}")
        while tuner.trials < trials:
            failed = sum(tuner.failures.values())
            if not tuner.step(min(BATCH, trials - tuner.trials)):
                break
            measured, best, _ = tuner.history[-1]
            print(f"{measured:7d} {best * 1e3:9.3f} {tflop / best:8.1f} {time.perf_counter() - started:10.1f} "
                  f"{sum(tuner.failures.values()) - failed:8d}", flush=True)
        result = tuner.result()
        hand = gemm_candidate(plain, target, **HAND_PICKED, stages=2)
        [hand_result] = runner.measure([MeasureInput(task, hand.trace)], repeats=REMEASURE_REPEATS)
    elapsed = time.perf_counter() - started
    failures = "; ".join(f"{count} x {error.splitlines()[0][:120]}" for error, count in tuner.failures.most_common(3))
    print(f"invalid candidates: {sum(tuner.failures.values())} of {tuner.trials} ({failures or 'none'})")
    print(f"time: {elapsed:.1f} s in all; {tuner.time}")
    torch.backends.cuda.matmul.allow_tf32 = False
    a, b, c = (torch.randn(n, n, device="cuda") for _ in range(3))
    cublas = timed(lambda: torch.matmul(a, b, out=c), runs)
    best = result.latency_s
    print(f"best {best * 1e3:.3f} ms ({tflop / best:.1f} TFLOP/s): {tuner.baseline_s / best:.2f}x the default "
          f"schedule ({tuner.baseline_s * 1e3:.3f} ms), {hand_result.median_s / best:.2f}x {_tiles(HAND_PICKED)} "
          f"({hand_result.median_s * 1e3:.3f} ms{'' if hand_result.ok else ': ' + str(hand_result.error)[:100]}), "
          f"{cublas / best:.0%} of cuBLAS fp32 ({cublas * 1e3:.3f} ms, {tflop / cublas:.1f} TFLOP/s)")
    print(f"its decisions (BM, BN, BK, TM, TN, stages, group, unroll): {_decisions(result.trace)}; "
          f"the fastest measured:")
    for latency, candidate in tuner.search.best[:TOP]:
        print(f"  {latency * 1e3:7.3f} ms {tflop / latency:6.1f} TFLOP/s  {_decisions(candidate.sch.trace)}")


def _decisions(trace) -> list[int]:
    return [dict(i.attrs)["candidates"][dict(i.attrs)["decision"]] for i in trace if i.kind == "sample_categorical"]


def _tiles(t: dict) -> str:
    return f"{t['BM']}x{t['BN']}x{t['BK']}, {t['TM']}x{t['TN']}/thr x4 s2"

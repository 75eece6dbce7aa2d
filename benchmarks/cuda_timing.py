"""Timing and building of the CUDA benchmarks' kernels (benchmarks/cuda_kernels.py and the
benchmarks that compare models on a GPU): medians of CUDA-event intervals after a warm-up."""

from __future__ import annotations

import statistics
import time


def timed(fn, runs: int) -> float:
    """Median seconds of fn() between CUDA events, after warm-up calls for at least 50 ms (with 3
    warm-up calls, two runs on H200s measured one elementwise kernel at 0.086 and 0.128 ms: a
    freshly started GPU may not be at its clocks yet)."""
    import torch

    start = time.perf_counter()
    while time.perf_counter() - start < 0.05:
        fn()
        torch.cuda.synchronize()
    return _between_events(fn, runs)


def _between_events(fn, runs: int, hold: int = 0) -> float:
    """Median seconds between CUDA events recorded around fn() over `runs` calls, the stream held
    for `hold` cycles before each first (torch.cuda._sleep) where `hold` is not 0."""
    import torch

    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if hold:
            torch.cuda._sleep(hold)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def graph_time(call, runs: int, launches: int = 20) -> float | None:
    """Seconds a launch of `call` takes replayed from a CUDA graph of `launches` of them (the GPU's
    time alone), or None where the capture fails (printed)."""
    import torch

    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            call()  # (warm: nothing loaded or allocated during the capture)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(launches):
                call()
        return timed(graph.replay, runs) / launches
    except Exception as e:  # a capture the launch path does not allow: the call's time stands alone
        print(f"(no CUDA graph: {type(e).__name__}: {str(e).splitlines()[0][:120]})")
        return None


def timed_graph(fn, runs: int, launches: int = 20) -> tuple[float, bool]:
    """(seconds of one fn(), whether from a graph): `graph_time`, else fn timed alone (`timed`)
    where the capture fails. The GPU's time alone where it can: a kernel of tens of microseconds
    launched from Python leaves the GPU idle between the events while the host prepares it."""
    t = graph_time(fn, runs, launches)
    return (t, True) if t is not None else (timed(fn, runs), False)


def held(fn, runs: int, cycles: int = 1 << 21) -> float:
    """Median seconds the GPU spends on fn()'s work: its stream held (torch.cuda._sleep of
    `cycles`, about a millisecond) while the host issues it, so that the interval between the
    events is the GPU's alone, not the host's launches (which `timed` counts where the kernels are
    shorter: a batch-1 layer's). No capture: for calls a torch graph cannot capture (a compiled
    model replaying its own CUDA graph), where `timed_graph` would fall back to `timed`."""
    timed(fn, 3)  # (its warm-up)
    return _between_events(fn, runs, hold=cycles)


def build(make):
    """An ember CUDA kernel of a schedule, and the seconds it took to lower and compile."""
    import ember

    t0 = time.perf_counter()
    s, args = make()
    f = ember.build(s, args, target="cuda")
    return f, time.perf_counter() - t0


def operator_kernel(op: str, shapes, dtype: str, attrs: dict):
    """The CUDA target's default kernel of `op` on inputs of `shapes` and `dtype` (a symbolic size
    by its name), its output types and the seconds it took to schedule and compile."""
    from ember.graph.core import TensorType
    from ember.ops.registry import infer_types
    from ember.schedules.apply import node_kernel
    from ember.target import Target

    types = [TensorType(shape, dtype) for shape in shapes]
    bound, outs = infer_types(op, types, attrs)
    f, build_s = build(lambda: node_kernel(op, types, bound, outs, target=Target("cuda")))
    return f, outs, build_s

"""`triton.testing`: timing and checking kernels as Triton's tutorials do, on ember's own timer.

`do_bench(fn, warmup=25, rep=100, quantiles=None, return_mode="mean")` times `fn()` in
milliseconds like Triton's: one call first (it may compile), then enough calls to fill about
`warmup` ms of warm-up and `rep` ms of measurement, one timing per call (ember.runtime.bench,
the compiler's timer, measures them). In a process that uses a GPU (torch's CUDA initialized)
each timed call waits for the GPU, since a launch returns before its kernel runs: the autotuner
then measures kernels on the GPU, not their launches. `assert_close` compares NumPy arrays, torch tensors or
numbers (Triton's defaults: atol 1e-2, rtol 0). `Benchmark` and `perf_report` run a function over
a grid of sizes and print the table of its results.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from ..runtime.bench import bench

RETURN_MODES = ("min", "max", "mean", "median", "all")


def do_bench(fn: Callable[[], object], warmup: float = 25, rep: float = 100, grad_to_none=None,
             quantiles: Sequence[float] | None = None, return_mode: str = "mean"):
    """The time of one call of `fn` in ms: the `quantiles` of the timings when given (a list),
    else their `return_mode` (min, max, mean, median, or all of them as a list)."""
    if return_mode not in RETURN_MODES:
        raise ConfigError(f"do_bench: return_mode is one of {', '.join(RETURN_MODES)}, got {return_mode!r}")
    fn = _waited(fn)
    fn()
    start = time.perf_counter()
    fn()
    estimate_ms = max((time.perf_counter() - start) * 1e3, 1e-6)
    n_warmup = max(1, int(warmup / estimate_ms))
    n_repeat = max(1, int(rep / estimate_ms))
    times = [t * 1e3 for t in bench(fn, warmup=n_warmup, repeat=n_repeat, number=1).times]
    if quantiles is not None:
        found = np.quantile(np.asarray(times), list(quantiles)).tolist()
        return found[0] if len(found) == 1 else found
    if return_mode == "all":
        return times
    return {"min": min, "max": max, "mean": statistics.fmean, "median": statistics.median}[return_mode](times)


def _waited(fn: Callable[[], object]) -> Callable[[], object]:
    """fn followed by a wait for the GPU where this process uses one (see the module doc)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return fn

    def waited():
        fn()
        torch.cuda.synchronize()

    return waited


def _numpy(value) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        value = value.numpy()
    value = np.asarray(value)
    return value.astype("float32") if value.dtype.name == "bfloat16" else value


def assert_close(x, y, atol: float | None = None, rtol: float | None = None, err_msg: str = "") -> None:
    """x and y agree elementwise: |x - y| <= atol + rtol * |y| (atol 1e-2 and rtol 0 unless given)."""
    atol = 1e-2 if atol is None else atol
    rtol = 0.0 if rtol is None else rtol
    np.testing.assert_allclose(_numpy(x), _numpy(y), atol=atol, rtol=rtol, equal_nan=True, err_msg=err_msg)


@dataclass
class Benchmark:
    """A grid to benchmark over: each value of `x_vals` (named `x_names`) against each line
    (`line_arg` set to each of `line_vals`, shown as `line_names`), with `args` fixed."""

    x_names: list[str]
    x_vals: list
    line_arg: str
    line_vals: list
    line_names: list[str]
    plot_name: str
    args: dict = field(default_factory=dict)
    xlabel: str = ""
    ylabel: str = ""
    x_log: bool = False
    y_log: bool = False
    styles: list | None = None


class Mark:
    """A function under benchmark: `.run(print_data=True)` measures every point of its grids."""

    def __init__(self, fn: Callable, benchmarks: Benchmark | list[Benchmark]):
        self.fn = fn
        self.benchmarks = benchmarks

    def _run(self, bench: Benchmark, print_data: bool) -> list[list]:
        rows = []
        for x in bench.x_vals:
            xs = x if isinstance(x, list | tuple) else [x] * len(bench.x_names)
            point = dict(zip(bench.x_names, xs))
            row = list(xs)
            for line in bench.line_vals:
                result = self.fn(**point, **{bench.line_arg: line}, **bench.args)
                row.append(result[0] if isinstance(result, tuple | list) else result)
            rows.append(row)
        if print_data:
            print(f"{bench.plot_name}:")
            header = [*bench.x_names, *bench.line_names]
            print("  ".join(f"{h:>12}" for h in header))
            for row in rows:
                print("  ".join(f"{v:>12.4g}" if isinstance(v, float) else f"{v!s:>12}" for v in row))
        return rows

    def run(self, show_plots: bool = False, print_data: bool = False, save_path: str | None = None,
            return_df: bool = False, **kwargs):
        benches = self.benchmarks if isinstance(self.benchmarks, list) else [self.benchmarks]
        tables = [self._run(b, print_data) for b in benches]
        if return_df:
            return tables if isinstance(self.benchmarks, list) else tables[0]
        return None


def perf_report(benchmarks: Benchmark | list[Benchmark]) -> Callable[[Callable], Mark]:
    """`@triton.testing.perf_report(Benchmark(...))` on a function that returns a time or a rate."""
    return lambda fn: Mark(fn, benchmarks)

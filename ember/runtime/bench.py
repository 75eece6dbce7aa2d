"""Timing kernels: warm up, choose how many calls one measurement makes, measure several times.

`bench(fn, *args)` times `fn(*args)`. For an object with a `prepare` method (a `Kernel`) it checks
the arguments once and times the launcher that `prepare` returns, so argument checks are not in the
time. Without `number`, the calls per measurement double until one measurement lasts at least
`min_time / repeat` seconds (short kernels are then timed over many calls, above the clock's
resolution). Times are per call, in seconds; the median is the number to compare.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class BenchResult:
    median: float  # seconds per call
    mean: float
    stdev: float
    times: tuple[float, ...]  # seconds per call, one per measurement
    number: int  # calls per measurement

    def __str__(self):
        return (f"median {self.median * 1e3:.4g} ms (mean {self.mean * 1e3:.4g} ms, stdev "
                f"{self.stdev * 1e3:.2g} ms; {len(self.times)} x {self.number} calls)")


def bench(fn, *args, warmup: int = 2, repeat: int = 10, number: int | None = None,
          min_time: float = 0.05) -> BenchResult:
    if repeat < 1 or (number is not None and number < 1):
        raise ConfigError(f"repeat and number must be at least 1, got repeat={repeat}, number={number}")
    run: Callable[[], object] = fn.prepare(*args) if hasattr(fn, "prepare") else (lambda: fn(*args))
    for _ in range(warmup):
        run()
    if number is None:
        number = 1
        while _time(run, number) < min_time / repeat:
            number *= 2
    times = tuple(_time(run, number) / number for _ in range(repeat))
    return BenchResult(
        median=statistics.median(times),
        mean=statistics.fmean(times),
        stdev=statistics.stdev(times) if repeat > 1 else 0.0,
        times=times,
        number=number,
    )


def _time(run: Callable[[], object], number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        run()
    return time.perf_counter() - start

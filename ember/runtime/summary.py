"""What a compiled model is made of: its kernels, their times, and its memory plan.

    cm.profile(x, repeat=10)   # Profile: per-kernel median microseconds, wall and CPU
    print(cm.summary())        # kernels in run order, operators fused into each, times, memory,
                               # and under precision="bf16" the products kept in float32 and why
    cm.memory.peak_bytes, cm.memory.unplanned_bytes

Profiling calls the library's timed twin of the entry function (ember.codegen.entry:
`ember_model_profile`), which reads the wall clock (CLOCK_MONOTONIC) and the calling thread's CPU
clock before the first kernel call and after each one, `repeat` times. A kernel's time in one run
is the sum over its calls (a kernel can serve several nodes); the profile reports its median over
the runs, and its 10th percentile (summed over the kernels, a model's time that other processes on
the cores disturb little: benchmarks/kernel_profile.py). Times include the OpenMP fork and join of
each call, as a normal call pays them.

CPU time (`cpu_us`, the `summary()` column next to wall) is that of the thread that calls the
model (CLOCK_THREAD_CPUTIME_ID): on a machine whose cores other processes share, the wall time
holds the time the thread waited for a core and the CPU time does not. A kernel that runs on the
calling thread (num_threads=1, or a serial kernel) spends all its CPU time there, so with one
thread the column is the kernels' own cost. Of a parallel kernel it is the calling thread's share:
its chunk of the loop and its wait at the barrier (a spin counts, a sleep does not); the OpenMP
workers' time is not in it. On this project's 2-core AMD EPYC under a load average of 12, a small
MLP's kernels took 25-28 ms of wall and 3.7-4.0 ms of CPU at 2 threads (the calling thread
mostly spinning for workers that waited for a core), and at 1 thread 4.6-84 us of wall, within
a microsecond of their CPU. Each CPU interval also holds part of a reading of that clock (a
system call, about 1.2 us there). A library built before ember read the CPU clock has no CPU
times (None).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..codegen.c import kernel_symbol
from ..codegen.entry import PROFILE_CALLS, PROFILE_ENTRY
from ..errors import ArtifactError, ConfigError, ShapeError


@dataclass(frozen=True)
class KernelTime:
    name: str
    calls: int  # calls per run
    median_us: float
    p10_us: float  # the 10th percentile: what a machine loaded by other processes disturbs least
    cpu_us: float | None = None  # median CPU time of the calling thread (module doc); None: not measured


@dataclass(frozen=True)
class Profile:
    """Per-kernel median times (microseconds) over `repeat` runs, kernels in run order, and the
    median of the whole run, wall and CPU."""

    kernels: tuple[KernelTime, ...]
    total_us: float
    repeat: int
    cpu_total_us: float | None = None

    def times(self) -> dict[str, float]:
        """Kernel name -> median microseconds."""
        return {k.name: k.median_us for k in self.kernels}


@dataclass(frozen=True)
class MemoryUsage:
    peak_bytes: int  # the planned workspace
    unplanned_bytes: int  # one buffer per intermediate tensor
    tensors: int  # intermediate tensors in the workspace

    def __str__(self):
        saved = f", {self.peak_bytes / self.unplanned_bytes:.0%} of it" if self.unplanned_bytes else ""
        return (f"workspace {_bytes(self.peak_bytes)} for {self.tensors} intermediate tensors "
                f"(unplanned: {_bytes(self.unplanned_bytes)}{saved})")


def profile(cm, inputs, repeat: int) -> Profile:
    if repeat < 1:
        raise ConfigError(f"repeat must be at least 1, got {repeat}")
    try:
        run = getattr(cm._library, PROFILE_ENTRY)
    except AttributeError:
        raise ArtifactError(f"model '{cm.name}': its library has no profiling entry ({PROFILE_ENTRY}); "
                           f"it was built by an older ember, compile it again") from None
    symbols = call_symbols(cm._library)
    if symbols is None:  # its entry would write a clock per call past a buffer sized for none
        raise ArtifactError(f"model '{cm.name}': its library has no table of its calls ({PROFILE_CALLS}) to "
                            f"profile by; it was built by an older ember, compile it again")
    run.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int, ctypes.c_void_p]
    run.restype = ctypes.c_int
    n = len(symbols)
    ticks = np.full((repeat, 3 * (n + 1)), -1, np.int64)  # the clocks at each boundary (ember.codegen.entry)
    for r in range(repeat):
        _outputs, args, _keep = cm._arguments(inputs)
        rc = run(*args, ticks[r].ctypes.data)
        if rc != 0:
            raise cm.status_error(rc, "profiling entry")
    ended, cpu, started = ticks[:, :n + 1], ticks[:, n + 1:2 * (n + 1)], ticks[:, 2 * (n + 1):]
    if (cpu < 0).any():  # an older library: the wall clock alone, at ticks[:n + 1]
        per_call, per_call_cpu = np.diff(ended, axis=1) / 1e3, None
        total, cpu_total = np.median(ended[:, -1] - ended[:, 0]) / 1e3, None
    else:  # microseconds, runs x calls; the total without the CPU clock's readings between calls
        per_call, per_call_cpu = (ended[:, 1:] - started[:, :-1]) / 1e3, np.diff(cpu, axis=1) / 1e3
        spans = ended[:, -1] - started[:, 0] - (started[:, 1:-1] - ended[:, 1:-1]).sum(axis=1)
        total = np.median(spans) / 1e3 if n else 0.0
        cpu_total = float(np.median(cpu[:, -1] - cpu[:, 0])) / 1e3
    by_symbol = {kernel_symbol(k.name): k.name for k in cm.kernels}
    order: dict[str, list[int]] = {}
    for c, s in enumerate(symbols):
        order.setdefault(by_symbol.get(s, s), []).append(c)
    kernels = tuple(KernelTime(name, len(cs), float(np.median(per_run := per_call[:, cs].sum(axis=1))),
                               float(np.percentile(per_run, 10)),
                               None if per_call_cpu is None else float(np.median(per_call_cpu[:, cs].sum(axis=1))))
                    for name, cs in order.items())
    return Profile(kernels, float(total), repeat, cpu_total)


def call_symbols(library: ctypes.CDLL) -> list[str] | None:
    """The C name of the kernel of each call of the entry function, in order; None for a library
    built by an older ember, without the table."""
    try:
        names = ctypes.cast(ctypes.addressof((ctypes.c_char_p * 0).in_dll(library, PROFILE_CALLS)),
                            ctypes.POINTER(ctypes.c_char_p))
    except ValueError:
        return None
    out = []
    while names[len(out)] is not None:
        out.append(names[len(out)].decode())
    return out


def memory(cm) -> MemoryUsage:
    symbols = cm.plan.symbols
    if symbols:
        if not cm._layouts:
            raise ShapeError(f"model '{cm.name}': the workspace depends on {', '.join(symbols)}; call the model "
                             f"first, or ask cm.plan.layout({{...}}) for given sizes")
        binding = dict(zip(cm.spec.symbols, list(cm._layouts)[-1]))
    else:
        binding = {}
    layout = cm.plan.layout(binding)
    return MemoryUsage(layout.peak_bytes, layout.unplanned_bytes, len(cm.plan.tensors))


def held_bytes(cm) -> int:
    """The bytes of the distinct buffers behind the model's weights and its graph's constants (a
    loaded model's graph only once read): what the model keeps alive of its weights, each buffer
    counted once however many arrays view it."""
    graph = cm._graph if cm._graph is not None and not callable(cm._graph) else None
    arrays = [*cm.weights.values(), *(a for _, a in graph.all_constants())] if graph is not None else \
        list(cm.weights.values())
    buffers = {id(owner): owner for owner in map(buffer_of, arrays)}
    return sum(b.nbytes if isinstance(b, np.ndarray) else memoryview(b).nbytes for b in buffers.values())


def buffer_of(a: np.ndarray):
    """What holds an array's memory: the array that owns it, or the bytes or mapping it views."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a if a.base is None else a.base


def summary(cm) -> str:
    kernels = cm.kernels
    prof = cm.last_profile
    times = {k.name: k for k in prof.kernels} if prof is not None else {}
    head = f"model '{cm.name}': {len(kernels)} kernels"
    if prof is not None:
        cpu = f", {prof.cpu_total_us:.1f} us of the calling thread's CPU" if prof.cpu_total_us is not None else ""
        head += f", {prof.total_us:.1f} us per run{cpu} (median of {prof.repeat} profiled runs)"
    lines = [head]
    width = max([len(k.name) for k in kernels] + [6])
    for i, k in enumerate(kernels):
        t = times.get(k.name)
        timing = "" if t is None else f"{t.median_us:10.1f} us" if t.cpu_us is None else \
            f"{t.median_us:10.1f} us wall {t.cpu_us:8.1f} us cpu"
        calls = f"  x{len(k.nodes)}" if len(k.nodes) > 1 else ""
        lines.append(f"  {i:3d}  {k.name:<{width}}  {timing}  {' + '.join(k.ops)}{calls}")
    try:
        lines.append(f"memory: {memory(cm)}")
    except ValueError as e:
        lines.append(f"memory: {e}")
    return "\n".join([*lines, *kept_lines(cm.stats.kept_fp32 if cm.stats is not None else ())])


def kept_lines(kept: Sequence[str]) -> list[str]:
    """The lines that say which products of a bf16 model kept fp32 (none: no line)."""
    if not kept:
        return []
    return [f"precision bf16: {len(kept)} product(s) kept in float32:", *(f"  {line}" for line in kept)]


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KiB" if n < 1024 ** 2 else f"{n / 1024 ** 2:.1f} MiB"

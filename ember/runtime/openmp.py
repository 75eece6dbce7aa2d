"""ember's OpenMP runtime next to torch and ONNX Runtime in one process.

One libgomp. ember's libraries are built with -fopenmp and need `libgomp.so.1`; torch's wheel
bundles its own copy (torch/lib/libgomp.so.1), whose soname is the same. The dynamic loader hands
a library that needs `libgomp.so.1` the copy the process already holds, so a process has one
libgomp, whichever came first, and one pool of OpenMP threads per calling thread: torch's eager
ops and ember's kernels called from one thread (torch.compile's graphs and the eager code between
them) run on the same threads, and no idle thread of one waits against the other's. ember keeps it
so (it never loads a private copy, which would be a second pool spinning on the same cores).

Threads that sleep soon after a call. After a parallel region, libgomp's threads spin before they
sleep (GOMP_SPINCOUNT iterations; by default 300,000, about 3 ms), so that the next region finds
them awake; meanwhile they hold the cores. On a machine with more runnable threads than cores
(ONNX Runtime's thread pool in the same process, other processes), a thread spinning at a barrier
while the thread it waits for has no core spins its whole time slice, at every kernel: on a 2-core
machine with 7 runnable processes, ResNet-18 took 763 ms a call with libgomp's default, 75 ms with
10,000 spins, 26 ms with none (OMP_WAIT_POLICY=passive; benchmarks/coexist.py). The kernels of one
call follow each other within microseconds, and Python between two calls takes tens of
microseconds, so a short spin keeps the threads awake where it matters and lets them sleep within
about 0.1 ms of the end of a call. libgomp reads its settings once, when it is loaded; so when
ember loads the process's first libgomp and the user set neither OMP_WAIT_POLICY nor
GOMP_SPINCOUNT, ember sets GOMP_SPINCOUNT=SPIN_COUNT for that load only (the variable is removed
again, so child processes do not inherit it). Process-wide, as libgomp's settings are: torch
loaded afterwards shares the runtime and the setting. When libgomp is loaded already (torch
imported first, as with torch.compile), its settings stay as they are and ember shares its
threads; OMP_WAIT_POLICY or GOMP_SPINCOUNT set before the process starts decide them.
Why not passive (no spin) by default: then every parallel region wakes its threads from a futex,
tens of microseconds each on a quiet machine, which small models at batch 1 would pay per kernel.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import TypeVar

SPIN_COUNT = 10_000  # libgomp's spins before a futex wait: about 0.1 ms (libgomp's own default: 300,000)
USER_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")

_lock = threading.Lock()
_applied: bool | None = None  # whether ember set libgomp's spin count (None: no libgomp loaded by then)
_set_num_threads = None  # libgomp's omp_set_num_threads, once loaded (resolved early: fork's child calls it)

T = TypeVar("T")


def load(open_fn: Callable[[], T]) -> T:
    """`open_fn()` (a dlopen of one of ember's libraries), run with GOMP_SPINCOUNT=SPIN_COUNT in
    the environment when it may load the process's first libgomp and the user chose no wait
    policy (see the module doc)."""
    global _applied
    if _applied is not None:
        return open_fn()
    with _lock:
        if _applied is not None:
            return open_fn()
        loaded = _libgomp_loaded()
        apply = not loaded and not any(v in os.environ for v in USER_SETTINGS)
        if apply:
            os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
        try:
            result = open_fn()
        finally:
            if apply:
                del os.environ["GOMP_SPINCOUNT"]
        if _libgomp_loaded():  # else a library built without OpenMP: the next load may bring libgomp
            global _set_num_threads
            _set_num_threads = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD).omp_set_num_threads
            _applied = apply
        return result


def one_thread_here() -> None:
    """omp_set_num_threads(1) for the calling thread, when ember has loaded libgomp (for the
    thread that forked a child: ember.runtime.fork)."""
    if _set_num_threads is not None:
        _set_num_threads(1)


def spin_count_set() -> bool | None:
    """Whether ember set libgomp's spin count (None: ember loaded no libgomp yet)."""
    return _applied


def libgomp_path() -> str | None:
    """The file of the libgomp this process has mapped (torch's copy when torch loaded it first),
    None when there is none; OSError when /proc/self/maps cannot be read."""
    with open("/proc/self/maps") as maps:
        paths = (line.split(None, 5)[-1].strip() for line in maps if line.count(" ") >= 5)
        return next((p for p in paths if os.path.basename(p).startswith("libgomp")), None)


def _libgomp_loaded() -> bool:
    try:
        return libgomp_path() is not None
    except OSError:
        return True  # cannot tell: leave libgomp's settings alone

"""ember's OpenMP runtime next to torch and ONNX Runtime in one process.

One libgomp. ember's libraries are built with -fopenmp and need `libgomp.so.1`; torch's wheel
bundles its own copy (torch/lib/libgomp.so.1), whose soname is the same. The dynamic loader hands
a library that needs `libgomp.so.1` the copy the process already holds, so a process has one
libgomp, whichever came first, and one pool of OpenMP threads per calling thread: torch's eager
ops and ember's kernels called from one thread (torch.compile's graphs and the eager code between
them) run on the same threads, and no idle thread of one waits against the other's. ember keeps it
so (it never loads a private copy, which would be a second pool spinning on the same cores).

Threads that sleep soon after a wait. A compiled model runs each kernel as an OpenMP parallel
region (`#pragma omp parallel for schedule(static)`, the calling thread one of the team), so a
call passes two waits per kernel: the other threads wait for the next region, the caller waits at
the region's end for the others. libgomp's threads spin at a wait before they sleep on a futex
(GOMP_SPINCOUNT iterations of a load and a `pause`; libgomp's default 300,000), so that a region
that comes soon finds them awake; meanwhile they hold a core. On a machine with more runnable
threads than cores (other processes, ONNX Runtime's pool in the same process), a thread that spins
while the thread it waits for has no core spends its share of the cores on nothing, and a call's
wall time is about its CPU time over that share: spinning is paid in full, at every wait. A spin
takes 10-13 ns on this project's 2-core AMD EPYC (Zen 5): a thread spends 3-4 ms of CPU after a
call with libgomp's 300,000, so 10,000 spins are 0.1-0.13 ms, SPIN_COUNT's 2,000 20-26 us.

Measured there (benchmarks/under_load.py; batch 1, 2 threads, medians of three alternating rounds),
the machine loaded by other processes (load average 9-16, with and without 3 busy loops of the
benchmark's): MobileNetV2's call took 92-98 ms with 10,000 spins (31 ms of CPU a call; 1.6 ms
quiet), 22-36 ms with 2,000 (9 ms of CPU), 11-30 ms with 1,000 and 8-15 ms with none
(OMP_WAIT_POLICY=passive), ONNX Runtime's 32-73 ms; its int8 model's 82-115, 22-28, 12-21 and 5-8
ms; ResNet-18's 116-203, 37-53, 33-39 and 32-36 ms, ONNX Runtime's 78-206 ms. BERT-base, whose
kernels are long, 318 ms with 10,000 spins, 244 with 2,000, 211 passive, ONNX Runtime's 626 ms.
With the cores free (timed under SCHED_FIFO, which takes a core from any ordinary process at once),
against 10,000 spins: 2,000 cost 0-1.6% (medians of five rounds, two runs; the second: MobileNetV2
1.56 ms against 1.58, ResNet-18 6.18 against 6.08, BERT-base 47.5 against 47.2, ONNX Runtime's
1.81, 8.00 and 66.3 ms), 1,000 2-5%, 300 5-7%, none 15-100% (each region then wakes its threads
from a futex). The gaps a spin has to bridge on a quiet machine are the waits inside a call (a
region's end, where the static halves of a kernel finish close together, and the small kernels the
caller runs alone between regions) and the Python between two calls: some tens of microseconds.
SPIN_COUNT is the shortest count that covers them within the noise of a quiet machine; a longer
spin buys nothing there and costs in full under load, and a user who expects a busy machine can
start the process with OMP_WAIT_POLICY=passive (or GOMP_SPINCOUNT=1000), which ember leaves as it
is. A spin is a count, not a time (`pause` takes 10 to 140 cycles depending on the CPU), so
elsewhere the same count spins shorter or longer. What was not the cause: dynamic or guided
scheduling of the parallel loops (a preempted thread's tiles taken by the other) measured no better
than static under load, and one parallel region per call would keep a barrier per kernel (one wait
where a region has two, at the price of every kernel's allocations and serial code in `single`
constructs); neither changes what a wait costs, which is where the time went.

libgomp reads its settings once, when it is loaded; so when ember loads the process's first
libgomp and the user set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT, ember sets
GOMP_SPINCOUNT=SPIN_COUNT for that load only (the variable is removed again, so child processes
do not inherit it). Process-wide, as libgomp's settings are: torch loaded afterwards shares the
runtime and the setting. When libgomp is loaded already (torch imported first, as with
torch.compile), its settings stay as they are (libgomp's 300,000 spins, unless the process was
started with a policy) and ember shares its threads; on a busy machine, start such a process with
GOMP_SPINCOUNT=2000 (or OMP_WAIT_POLICY=passive).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import TypeVar

SPIN_COUNT = 2_000  # libgomp's spins before a futex wait: 20-26 us on an AMD EPYC (libgomp's own default: 300,000)
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

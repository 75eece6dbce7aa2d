"""Native calls in children of fork: libgomp's thread pool does not survive fork.

libgomp (GCC's OpenMP) keeps a pool of worker threads for each thread that has started a
parallel region. In a child of fork only the forking thread exists, but its pool still lists
the parent's workers: the child's first parallel region on that thread waits for them forever.
libgomp has no at-fork handler (LLVM's libomp has one) and no call that drops a pool, and the
pool may come from anyone who ran OpenMP on that thread (ember, or torch through the same
libgomp), so the child cannot tell whether it is there; it can only tell that there is none
when libgomp was not loaded at all (a forkserver, a process that forks before loading a model).

What ember does: an at-fork handler (`os.register_at_fork`, registered when ember.runtime is
imported) records, in the child, the thread that forked if libgomp is mapped in the process,
and every native call ember makes from that thread asks for one OpenMP thread (`threads`): a
parallel region of one thread never touches the pool, so it runs, on one core. Threads the
child starts afterwards have no pool yet: they get a pool of their own on their first parallel
region and run with the model's `num_threads`. The parent is unchanged (the check is one
comparison with None); the child reads /proc/self/maps once (where it cannot, it assumes
libgomp is there). The handler also sets that thread's OpenMP threads to one (omp_set_num_threads,
when ember has loaded libgomp), so that others' parallel regions on it, torch's eager ops, which
would wait for the stale pool as well, run on one thread too (a model's call and a kernel's launch
restore the calling thread's setting when they return, ember.codegen.entry and ember.codegen.c, so
ember's own calls do not set it).
"""

from __future__ import annotations

import os
import threading

from . import openmp

_forked: int | None = None  # the thread that called fork, in the child (its OpenMP pool is stale)


def _after_fork_in_child() -> None:
    global _forked
    try:
        loaded = openmp.libgomp_path() is not None
    except OSError:
        loaded = True  # cannot tell: assume the pool is there
    _forked = threading.get_ident() if loaded else None
    if loaded:
        openmp.one_thread_here()


os.register_at_fork(after_in_child=_after_fork_in_child)


def stale_pool() -> bool:
    """Whether the calling thread is the one that forked this process (so its OpenMP pool, if
    any, lists threads that do not exist here)."""
    return _forked is not None and threading.get_ident() == _forked


def forked_thread() -> int | None:
    """The thread that forked this process when its OpenMP pool is stale (libgomp was loaded), else None."""
    return _forked


def threads(num_threads: int) -> int:
    """The OpenMP threads a native call from this thread may ask for: 1 on the thread that
    forked this process, `num_threads` (0: OpenMP's default) anywhere else."""
    return 1 if stale_pool() else num_threads

"""Native calls in children of fork: libgomp's thread pool does not survive fork.

libgomp (GCC's OpenMP) keeps a pool of worker threads for each thread that has started a
parallel region. In a child of fork only the forking thread exists, but its pool still lists
the parent's workers: the child's first parallel region on that thread waits for them forever.
libgomp has no at-fork handler (LLVM's libomp has one) and no call that drops a pool, and the
pool may come from anyone who ran OpenMP on that thread (ember, or torch through the same
libgomp), so the child cannot tell whether it is there.

What ember does: an at-fork handler (`os.register_at_fork`, registered when ember.runtime is
imported) records the thread that forked, and every native call ember makes from that thread in
the child asks for one OpenMP thread (`threads`): a parallel region of one thread never touches
the pool, so it runs, on one core. Threads the child starts afterwards have no pool yet: they
get a pool of their own on their first parallel region and run with the model's `num_threads`.
The parent is unchanged (the check is one comparison with None).
"""

from __future__ import annotations

import os
import threading

_forked: int | None = None  # the thread that called fork, in the child (its OpenMP pool is stale)


def _after_fork_in_child() -> None:
    global _forked
    _forked = threading.get_ident()


os.register_at_fork(after_in_child=_after_fork_in_child)


def stale_pool() -> bool:
    """Whether the calling thread is the one that forked this process (so its OpenMP pool, if
    any, lists threads that do not exist here)."""
    return _forked is not None and threading.get_ident() == _forked


def threads(num_threads: int) -> int:
    """The OpenMP threads a native call from this thread may ask for: 1 on the thread that
    forked this process, `num_threads` (0: OpenMP's default) anywhere else."""
    return 1 if stale_pool() else num_threads

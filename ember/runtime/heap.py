"""The C heap's free memory given back to the system after a compile.

A compile allocates and frees many weight-sized arrays (the import's copies, folded and packed
weights); glibc serves those past its mmap threshold from the heap once it has raised that
threshold (it does so as such chunks are freed), and keeps the freed pages: after a cold compile
of BERT-base the process's RSS stayed 327 MB above what it holds (AMD EPYC). malloc_trim(0) returns
the free pages of every arena; where the C library has no malloc_trim (musl), nothing is done.
"""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def _malloc_trim():
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_free_memory() -> None:
    """Give the heap's free pages back to the system (glibc's malloc_trim)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)

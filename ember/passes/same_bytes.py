"""Constants found by their bits: two arrays hold the same constant only where their dtype, shape
and bytes are the same. Values would merge a weight of -0.0 with one of 0.0 (a division by it
gives -inf, not inf) and never a NaN with itself. cse merges a graph's equal constants by it, and
the call program stores one weight per content across a model's regions.

An array's bucket is its dtype, shape, memory order and a sample of 64 of its bytes, so that
bytes are compared in full only where the sample agrees; an array is read as a flat view of its
bytes in memory order (no copy of a dense one: BERT-base's 415 MB were copied, and hashed as
Python bytes, to be compared; a Fortran-order one, a linear layer's weight transposed as the
import views it, is its transpose's C-order bytes). Equal arrays of two orders stay apart (a
merge missed, never a wrong one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import numpy as np

T = TypeVar("T")


class SameBytes(Generic[T]):
    """What was kept for each content of the arrays seen (a constant's value, a weight's index)."""

    def __init__(self) -> None:
        self._buckets: dict[tuple, list[tuple[np.ndarray, T]]] = {}

    def setdefault(self, data: np.ndarray, make: Callable[[], T]) -> T:
        """What was kept for an array of data's dtype, shape and bytes; where there was none,
        make() is kept for data's and returned."""
        fortran = not data.flags.c_contiguous and data.flags.f_contiguous
        flat = np.ascontiguousarray(data.T if fortran else data).reshape(-1).view(np.uint8)
        bucket = self._buckets.setdefault((data.dtype.name, data.shape, fortran,
                                           flat[::max(1, flat.size // 64)].tobytes()), [])
        kept = next((k for other, k in bucket if np.array_equal(other, flat)), None)
        if kept is None:
            kept = make()
            bucket.append((flat, kept))
        return kept

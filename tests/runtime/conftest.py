from __future__ import annotations

import pytest

from ember.tir.expr import Broadcast, Buffer, Ramp, Var, const
from ember.tir.stmt import BufferStore, For, PrimFunc


@pytest.fixture(autouse=True)
def builds_in_the_worker_cache(in_worker_cache):
    """Every test here builds into its process's build cache, never the user's; a test about the
    cache or a first compile asks for a fresh one (`cache_dir`, which comes after this one)."""


@pytest.fixture
def vadd() -> PrimFunc:
    """C[i] = A[i] + B[i] for i < n, the loop parallel."""
    n, i = Var("n"), Var("i")
    A, B, C = (Buffer(x, (n,), "float32") for x in "ABC")
    return PrimFunc("vadd", (A, B, C), For(i, const(0), n, "parallel", BufferStore(C, A[i] + B[i], (i,))))


@pytest.fixture
def vscale() -> PrimFunc:
    """Y[v*8 : v*8+8] = X[...] * 3 over 8-lane vectors (Y has 8 * m elements)."""
    m, v = Var("m"), Var("v")
    X, Y = Buffer("X", (m * 8,), "float32"), Buffer("Y", (m * 8,), "float32")
    idx = Ramp(v * 8, const(1), 8, "int64x8")
    body = BufferStore(Y, X[idx] * Broadcast(const(3.0), 8, "float32x8"), (idx,))
    return PrimFunc("vscale", (X, Y), For(v, const(0), m, "serial", body))

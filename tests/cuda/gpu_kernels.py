"""The GPU kernels the CUDA tests build, each returning (te schedule, its arguments, a NumPy
reference of the output from the inputs); and what the tests need: NVRTC (they compile every
kernel they generate; skipped with the reason where it is not installed) and, for the tests that
run kernels, a GPU."""

import functools

import numpy as np
import pytest

from ember import te
from ember.cuda import schedules, workloads
from ember.errors import DeviceError


@functools.cache
def nvrtc_missing() -> str | None:
    from ember.cuda.nvrtc import nvrtc_version

    try:
        nvrtc_version()
    except DeviceError as e:
        return str(e)
    return None


@functools.cache
def gpu_missing() -> str | None:
    from ember.cuda.driver import device

    try:
        device()
    except DeviceError as e:
        return str(e)
    return None


needs_nvrtc = pytest.mark.skipif(nvrtc_missing() is not None, reason=f"{nvrtc_missing()}")
needs_gpu = pytest.mark.skipif(gpu_missing() is not None, reason=f"no GPU: {gpu_missing()}")


def elementwise(n: int = 4096, threads: int = 128):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: te.exp(A[i]) * B[i] + te.max(A[i], B[i]) // 0.5, name="C")
    s = te.create_schedule(C.op)
    schedules.elementwise(s, C, threads)
    return s, [A, B, C], lambda a, b: (np.exp(a) * b + np.floor(np.maximum(a, b) / 0.5)).astype("float32")


def row_softmax(n: int = 256, m: int = 64, threads: int = 64, per_block: bool = False, staged: bool = False):
    w = workloads.row_softmax(n, m)
    if per_block:
        schedules.row_block(w.s, w.out, [w.mx, w.total, w.inv], threads, vector=4 if staged else 1,
                            staged=w.A if staged else None)
    else:
        w.s[w.inv].compute_inline()
        schedules.rows(w.s, w.out, [w.total, w.mx], threads)

    def reference(a):
        r = np.exp(a - a.max(1, keepdims=True))
        return r / r.sum(1, keepdims=True)

    return w.s, w.args, reference


def layer_norm(n: int = 8, m: int = 512, threads: int = 64, eps: float = 1e-5, staged: bool = False):
    """A row per block (rstd = 1/sqrt(var + eps), a value of the row computed once)."""
    w = workloads.layer_norm(n, m, eps)
    schedules.row_block(w.s, w.out, [w.mean, w.var, w.rstd], threads, vector=4, staged=w.A if staged else None)

    def reference(a, g, b):
        a64 = a.astype("float64")
        mu = a64.mean(1, keepdims=True)
        return ((a64 - mu) / np.sqrt(a64.var(1, keepdims=True) + eps) * g + b).astype("float32")

    return w.s, w.args, reference


def row_sum(n: int = 512, m: int = 96, threads: int = 128):
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    schedules.rows(s, B, (), threads)
    return s, [A, B], lambda a: a.sum(1)


def gemm(M: int = 128, N: int = 128, K: int = 64, vector: int = 1, stages: int = 1, **tiles):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    schedules.gemm(s, A, B, C, **(tiles or {"BM": 64, "BN": 64, "BK": 8, "TM": 4, "TN": 4}), vector=vector,
                   stages=stages)
    return s, [A, B, C], lambda a, b: a @ b


def matmul(M: int = 128, N: int = 128, K: int = 32, **tiles):
    s, args = schedules.matmul(M, N, K, **(tiles or {"BM": 64, "BN": 64, "BK": 8, "TM": 4, "TN": 4}))
    return s, args, lambda a, b: a @ b

"""The row kernels the GPU schedules are measured and tested on, defined once: a row softmax and
a layer norm over the rows of a 2-D fp32 tensor, as te tensors (unscheduled), so that the tests
(tests/cuda) and the benchmark (benchmarks/cuda_kernels.py) schedule the same computes.

Each returns its stages by name: the inputs, the row reductions in the order they run (a later
one reads an earlier one), the values computed once per row from them, and `out`.
"""

from __future__ import annotations

from types import SimpleNamespace

from .. import te


def row_softmax(n: int, m: int) -> SimpleNamespace:
    """out[i, j] = e[i, j] * inv[i], e = exp(A - max of the row), inv = 1 / the row's sum of e;
    e is inlined (the schedules read A twice rather than store it)."""
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    mx = te.compute((n,), lambda i: te.max(A[i, k], axis=k), name="mx")
    e = te.compute((n, m), lambda i, j: te.exp(A[i, j] - mx[i]), name="e")
    k2 = te.reduce_axis((0, m), name="k2")
    total = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="total")
    inv = te.compute((n,), lambda i: 1.0 / total[i], name="inv")
    out = te.compute((n, m), lambda i, j: e[i, j] * inv[i], name="out")
    s = te.create_schedule(out.op)
    s[e].compute_inline()
    return SimpleNamespace(s=s, A=A, mx=mx, total=total, inv=inv, out=out, args=[A, out])


def layer_norm(n: int, m: int, eps: float = 1e-5) -> SimpleNamespace:
    """out = (A - mean) * rstd * gamma + beta over each row, rstd = 1 / sqrt(var + eps)."""
    A = te.placeholder((n, m), name="A")
    gamma, beta = te.placeholder((m,), name="gamma"), te.placeholder((m,), name="beta")
    k = te.reduce_axis((0, m), name="k")
    mean = te.compute((n,), lambda i: te.sum(A[i, k] * (1.0 / m), axis=k), name="mean")
    k2 = te.reduce_axis((0, m), name="k2")
    var = te.compute((n,), lambda i: te.sum((A[i, k2] - mean[i]) * (A[i, k2] - mean[i]) * (1.0 / m), axis=k2),
                     name="var")
    rstd = te.compute((n,), lambda i: te.rsqrt(var[i] + eps), name="rstd")
    out = te.compute((n, m), lambda i, j: (A[i, j] - mean[i]) * rstd[i] * gamma[j] + beta[j], name="out")
    s = te.create_schedule(out.op)
    return SimpleNamespace(s=s, A=A, gamma=gamma, beta=beta, mean=mean, var=var, rstd=rstd, out=out,
                           args=[A, gamma, beta, out])

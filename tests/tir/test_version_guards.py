"""Versioned tiles (ember.tir.transform.version_guards): a register tile over a symbolic number of
rows, its row loop annotated, runs a copy without guards for the full tiles and the guarded body
for the tail, and computes what NumPy computes in float64 for every row count (tails of every
length, fewer rows than one tile), in C and on the interpreter."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember import te
from ember.tir.functor import collect
from ember.tir.stmt import For, IfThenElse

K, N, MR, NR = 67, 48, 4, 16  # K prime; N three vectors of columns
RTOL, ATOL = 1e-5, 1e-5  # fp32 sums of K = 67 products of terms below 1


def _tiled(version: bool = True):
    """C = A @ B + bias over n rows (a symbol): MR x NR tiles of registers, the row tiles serial
    inside a parallel loop over column tiles, as the CPU schedule of a symbolic-row gemm."""
    n = te.var("n")
    a = te.placeholder((n, K), name="A")
    b = te.placeholder((K, N), name="B")
    bias = te.placeholder((N,), name="bias")
    r = te.reduce_axis((0, K), name="r")
    acc = te.compute((n, N), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="acc")
    out = te.compute((n, N), lambda i, j: acc[i, j] + bias[j], name="out")
    s = te.create_schedule(out.op)
    local = s.cache_write(acc, "local")
    s[acc].compute_inline()
    i, j = s[out].op.axis
    jo, ji = s[out].split(j, factor=NR)
    io, ii = s[out].split(i, factor=MR)
    s[out].reorder(jo, io, ii, ji)
    s[out].parallel(jo)
    s[out].unroll(ii)
    s[out].vectorize(ji)
    s[local].compute_at(s[out], io)
    if version:
        s[out].pragma(io, "version_guards")
    li, lj = s[local].op.axis
    s[local].reorder(*s[local].op.reduce_axis, li, lj)
    s[local].unroll(li)
    s[local].vectorize(lj)
    return s, [a, b, bias, out]


def _guards(stmt) -> list:
    return collect(stmt, lambda x: isinstance(x, IfThenElse))


def test_full_tiles_run_without_guards():
    s, args = _tiled()
    func = ember.lower(s, args)
    (rows,) = [f for f in collect(func.body, lambda x: isinstance(x, For)) if f.loop_var.name.startswith("i")
               and f.kind == "serial" and _guards(f.body)]
    versioned = _guards(rows.body)[0]
    assert versioned.else_case is not None
    assert _guards(versioned.then_case) == []  # the full tile: no guard left, inside the k loop either
    assert len(_guards(versioned.else_case)) >= MR  # the tail: every row guarded
    assert not any(dict(f.annotations) for f in collect(func.body, lambda x: isinstance(x, For)))


@pytest.fixture(scope="module")
def kernels():
    s, args = _tiled()
    plain, plain_args = _tiled(version=False)
    return {"c": ember.build(s, args, target="c"), "python": ember.build(s, args, target="python"),
            "unversioned": ember.build(plain, plain_args, target="c")}


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 3 * MR + 3))
def test_versioned_tiles_match_float64(kernels, n):
    rng = np.random.default_rng(n)
    a, b, bias = (rng.uniform(-1, 1, shape).astype("float32") for shape in ((n, K), (K, N), (N,)))
    want = a.astype(np.float64) @ b.astype(np.float64) + bias
    for name in ("c", "unversioned") + (("python",) if n < 2 * MR else ()):
        out = np.full((n, N), np.nan, "float32")
        kernels[name](a, b, bias, out)
        np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL, err_msg=f"{name}, n = {n}")

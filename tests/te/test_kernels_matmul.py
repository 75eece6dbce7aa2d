"""End-to-end kernels, matrix products: TE definition + schedule, built for C and for the loop-IR
interpreter, checked against NumPy on fresh random data (GEMM, batched, int8, symbolic sizes,
packed GEMM with a register tile, rfactor, cache_read)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import ScheduleError, te
from ember.testing import check_schedule, random_array

BOTH = ("c", "python")


def matmul(m, n, k, dtype: str = "float32", out_dtype: str | None = None):
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    if out_dtype is None:
        C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    else:
        C = te.compute(
            (m, n), lambda i, j: te.sum(A[i, r].astype(out_dtype) * B[r, j].astype(out_dtype), axis=r),
            name="C",
        )
    return A, B, C


def classic_schedule(C, factor: int = 32):
    """The GEMM tutorial's schedule: 32x32 tiles, parallel rows of tiles, vectorized columns."""
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=factor)
    jo, ji = s[C].split(j, factor=factor)
    s[C].reorder(io, jo, ii, ji)
    s[C].parallel(io)
    s[C].vectorize(ji)
    return s


def test_gemm_classic_1024():
    A, B, C = matmul(1024, 1024, 1024)
    check_schedule(classic_schedule(C), [A, B, C], lambda a, b: a @ b, targets=("c",), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    "m, n, k, targets",
    [
        (100, 77, 33, BOTH),  # factors divide nothing
        (300, 200, 70, ("c",)),  # the same, larger
        (64, 64, 16, BOTH),  # factors divide everything
        (1, 5, 3, BOTH),  # smaller than one tile
    ],
)
def test_gemm_classic_tails(m, n, k, targets):
    A, B, C = matmul(m, n, k)
    check_schedule(classic_schedule(C), [A, B, C], lambda a, b: a @ b, targets=targets, rtol=1e-5, atol=1e-5)


def test_gemm_default_schedule():
    A, B, C = matmul(23, 17, 9)
    check_schedule(te.create_schedule(C.op), [A, B, C], lambda a, b: a @ b, targets=BOTH, atol=1e-5)


@pytest.mark.parametrize("b, m, n, k, targets", [(4, 33, 70, 21, ("c",)), (3, 9, 20, 7, BOTH)])
def test_batch_matmul(b, m, n, k, targets):
    A = te.placeholder((b, m, k), name="A")
    B = te.placeholder((b, k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((b, m, n), lambda bb, i, j: te.sum(A[bb, i, r] * B[bb, r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    bb, i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=8)
    s[C].reorder(bb, i, jo, s[C].op.reduce_axis[0], ji)
    s[C].parallel(bb)
    s[C].vectorize(ji)
    check_schedule(s, [A, B, C], lambda a, bm: a @ bm, targets=targets, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m, n, k, targets", [(64, 96, 200, ("c",)), (13, 24, 40, BOTH)])
def test_int8_matmul_exact(m, n, k, targets):
    A, B, C = matmul(m, n, k, dtype="int8", out_dtype="int32")
    assert C.dtype == "int32"
    s = classic_schedule(C, factor=8)

    def ref(a, b):
        return a.astype("int32") @ b.astype("int32")

    rng = np.random.default_rng()
    # the whole int8 range, so that a product computed in int8 would wrap
    a = rng.integers(-128, 128, (m, k)).astype("int8")
    b = rng.integers(-128, 128, (k, n)).astype("int8")
    check_schedule(s, [A, B, C], ref, inputs=[a, b], targets=targets, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# Symbolic sizes: one build, several shapes


def _symbolic_gemm(fully: bool):
    n = te.var("n")
    m, k = (te.var("m"), te.var("k")) if fully else (48, 24)
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=8)
    jo, ji = s[C].split(j, factor=16)
    s[C].reorder(io, jo, ii, ji)
    s[C].parallel(io)
    s[C].vectorize(ji)
    return s, [A, B, C]


@pytest.mark.parametrize("fully", [False, True], ids=["n", "n_m_k"])
def test_symbolic_gemm_one_build_many_sizes(fully):
    s, args = _symbolic_gemm(fully)
    f = ember.build(s, args, target="c")
    sizes = [(1, 48, 24), (37, 48, 24), (130, 48, 24)]
    if fully:
        sizes = [(1, 1, 1), (37, 21, 5), (130, 70, 33)]
    for n, m, k in sizes:
        a, b = random_array((n, k)), random_array((k, m))
        c = np.full((n, m), np.nan, "float32")
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5, err_msg=f"n, m, k = {n}, {m}, {k}")


@pytest.mark.parametrize("fully", [False, True], ids=["n", "n_m_k"])
def test_symbolic_gemm_python(fully):
    s, args = _symbolic_gemm(fully)
    f = ember.build(s, args, target="python")
    n, m, k = (11, 48, 24) if not fully else (11, 19, 7)
    a, b = random_array((n, k)), random_array((k, m))
    c = np.full((n, m), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_symbolic_gemm_check_schedule_sizes():
    s, (A, B, C) = _symbolic_gemm(fully=True)
    n, k = A.shape
    m = B.shape[1]
    check_schedule(s, [A, B, C], lambda a, b: a @ b, sizes={n: 9, m: 18, k: 5}, targets=BOTH, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Schedule facade combinations


@pytest.mark.parametrize("m, n, k, targets", [(64, 64, 64, BOTH), (256, 128, 96, ("c",))])
def test_packed_gemm_cache_write_compute_at(m, n, k, targets, load_example):
    s, args = load_example("gemm").packed_gemm(m, n, k)
    check_schedule(s, args, lambda a, b: a @ b, targets=targets, rtol=1e-5, atol=1e-4)


def test_cache_write_local_plain():
    A, B, C = matmul(20, 24, 10)
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=8)
    s[CL].compute_at(s[C], jo)
    s[C].vectorize(ji)
    check_schedule(s, [A, B, C], lambda a, b: a @ b, targets=BOTH, atol=1e-5)


@pytest.mark.parametrize("rows, cols, factor, targets", [(64, 1000, 16, ("c",)), (6, 100, 8, BOTH)])
def test_rowsum_rfactor(rows, cols, factor, targets):
    A = te.placeholder((rows, cols), name="A")
    k = te.reduce_axis((0, cols), name="k")
    B = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(s[B].op.reduce_axis[0], factor=factor)
    BF = s.rfactor(B, ki)
    s[BF].parallel(s[BF].op.axis[0])
    check_schedule(s, [A, B], lambda a: a.sum(axis=1), targets=targets, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "cols, split, targets",
    [
        (5, {"factor": 16}, BOTH),
        (10, {"nparts": 8}, BOTH),
        # GCC 12 at -O3 with AVX-512 miscompiles this guarded nest unless loop if-conversion is
        # off, which ember's default flags do (see ember/config.py)
        (37, {"nparts": 16}, BOTH),
    ],
)
def test_rowsum_rfactor_empty_ranges(cols, split, targets):
    """Some elements of the rfactor buffer have an empty reduction range (the factor exceeds the
    extent, or nparts leaves outer iterations with nothing to do): they must still hold the
    identity when the final reduction reads them."""
    A = te.placeholder((40, cols), name="A")
    k = te.reduce_axis((0, cols), name="k")
    B = te.compute((40,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(s[B].op.reduce_axis[0], **split)
    s.rfactor(B, ki if "factor" in split else ko)
    check_schedule(s, [A, B], lambda a: a.sum(axis=1), targets=targets, rtol=1e-5, atol=1e-5)


def test_rowsum_rfactor_outer_vectorized():
    """rfactor of the outer part, the inner part vectorized in the final reduction."""
    A = te.placeholder((5, 96), name="A")
    k = te.reduce_axis((0, 96), name="k")
    B = te.compute((5,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(s[B].op.reduce_axis[0], factor=8)
    BF = s.rfactor(B, ko, factor_axis=1)
    s[BF].parallel(s[BF].op.axis[0])
    check_schedule(s, [A, B], lambda a: a.sum(axis=1), targets=BOTH, rtol=1e-5, atol=1e-5)


def test_cache_read_gemm():
    A, B, C = matmul(24, 40, 12)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "local", [C])
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=8)
    s[AA].compute_at(s[C], io)
    jo, ji = s[C].split(j, factor=8)
    s[C].vectorize(ji)
    check_schedule(s, [A, B, C], lambda a, b: a @ b, targets=BOTH, atol=1e-5)


def test_cache_read_global_two_readers():
    A = te.placeholder((30,), name="A")
    B = te.compute((30,), lambda i: A[i] * 2, name="B")
    C = te.compute((30,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    s.cache_read(A, "global", [B, C])
    check_schedule(s, [A, C], lambda a: a + 2 * a, targets=BOTH)


@pytest.mark.parametrize("m, n, k, targets", [(50, 70, 30, BOTH), (256, 256, 128, ("c",))])
def test_gemm_bias_relu_epilogue_compute_at(m, n, k, targets):
    """GEMM with a bias + ReLU epilogue: the GEMM computed at the epilogue's tile (what fusion of a
    matmul with its elementwise consumer produces), partial tiles included."""
    A, B, C = matmul(m, n, k)
    bias = te.placeholder((n,), name="bias")
    out = te.compute((m, n), lambda i, j: te.max(C[i, j] + bias[j], 0.0), name="out")
    s = te.create_schedule(out.op)
    io, jo, ii, ji = s[out].tile(out.op.axis[0], out.op.axis[1], 16, 32)
    s[out].parallel(io)
    s[out].vectorize(ji)
    s[C].compute_at(s[out], jo)
    ci, cj = s[C].op.axis
    (ck,) = s[C].op.reduce_axis
    s[C].reorder(ck, ci, cj)
    s[C].vectorize(cj)
    check_schedule(s, [A, B, bias, out], lambda a, b, c: np.maximum(a @ b + c, 0), targets=targets,
                   rtol=1e-5, atol=1e-4)


def test_gemm_epilogue_reverse_compute_at():
    """The same fusion from the other side: the epilogue moved under the GEMM's tile loop."""
    A, B, C = matmul(40, 48, 16)
    out = te.compute((40, 48), lambda i, j: te.sigmoid(C[i, j]), name="out")
    s = te.create_schedule(out.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 16)
    s[out].reverse_compute_at(s[C], jo)
    check_schedule(s, [A, B, out], lambda a, b: 1 / (1 + np.exp(-(a @ b))), targets=BOTH,
                   rtol=1e-5, atol=1e-6)


def test_gemm_decompose_reduction_unroll():
    A, B, C = matmul(30, 20, 12)
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    jo, ji = s[C].split(j, factor=8)
    ko, ki = s[C].split(k, factor=5)  # 12 = 5 + 5 + 2: an unrolled tail
    s[C].reorder(i, jo, ko, ki, ji)
    s[C].unroll(ki)
    s[C].vectorize(ji)
    s[C].decompose_reduction(ko)
    check_schedule(s, [A, B, C], lambda a, b: a @ b, targets=BOTH, rtol=1e-5, atol=1e-5)


def test_symbolic_elementwise_and_row_reduction_tails():
    """One build, sizes on both sides of the split factor: 1, 7, 8, 9, 100 rows."""
    n = te.var("n")
    A = te.placeholder((n, 10), name="A")
    k = te.reduce_axis((0, 10), name="k")
    S = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="S")
    out = te.compute((n, 10), lambda i, j: A[i, j] / (S[i] + 1), name="out")
    s = te.create_schedule(out.op)
    io, ii = s[out].split(out.op.axis[0], factor=8)
    s[out].parallel(io)
    s[S].compute_at(s[out], ii)
    jo, ji = s[out].split(out.op.axis[1], factor=4)
    s[out].vectorize(ji)
    for target in BOTH:
        f = ember.build(s, [A, out], target=target)
        for rows in (1, 7, 8, 9, 100):
            a = random_array((rows, 10))
            o = np.full((rows, 10), np.nan, "float32")
            f(a, o)
            ref = a / ((a.astype("float64") ** 2).sum(axis=1, keepdims=True) + 1)
            np.testing.assert_allclose(o, ref, rtol=1e-5, atol=1e-6, err_msg=f"{target}, {rows} rows")


def test_fuse_split_tail_vectorize():
    """Fuse a 7 x 9 nest, split the 63 iterations by 8 (a tail) and vectorize the inner part."""
    A = te.placeholder((7, 9), name="A")
    B = te.compute((7, 9), lambda i, j: A[i, j] * (i + 1).astype("float32") - j.astype("float32"), name="B")
    s = te.create_schedule(B.op)
    fo, fi = s[B].split(s[B].fuse(*s[B].op.axis), factor=8)
    s[B].parallel(fo)
    s[B].vectorize(fi)
    ii, jj = np.meshgrid(np.arange(7), np.arange(9), indexing="ij")
    check_schedule(s, [A, B], lambda a: a * (ii + 1) - jj, targets=BOTH, rtol=1e-6, atol=1e-6)


def test_schedule_errors_on_reduction_axes_and_symbolic_vectorize():
    A, B, C = matmul(8, 8, 8)
    s = te.create_schedule(C.op)
    (k,) = s[C].op.reduce_axis
    with pytest.raises(ScheduleError, match="cannot parallelize loop k: it runs over a reduction axis"):
        s[C].parallel(k)
    with pytest.raises(ScheduleError, match="cannot vectorize loop k: it runs over a reduction axis"):
        s[C].vectorize(k)
    assert not [inst for inst in s.trace if inst.kind in ("parallel", "vectorize")]  # nor a trace
    n = te.var("n")
    X = te.placeholder((n,), name="X")
    Y = te.compute((n,), lambda i: X[i] * 3, name="Y")
    s = te.create_schedule(Y.op)
    with pytest.raises(ScheduleError, match="cannot vectorize loop i: its extent n is not constant"):
        s[Y].vectorize(Y.op.axis[0])


def test_gather_through_index_tensor_vectorized():
    A = te.placeholder((64,), name="A")
    idx = te.placeholder((40,), "int32", name="idx")
    B = te.compute((40,), lambda i: A[idx[i]] * 2, name="B")
    s = te.create_schedule(B.op)
    o, i = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(i)
    rng = np.random.default_rng()
    inputs = [random_array((64,), rng=rng), rng.integers(0, 64, 40).astype("int32")]
    check_schedule(s, [A, idx, B], lambda a, ix: a[ix] * 2, inputs=inputs, targets=BOTH, rtol=0, atol=0)

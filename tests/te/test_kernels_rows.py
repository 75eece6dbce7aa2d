"""End-to-end kernels over rows and windows: softmax and layer norm (reductions computed at the
output's row), Halide's separable blur (tile + compute_at + vectorize), and transposes and
reshapes written with index arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import ScheduleError, ShapeError, te
from ember.testing import check_schedule

BOTH = ("c", "python")


# ---------------------------------------------------------------------------------------------
# Softmax


def softmax_te(rows: int, cols: int, *, exp_stage: bool):
    X = te.placeholder((rows, cols), name="X")
    k1 = te.reduce_axis((0, cols), name="k1")
    mx = te.compute((rows,), lambda i: te.max(X[i, k1], axis=k1), name="mx")
    k2 = te.reduce_axis((0, cols), name="k2")
    if exp_stage:
        ex = te.compute((rows, cols), lambda i, j: te.exp(X[i, j] - mx[i]), name="ex")
        total = te.compute((rows,), lambda i: te.sum(ex[i, k2], axis=k2), name="total")
        out = te.compute((rows, cols), lambda i, j: ex[i, j] / total[i], name="out")
    else:
        ex = None
        total = te.compute((rows,), lambda i: te.sum(te.exp(X[i, k2] - mx[i]), axis=k2), name="total")
        out = te.compute((rows, cols), lambda i, j: te.exp(X[i, j] - mx[i]) / total[i], name="out")
    return X, mx, ex, total, out


def softmax_ref(x):
    x = x.astype("float64")
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("exp_stage", [True, False], ids=["exp_stage", "exp_fused"])
@pytest.mark.parametrize("schedule", ["default", "compute_at", "compute_at_parallel_vectorized"])
def test_softmax(exp_stage, schedule):
    rows, cols = 12, 37
    X, mx, ex, total, out = softmax_te(rows, cols, exp_stage=exp_stage)
    s = te.create_schedule(out.op)
    if schedule != "default":
        row, col = s[out].op.axis
        if ex is not None:
            s[ex].compute_inline()
        # total reads mx: move the consumer first, then the producer before it
        s[total].compute_at(s[out], row)
        s[mx].compute_at(s[out], row)
        if schedule == "compute_at_parallel_vectorized":
            s[out].parallel(row)
            co, ci = s[out].split(col, factor=8)
            s[out].vectorize(ci)
    check_schedule(s, [X, out], softmax_ref, targets=BOTH, rtol=1e-5, atol=1e-6)


def test_softmax_compute_at_producer_first_is_rejected():
    """TVM's te resolves compute_at at lowering, so the tutorials may move mx before total; a
    loop-IR schedule applies each directive at once, and mx cannot move into out's row loop
    while total, still at the root, reads it. The error says so; the schedule is unchanged."""
    X, mx, ex, total, out = softmax_te(5, 19, exp_stage=True)
    s = te.create_schedule(out.op)
    row = s[out].op.axis[0]
    s[ex].compute_inline()
    with pytest.raises(ScheduleError, match="block 'total' also reads mx but is not under loop"):
        s[mx].compute_at(s[out], row)
    s[total].compute_at(s[out], row)
    s[mx].compute_at(s[out], row)
    check_schedule(s, [X, out], softmax_ref, targets=BOTH, rtol=1e-5, atol=1e-6)


def test_softmax_large_rows_c():
    X, mx, ex, total, out = softmax_te(256, 1000, exp_stage=True)
    s = te.create_schedule(out.op)
    row, col = s[out].op.axis
    s[ex].compute_inline()
    s[total].compute_at(s[out], row)
    s[mx].compute_at(s[out], row)
    s[out].parallel(row)
    co, ci = s[out].split(col, factor=16)
    s[out].vectorize(ci)
    check_schedule(s, [X, out], softmax_ref, targets=("c",), rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# Layer norm


def layer_norm_ref(eps):
    def ref(x, g, b):
        x = x.astype("float64")
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * g + b

    return ref


def test_layer_norm_reduction_with_epilogue_is_rejected():
    """te.sum(...) / n is not a reduction at the top of the compute: te says so."""
    X = te.placeholder((4, 8), name="X")
    k = te.reduce_axis((0, 8), name="k")
    with pytest.raises(te.TEError, match="whole body"):
        te.compute((4,), lambda i: te.sum(X[i, k], axis=k) / 8, name="mean")


def layer_norm_stages(rows: int, cols: int, eps: float):
    """Layer norm as te wants it: each reduction the whole body of its own compute."""
    X = te.placeholder((rows, cols), name="X")
    gamma = te.placeholder((cols,), name="gamma")
    beta = te.placeholder((cols,), name="beta")
    k1 = te.reduce_axis((0, cols), name="k1")
    total = te.compute((rows,), lambda i: te.sum(X[i, k1], axis=k1), name="total")
    k2 = te.reduce_axis((0, cols), name="k2")

    def centered(i, j):
        return X[i, j] - total[i] / cols

    sq = te.compute((rows,), lambda i: te.sum(centered(i, k2) * centered(i, k2), axis=k2), name="sq")
    out = te.compute(
        (rows, cols),
        lambda i, j: centered(i, j) * te.rsqrt(sq[i] / cols + eps) * gamma[j] + beta[j],
        name="out",
    )
    return X, gamma, beta, total, sq, out


@pytest.mark.parametrize("schedule", ["default", "compute_at", "compute_at_parallel_vectorized"])
@pytest.mark.parametrize("rows, cols, targets", [(9, 30, BOTH), (128, 768, ("c",))])
def test_layer_norm(schedule, rows, cols, targets):
    eps = 1e-5
    X, gamma, beta, total, sq, out = layer_norm_stages(rows, cols, eps)
    s = te.create_schedule(out.op)
    if schedule != "default":
        row, col = s[out].op.axis
        s[sq].compute_at(s[out], row)
        s[total].compute_at(s[out], row)
        if schedule == "compute_at_parallel_vectorized":
            s[out].parallel(row)
            co, ci = s[out].split(col, factor=8)
            s[out].vectorize(ci)
    check_schedule(s, [X, gamma, beta, out], layer_norm_ref(eps), targets=targets, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Halide's blur (examples/kernels/blur.py)


def blur(h: int, w: int, ty: int, tx: int, vec: int):
    inp = te.placeholder((h + 2, w + 2), name="inp")
    blur_x = te.compute((h + 2, w), lambda y, x: (inp[y, x] + inp[y, x + 1] + inp[y, x + 2]) / 3,
                        name="blur_x")
    blur_y = te.compute((h, w), lambda y, x: (blur_x[y, x] + blur_x[y + 1, x] + blur_x[y + 2, x]) / 3,
                        name="blur_y")
    s = te.create_schedule(blur_y.op)
    yo, xo, yi, xi = s[blur_y].tile(blur_y.op.axis[0], blur_y.op.axis[1], ty, tx)
    xio, xii = s[blur_y].split(xi, factor=vec)
    s[blur_y].vectorize(xii)
    s[blur_y].parallel(yo)
    s[blur_x].compute_at(s[blur_y], xo)  # a (ty+2) x tx tile of blur_x per tile of blur_y
    bxo, bxi = s[blur_x].split(s[blur_x].op.axis[1], factor=vec)
    s[blur_x].vectorize(bxi)
    return s, [inp, blur_y]


def blur_ref(x):
    x = x.astype("float64")
    bx = (x[:, :-2] + x[:, 1:-1] + x[:, 2:]) / 3
    return (bx[:-2] + bx[1:-1] + bx[2:]) / 3


@pytest.mark.parametrize(
    "h, w, ty, tx, vec, targets",
    [
        (64, 512, 32, 256, 16, ("c",)),  # the example's sizes
        (16, 48, 8, 16, 8, BOTH),  # tiles divide the image
        (21, 50, 8, 16, 8, BOTH),  # partial tiles at the bottom and the right
        (5, 7, 8, 16, 4, BOTH),  # one partial tile
    ],
)
def test_blur_tiled(h, w, ty, tx, vec, targets):
    s, args = blur(h, w, ty, tx, vec)
    check_schedule(s, args, blur_ref, targets=targets, rtol=1e-5, atol=1e-6)


def test_blur_default_and_inlined():
    h, w = 9, 13
    inp = te.placeholder((h + 2, w + 2), name="inp")
    blur_x = te.compute((h + 2, w), lambda y, x: (inp[y, x] + inp[y, x + 1] + inp[y, x + 2]) / 3,
                        name="blur_x")
    blur_y = te.compute((h, w), lambda y, x: (blur_x[y, x] + blur_x[y + 1, x] + blur_x[y + 2, x]) / 3,
                        name="blur_y")
    s = te.create_schedule(blur_y.op)
    check_schedule(s, [inp, blur_y], blur_ref, targets=BOTH, rtol=1e-5, atol=1e-6)
    s = te.create_schedule(blur_y.op)
    s[blur_x].compute_inline()
    check_schedule(s, [inp, blur_y], blur_ref, targets=BOTH, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Transposes and reshapes


def reshape(t, new_shape, name="reshape"):
    """Row-major reshape through the flat index, with // and %."""
    old = [int(d.value) for d in t.shape]

    def f(*idx):
        flat = 0
        for i, n in zip(idx, new_shape):
            flat = flat * n + i
        out = []
        for n in reversed(old):
            out.append(flat % n)
            flat = flat // n
        return t[tuple(reversed(out))]

    return te.compute(tuple(new_shape), f, name=name)


@pytest.mark.parametrize("old, new", [((6, 4), (3, 8)), ((24,), (2, 3, 4)), ((2, 3, 4), (4, 6)),
                                      ((5, 7), (35,))])
def test_reshape(old, new):
    A = te.placeholder(old, name="A")
    B = reshape(A, new)
    s = te.create_schedule(B.op)
    check_schedule(s, [A, B], lambda a: a.reshape(new), targets=BOTH, rtol=0, atol=0)


@pytest.mark.parametrize("perm", [(2, 0, 1), (1, 0, 2), (2, 1, 0)])
def test_transpose(perm):
    shape = (2, 3, 4)
    A = te.placeholder(shape, name="A")
    B = te.compute(tuple(shape[p] for p in perm),
                   lambda *idx: A[tuple(idx[perm.index(d)] for d in range(3))], name="T")
    s = te.create_schedule(B.op)
    check_schedule(s, [A, B], lambda a: a.transpose(perm), targets=BOTH, rtol=0, atol=0)


def test_transpose_explicit_2_3_4_to_4_2_3():
    A = te.placeholder((2, 3, 4), name="A")
    B = te.compute((4, 2, 3), lambda i, j, k: A[j, k, i], name="T")
    check_schedule(te.create_schedule(B.op), [A, B], lambda a: a.transpose(2, 0, 1), targets=BOTH,
                   rtol=0, atol=0)


@pytest.mark.parametrize("m, n, targets", [(64, 96, BOTH), (1000, 999, ("c",))])
def test_transpose_tiled(m, n, targets):
    """A 2-D transpose in 16x16 tiles, the inner column vectorized (a strided gather)."""
    A = te.placeholder((m, n), name="A")
    B = te.compute((n, m), lambda i, j: A[j, i], name="T")
    s = te.create_schedule(B.op)
    io, jo, ii, ji = s[B].tile(B.op.axis[0], B.op.axis[1], 16, 16)
    s[B].parallel(io)
    s[B].vectorize(ji)
    check_schedule(s, [A, B], lambda a: a.T, targets=targets, rtol=0, atol=0)


def test_reshape_then_transpose_inlined_fused_vectorized():
    """(6, 4) -> (3, 8) -> transposed (8, 3), the reshape inlined, the output loops fused, split and
    vectorized: index arithmetic with // and % on vector lanes."""
    A = te.placeholder((6, 4), name="A")
    R = reshape(A, (3, 8))
    T = te.compute((8, 3), lambda i, j: R[j, i] * 2, name="T")
    s = te.create_schedule(T.op)
    s[R].compute_inline()
    f = s[T].fuse(*s[T].op.axis)
    fo, fi = s[T].split(f, factor=4)
    s[T].vectorize(fi)
    check_schedule(s, [A, T], lambda a: a.reshape(3, 8).T * 2, targets=BOTH, rtol=0, atol=0)


def test_reshape_of_int_tensor_fused_parallel():
    A = te.placeholder((4, 5, 6), "int32", name="A")
    B = reshape(A, (10, 12))
    s = te.create_schedule(B.op)
    s[B].parallel(s[B].fuse(*s[B].op.axis))
    check_schedule(s, [A, B], lambda a: a.reshape(10, 12), targets=BOTH, rtol=0, atol=0)


def test_symbolic_reshape_one_build():
    """(n, 6) -> (2n, 3) with a symbolic n: the output's size is an expression of n, bound from
    the input and checked on the output."""
    n = te.var("n")
    A = te.placeholder((n, 6), name="A")
    B = te.compute((n * 2, 3), lambda i, j: A[i // 2, (i % 2) * 3 + j], name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].parallel(io)
    for target in BOTH:
        f = ember.build(s, [A, B], target=target)
        for rows in (1, 5, 8):
            a = np.random.default_rng().random((rows, 6)).astype("float32")
            b = np.full((rows * 2, 3), np.nan, "float32")
            f(a, b)
            np.testing.assert_array_equal(b, a.reshape(-1, 3), err_msg=f"{target}, n = {rows}")
        with pytest.raises(ShapeError, match="no valid size n for n \\* 2"):
            f(np.zeros((3, 6), "float32"), np.zeros((5, 3), "float32"))


# ---------------------------------------------------------------------------------------------
# A fused group: adds before a layer norm (BERT's embeddings), every operator's output named "out"


def test_layer_norm_after_fused_adds_runs_by_rows():
    """The adds are inlined and the row schedule still applies (it once met their inlined stages
    by name, fell back to the default schedule, and ran the statistics serially: 70x slower)."""
    from ember.graph import TensorType
    from ember.schedules.apply import group_kernel
    from ember.tir.functor import collect
    from ember.tir.stmt import For

    rows, cols = 24, 96
    x, w = TensorType((1, rows, cols), "float32"), TensorType((cols,), "float32")
    nodes = [("add", {}, ((-1, 0), (-1, 1)), (x,)), ("add", {}, ((0, 0), (-1, 2)), (x,)),
             ("layer_norm", {"normalized_ndim": 1, "eps": 1e-5}, ((1, 0), (-1, 3), (-1, 4)), (x,))]
    s, args = group_kernel([x, x, x, w, w], nodes, [(2, 0)])
    func = ember.lower(s, args)
    top = [f for f in collect(func.body, lambda n: isinstance(n, For))][0]
    assert top.kind == "parallel" and int(top.extent.value) == rows
    rng = np.random.default_rng()
    ins = [rng.uniform(-2, 2, (1, rows, cols)).astype("float32") for _ in range(3)]
    gamma, beta = (rng.uniform(-1, 1, cols).astype("float32") for _ in range(2))
    out = np.empty((1, rows, cols), "float32")
    ember.build(s, args)(*ins, gamma, beta, out)
    y = sum(a.astype("float64") for a in ins)
    ref = (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_computes_of_one_name_become_distinct_stages():
    X = te.placeholder((8, 16), name="X")
    a = te.compute((8, 16), lambda i, j: X[i, j] + 1.0, name="out")
    b = te.compute((8, 16), lambda i, j: a[i, j] * 2.0, name="out")
    s = te.create_schedule(b.op)
    assert a.op.name != b.op.name
    s[a].compute_inline()
    assert not s.computed(a) and s.computed(b)
    out = np.empty((8, 16), "float32")
    x = np.random.default_rng().uniform(-1, 1, (8, 16)).astype("float32")
    ember.build(s, [X, b])(x, out)
    np.testing.assert_allclose(out, (x + 1.0) * 2.0, rtol=1e-6)

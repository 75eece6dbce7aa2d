"""End-to-end kernels, elementwise math and dtypes: math intrinsics in float32/float64/float16,
integer arithmetic with wrap-around and floor division, casts, booleans, selects; user-defined
reducers (te.comm_reducer), reductions with where=, and multi-output computes."""

from __future__ import annotations

import numpy as np
import pytest

from ember import te
from ember.testing import check_schedule

BOTH = ("c", "python")
N = 272  # 17 vectors of 16: the vectorized loops lower to real vector expressions (no tail guard)


def erf_ref(x):
    import math

    return np.vectorize(math.erf, otypes=["float64"])(x)


def sigmoid_ref(x):
    return 1 / (1 + np.exp(-x))


# name: (te function, NumPy function, input generator)
UNARY = {
    "exp": (te.exp, np.exp, lambda r, n: r.uniform(-5, 5, n)),
    "log": (te.log, np.log, lambda r, n: r.uniform(0.01, 10, n)),
    "sqrt": (te.sqrt, np.sqrt, lambda r, n: r.uniform(0, 10, n)),
    "rsqrt": (te.rsqrt, lambda x: 1 / np.sqrt(x), lambda r, n: r.uniform(0.01, 10, n)),
    "tanh": (te.tanh, np.tanh, lambda r, n: r.uniform(-4, 4, n)),
    "erf": (te.erf, erf_ref, lambda r, n: r.uniform(-3, 3, n)),
    "sigmoid": (te.sigmoid, sigmoid_ref, lambda r, n: r.uniform(-8, 8, n)),
    "abs": (te.abs, np.abs, lambda r, n: r.uniform(-5, 5, n)),
    "floor": (te.floor, np.floor, lambda r, n: r.uniform(-5, 5, n)),
    "ceil": (te.ceil, np.ceil, lambda r, n: r.uniform(-5, 5, n)),
    # round is half to even (NumPy's rint); include exact halves
    "round": (te.round, np.rint, lambda r, n: np.r_[np.arange(-4.5, 5, 1.0), r.uniform(-5, 5, n - 10)]),
    "trunc": (te.trunc, np.trunc, lambda r, n: r.uniform(-5, 5, n)),
    "log1p": (te.log1p, np.log1p, lambda r, n: r.uniform(-0.5, 3, n)),
    "expm1": (te.expm1, np.expm1, lambda r, n: r.uniform(-2, 2, n)),
    "sin": (te.sin, np.sin, lambda r, n: r.uniform(-4, 4, n)),
    "cos": (te.cos, np.cos, lambda r, n: r.uniform(-4, 4, n)),
    "neg": (lambda x: -x, np.negative, lambda r, n: r.uniform(-5, 5, n)),
}

TOL = {"float32": (2e-6, 1e-6), "float64": (1e-13, 1e-14), "float16": (1e-3, 1e-3)}


def scalar_and_vector(fcompute, inputs, factor: int = 8):
    """One kernel computing fcompute twice over (N,): a scalar loop, and a loop split by `factor`
    whose inner part is vectorized. Returns the schedule and its arguments."""
    scalar = te.compute((N,), fcompute, name="scalar")
    vector = te.compute((N,), fcompute, name="vector")
    scalar = scalar if isinstance(scalar, list) else [scalar]
    vector = vector if isinstance(vector, list) else [vector]
    s = te.create_schedule([scalar[0].op, vector[0].op])
    o, i = s[vector[0]].split(vector[0].op.axis[0], factor=factor)
    s[vector[0]].vectorize(i)
    return s, [*inputs, *scalar, *vector]


def twice(ref):
    """The reference of a scalar_and_vector kernel: every output twice."""
    def both(*args):
        out = ref(*args)
        out = list(out) if isinstance(out, tuple) else [out]
        return out + out

    return both


def rounded_ref(np_fn, dtype):
    """float16 is stored as half and computed in float32: the reference does the same."""
    def ref(a):
        compute = "float32" if dtype == "float16" else dtype
        return np_fn(a.astype(compute)).astype(dtype)

    return ref


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_math(name, dtype):
    fn, np_fn, gen = UNARY[name]
    A = te.placeholder((N,), dtype, name="A")
    s, args = scalar_and_vector(lambda i: fn(A[i]), [A])
    a = gen(np.random.default_rng(), N).astype(dtype)
    rtol, atol = TOL[dtype]
    check_schedule(s, args, twice(rounded_ref(np_fn, dtype)), inputs=[a], targets=BOTH, rtol=rtol, atol=atol)


BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "div": (lambda a, b: a / b, np.divide),
    "max": (te.max, np.maximum),
    "min": (te.min, np.minimum),
    "pow": (te.pow, np.power),
    "select": (lambda a, b: te.if_then_else(a > b, a - b, b * 2), lambda a, b: np.where(a > b, a - b, b * 2)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_math(name, dtype):
    fn, np_fn = BINARY[name]
    A = te.placeholder((N,), dtype, name="A")
    B = te.placeholder((N,), dtype, name="B")
    s, args = scalar_and_vector(lambda i: fn(A[i], B[i]), [A, B], factor=16)
    rng = np.random.default_rng()
    lo = 0.1 if name in ("pow", "div") else -3  # pow of positive bases; no division by ~0
    a, b = rng.uniform(lo, 3, N).astype(dtype), rng.uniform(lo, 3, N).astype(dtype)
    if name == "pow":
        b = rng.uniform(-2, 2, N).astype(dtype)
    rtol, atol = TOL[dtype]
    if dtype == "float32" and name == "pow":
        rtol = 1e-5

    def ref(x, y):
        compute = "float32" if dtype == "float16" else dtype
        return np_fn(x.astype(compute), y.astype(compute)).astype(dtype)

    check_schedule(s, args, twice(ref), inputs=[a, b], targets=BOTH, rtol=rtol, atol=atol)


def test_float16_expression_computed_in_float32():
    """A whole float16 expression: loads widen to float32, one rounding at the store."""
    A = te.placeholder((N,), "float16", name="A")
    B = te.placeholder((N,), "float16", name="B")
    C = te.compute((N,), lambda i: te.exp(A[i]) * B[i] + te.tanh(A[i] - B[i]) / 3, name="C")
    s = te.create_schedule(C.op)
    o, i = s[C].split(C.op.axis[0], factor=8)
    s[C].vectorize(i)

    def ref(a, b):
        a, b = a.astype("float32"), b.astype("float32")
        return (np.exp(a) * b + np.tanh(a - b) / np.float32(3)).astype("float16")

    check_schedule(s, [A, B, C], ref, targets=BOTH, rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------------------------------------
# Integers


INT_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_arithmetic_wraps(dtype):
    """Narrow integers wrap at every operation, as in NumPy arrays of that dtype."""
    A = te.placeholder((N,), dtype, name="A")
    B = te.placeholder((N,), dtype, name="B")
    s, args = scalar_and_vector(lambda i: (A[i] * B[i] + A[i] - B[i] * 3) // 7, [A, B], factor=16)
    info = np.iinfo(dtype)
    rng = np.random.default_rng()
    a = rng.integers(info.min, info.max, N, endpoint=True, dtype=dtype)
    b = rng.integers(info.min, info.max, N, endpoint=True, dtype=dtype)

    def ref(x, y):
        with np.errstate(over="ignore"):
            return (x * y + x - y * np.array(3, dtype)) // np.array(7, dtype)

    check_schedule(s, args, twice(ref), inputs=[a, b], targets=BOTH, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_floordiv_floormod_negative(dtype):
    """// and % floor, like Python and NumPy (not C's truncation), for every sign combination."""
    A = te.placeholder((N,), dtype, name="A")
    B = te.placeholder((N,), dtype, name="B")
    s, args = scalar_and_vector(lambda i: (
        A[i] // B[i], A[i] % B[i], A[i] // 4, A[i] % 4, A[i] // -3, A[i] % -3,
        te.truncdiv(A[i], B[i]), te.truncmod(A[i], B[i]),
    ), [A, B])
    rng = np.random.default_rng()
    a = rng.integers(-100, 101, N).astype(dtype)
    b = rng.choice(np.r_[-9:0, 1:10], N).astype(dtype)

    def ref(x, y):
        q = np.trunc(x.astype("float64") / y).astype(dtype)
        return (x // y, x % y, x // np.array(4, dtype), x % np.array(4, dtype), x // np.array(-3, dtype),
                x % np.array(-3, dtype), q, x - q * y)

    check_schedule(s, args, twice(ref), inputs=[a, b], targets=BOTH, rtol=0, atol=0)


def test_index_floordiv_floormod_negative():
    """Floor semantics of index arithmetic: a gather at (i - 5) // 3 and (i - 5) % 3."""
    A = te.placeholder((10, 3), name="A")
    B = te.compute((20,), lambda i: A[(i - 5) // 3 + 2, (i - 5) % 3], name="B")

    def ref(a):
        idx = np.arange(20) - 5
        return a[idx // 3 + 2, idx % 3]

    check_schedule(te.create_schedule(B.op), [A, B], ref, targets=BOTH, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# Casts and booleans


CASTS = [
    ("float32", "int32", lambda r, n: r.uniform(-1000, 1000, n)),  # truncation toward zero
    ("float32", "int8", lambda r, n: r.uniform(-120, 120, n)),
    ("float32", "uint8", lambda r, n: r.uniform(0, 255, n)),
    ("float64", "float32", lambda r, n: r.uniform(-1e3, 1e3, n)),
    ("float32", "float16", lambda r, n: r.uniform(-1e3, 1e3, n)),
    ("float16", "float64", lambda r, n: r.uniform(-1e3, 1e3, n)),
    ("int32", "float32", lambda r, n: r.integers(-(2**24), 2**24, n)),
    ("int64", "float64", lambda r, n: r.integers(-(2**52), 2**52, n)),
    ("int32", "int8", lambda r, n: r.integers(-100000, 100000, n)),  # wraps
    ("int8", "int64", lambda r, n: r.integers(-128, 128, n)),
    ("uint8", "int16", lambda r, n: r.integers(0, 256, n)),
    ("int16", "uint8", lambda r, n: r.integers(-1000, 1000, n)),  # wraps
    ("uint16", "float32", lambda r, n: r.integers(0, 2**16, n)),
    ("uint32", "int64", lambda r, n: r.integers(0, 2**32, n)),
    ("uint64", "float64", lambda r, n: r.integers(0, 2**64, n, dtype="uint64")),
    ("int64", "uint32", lambda r, n: r.integers(-(2**40), 2**40, n)),  # wraps
    ("float32", "uint16", lambda r, n: r.uniform(0, 65535, n)),
    ("float32", "bfloat16", lambda r, n: r.uniform(-1e3, 1e3, n)),  # rounds to nearest even
    ("bfloat16", "float32", lambda r, n: r.uniform(-1e3, 1e3, n)),
    ("int32", "bfloat16", lambda r, n: r.integers(-(2**20), 2**20, n)),
    ("bfloat16", "int32", lambda r, n: r.uniform(-1e3, 1e3, n)),
    ("int32", "bool", lambda r, n: r.integers(-2, 3, n)),  # nonzero is true
    ("float32", "bool", lambda r, n: r.choice([0.0, -0.0, 0.5, -2.0], n)),
    ("bool", "int32", lambda r, n: r.random(n) < 0.5),
    ("bool", "float32", lambda r, n: r.random(n) < 0.5),
]


@pytest.mark.parametrize("src, dst, gen", CASTS, ids=[f"{s}->{d}" for s, d, _ in CASTS])
def test_cast(src, dst, gen):
    A = te.placeholder((N,), src, name="A")
    s, args = scalar_and_vector(lambda i: A[i].astype(dst), [A])
    a = gen(np.random.default_rng(), N).astype(src)

    def ref(x):
        with np.errstate(invalid="ignore"):
            if np.dtype(dst).kind in "iu" and np.dtype(src).kind == "f":
                return np.trunc(x).astype("int64").astype(dst)
            return x.astype(dst)

    check_schedule(s, args, twice(ref), inputs=[a], targets=BOTH, rtol=0, atol=0)


def test_bool_outputs_and_logic():
    A = te.placeholder((N,), name="A")
    B = te.placeholder((N,), name="B")
    M = te.placeholder((N,), "bool", name="M")
    s, args = scalar_and_vector(lambda i: (
        A[i] > B[i],
        te.all(A[i] > 0, B[i] < 0) | ~M[i],
        te.any(A[i] == B[i], M[i]),
        te.if_then_else(M[i], A[i], B[i]),
        (A[i] <= B[i]).astype("int32") + M[i].astype("int32"),
    ), [A, B, M])
    assert [o.dtype for o in args[3:]] == ["bool", "bool", "bool", "float32", "int32"] * 2
    rng = np.random.default_rng()
    a = rng.uniform(-1, 1, N).astype("float32")
    b = np.where(rng.random(N) < 0.2, a, rng.uniform(-1, 1, N)).astype("float32")  # some equal
    m = rng.random(N) < 0.5

    def ref(x, y, mm):
        return (x > y, ((x > 0) & (y < 0)) | ~mm, (x == y) | mm, np.where(mm, x, y),
                (x <= y).astype("int32") + mm.astype("int32"))

    check_schedule(s, args, twice(ref), inputs=[a, b, m], targets=BOTH, rtol=0, atol=0)


def test_mixed_dtype_promotion():
    """int8 + float32 promotes to float32; int32 * int64 to int64; literals take the other side's type."""
    A = te.placeholder((N,), "int8", name="A")
    B = te.placeholder((N,), "float32", name="B")
    C = te.placeholder((N,), "int32", name="C")
    D = te.placeholder((N,), "int64", name="D")
    outs = te.compute((N,), lambda i: (A[i] + B[i], C[i] * D[i] + 1, B[i] * 2 + 0.5), name="P")
    assert [o.dtype for o in outs] == ["float32", "int64", "float32"]
    s = te.create_schedule(outs[0].op)

    def ref(a, b, c, d):
        return a.astype("float32") + b, c.astype("int64") * d + 1, b * np.float32(2) + np.float32(0.5)

    check_schedule(s, [A, B, C, D, *outs], ref, targets=BOTH, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# Reducers


def test_comm_reducer_sum_of_squares():
    A = te.placeholder((7, 33), name="A")
    k = te.reduce_axis((0, 33), name="k")
    sumsq = te.comm_reducer(lambda x, y: x + y, lambda dtype: 0, name="sumsq")
    B = te.compute((7,), lambda i: sumsq(A[i, k] * A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    s[B].parallel(B.op.axis[0])
    check_schedule(s, [A, B], lambda a: (a.astype("float64") ** 2).sum(axis=1), targets=BOTH, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_comm_reducer_max_abs(dtype):
    A = te.placeholder((9, 40), dtype, name="A")
    k = te.reduce_axis((0, 40), name="k")
    maxabs = te.comm_reducer(lambda x, y: te.max(te.abs(x), te.abs(y)), lambda t: 0, name="maxabs")
    B = te.compute((9,), lambda i: maxabs(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    check_schedule(s, [A, B], lambda a: np.abs(a).max(axis=1), targets=BOTH, rtol=0, atol=0)


def test_comm_reducer_over_two_axes_with_identity():
    """A min reducer written by hand, over two reduction axes; its identity is the dtype's largest value."""
    A = te.placeholder((5, 6, 7), "int16", name="A")
    r1 = te.reduce_axis((0, 6), name="r1")
    r2 = te.reduce_axis((0, 7), name="r2")
    mymin = te.comm_reducer(lambda x, y: te.min(x, y), lambda t: np.iinfo(t).max, name="mymin")
    B = te.compute((5,), lambda i: mymin(A[i, r1, r2] * 2, axis=[r1, r2]), name="B")
    check_schedule(te.create_schedule(B.op), [A, B], lambda a: (a * np.int16(2)).min(axis=(1, 2)),
                   targets=BOTH, rtol=0, atol=0)


@pytest.mark.parametrize("reducer", ["sum", "max", "min", "prod"])
def test_reduction_where(reducer):
    """A lower-triangular reduction: where= k <= i (every row has at least one element)."""
    n = 12
    A = te.placeholder((n, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    red = getattr(te, reducer)
    scale = 1.0 if reducer != "prod" else 0.5  # keep products away from underflow
    B = te.compute((n,), lambda i: red(A[i, k] + scale, axis=k, where=k <= i), name="B")
    s = te.create_schedule(B.op)
    s[B].parallel(B.op.axis[0])

    def ref(a):
        a = a.astype("float64") + scale
        fn = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[reducer]
        return np.array([fn(a[i, : i + 1]) for i in range(n)])

    check_schedule(s, [A, B], ref, targets=BOTH, rtol=1e-5, atol=1e-6)


def test_reduction_where_data_dependent_split():
    """Sum of the positive elements, the reduction split with a tail and rfactored."""
    A = te.placeholder((6, 50), name="A")
    k = te.reduce_axis((0, 50), name="k")
    B = te.compute((6,), lambda i: te.sum(A[i, k], axis=k, where=A[i, k] > 0), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=8)
    BF = s.rfactor(B, ki)
    s[BF].vectorize(s[BF].op.axis[-1])
    check_schedule(s, [A, B], lambda a: np.where(a > 0, a, 0).sum(axis=1), targets=BOTH, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Multi-output computes


@pytest.mark.parametrize("schedule", ["default", "split_vectorize", "parallel_fused"])
def test_multi_output(schedule):
    A = te.placeholder((10, 21), name="A")
    B = te.placeholder((10, 21), name="B")
    S, D, G = te.compute((10, 21), lambda i, j: (A[i, j] + B[i, j], A[i, j] - B[i, j], A[i, j] > B[i, j]),
                         name="sd")
    assert (S.dtype, D.dtype, G.dtype) == ("float32", "float32", "bool")
    s = te.create_schedule(S.op)
    i, j = s[S].op.axis
    if schedule == "split_vectorize":
        jo, ji = s[S].split(j, factor=8)
        s[S].vectorize(ji)
    elif schedule == "parallel_fused":
        s[S].parallel(s[S].fuse(i, j))
    check_schedule(s, [A, B, S, D, G], lambda a, b: (a + b, a - b, a > b), targets=BOTH, rtol=0, atol=0)


def test_multi_output_consumed_by_another_stage():
    """Both outputs of a tuple compute feed a later stage; only that stage is an argument."""
    A = te.placeholder((30,), name="A")
    lo, hi = te.compute((30,), lambda i: (A[i] - 1, A[i] + 1), name="bounds")
    C = te.compute((30,), lambda i: lo[i] * hi[i], name="C")
    s = te.create_schedule(C.op)
    check_schedule(s, [A, C], lambda a: (a - 1) * (a + 1), targets=BOTH, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("schedule", ["default", "split", "split_rfactor", "split_reorder_vectorize"])
def test_reduce_axis_with_nonzero_start(schedule):
    """te.reduce_axis((2, 10)): the loop runs from 0 and the axis is bound to loop + 2, so splits
    (which build i_0 * f + i_1 from 0) keep the offset."""
    A = te.placeholder((6, 12), name="A")
    k = te.reduce_axis((2, 10), name="k")
    B = te.compute((6,), lambda i: te.sum(A[i, k] * (k - 1).astype("float32"), axis=k), name="B")
    s = te.create_schedule(B.op)
    if schedule != "default":
        ko, ki = s[B].split(B.op.reduce_axis[0], factor=3)
        if schedule == "split_rfactor":
            s.rfactor(B, ki)
        elif schedule == "split_reorder_vectorize":
            io, ii = s[B].split(B.op.axis[0], factor=4)
            s[B].reorder(io, ko, ki, ii)
            s[B].vectorize(ii)
    check_schedule(s, [A, B], lambda a: (a[:, 2:10] * np.arange(1, 9)).sum(axis=1), targets=BOTH,
                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64", "float16", "float64"])
@pytest.mark.parametrize("reducer", ["sum", "max", "min"])
def test_reductions_per_dtype(dtype, reducer):
    """te.sum/max/min in every dtype: identities (the dtype's extremes), integer wrap-around of
    sums, float16 rounding at every accumulation."""
    A = te.placeholder((5, 33), dtype, name="A")
    k = te.reduce_axis((0, 33), name="k")
    B = te.compute((5,), lambda i: getattr(te, reducer)(A[i, k], axis=k), name="B")
    rng = np.random.default_rng()
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, (5, 33), endpoint=True).astype(dtype)
    else:
        a = rng.uniform(-3, 3, (5, 33)).astype(dtype)

    def ref(x):
        if reducer != "sum":
            return getattr(x, reducer)(axis=1)
        if dtype == "float16":
            acc = np.zeros(5, dtype)
            for j in range(33):
                acc = (acc.astype("float32") + x[:, j].astype("float32")).astype(dtype)
            return acc
        return x.sum(axis=1, dtype=dtype)

    check_schedule(te.create_schedule(B.op), [A, B], ref, inputs=[a], targets=BOTH,
                   rtol=1e-12 if dtype == "float64" and reducer == "sum" else 0, atol=0)

"""Hand-written lowered kernels, run on the C target and on the interpreter, against NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ir_builders import Var, bcast, buf, const, func, load, loop, ramp, rand, store

from ember.codegen.c import codegen_c
from ember.runtime.module import build_c_module
from ember.tir import dtype as dt
from ember.tir.expr import MATH_FUNCS, Select, binary, call, cast, max_, min_, select
from ember.tir.stmt import Allocate, Evaluate, IfThenElse, seq

rng = np.random.default_rng(0)


def test_vector_add_parallel_symbolic(check):
    n, i = Var("n"), Var("i")
    A, B, C = buf("A", [n]), buf("B", [n]), buf("C", [n])
    f = func("vadd", [A, B, C], loop(i, n, store(C, i, load(A, i) + load(B, i)), kind="parallel"))
    for size in (1, 7, 1000):
        a, b = rand(size, rng=rng), rand(size, rng=rng)
        check(f, [a, b, rand(size, rng=rng)], {2: a + b})


def test_matmul_flattened_reduction(check):
    M, N, K = 17, 19, 23
    i, j, k = Var("i"), Var("j"), Var("k")
    A, B, C = buf("A", [M, K]), buf("B", [K, N]), buf("C", [M, N])
    c_ij = i * N + j
    body = loop(i, M, loop(
        j, N,
        store(C, c_ij, 0.0),
        loop(k, K, store(C, c_ij, load(C, c_ij) + load(A, i * K + k) * load(B, k * N + j))),
    ), kind="parallel")
    f = func("matmul", [A, B, C], body)
    a, b = rand((M, K), rng=rng), rand((K, N), rng=rng)
    check(f, [a, b, rand((M, N), rng=rng)], {2: a @ b}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lanes", [8, 16, 3])
def test_vectorized_ramp_broadcast(check, lanes):
    """C[ramp] = A[ramp] * 2 + B[ramp]; a loop of `lanes`-wide vectors, a scalar tail loop."""
    n, i, t = 5 * lanes + 3, Var("i"), Var("t")
    A, B, C = buf("A", [n]), buf("B", [n]), buf("C", [n])
    idx = ramp(i * lanes, 1, lanes)
    tail = n - n % lanes
    f = func("axpy", [A, B, C],
             loop(i, n // lanes, store(C, idx, load(A, idx) * bcast(2.0, lanes) + load(B, idx))),
             loop(t, n % lanes, store(C, t + tail, load(A, t + tail) * 2.0 + load(B, t + tail))))
    a, b = rand(n, rng=rng), rand(n, rng=rng)
    check(f, [a, b, rand(n, rng=rng)], {2: a * 2 + b}, rtol=1e-6, atol=1e-6)


def test_strided_gather_and_scatter(check):
    """C[i*8 : +8] = A[i*16 : +16 : 2] (gather), D[i*16+1 : +16 : 2] = A[...] (scatter)."""
    n, i = 4, Var("i")
    A, C, D = buf("A", [16 * n]), buf("C", [8 * n]), buf("D", [16 * n])
    gathered = load(A, ramp(i * 16, 2, 8))
    f = func("strided", [A, C, D], loop(i, n,
        store(C, ramp(i * 8, 1, 8), gathered),
        store(D, ramp(i * 16 + 1, 2, 8), gathered + bcast(1.0, 8)),
    ))
    a, d = rand(16 * n, rng=rng), rand(16 * n, rng=rng)
    want_d = d.copy()
    want_d[1::2] = a[::2] + 1
    check(f, [a, rand(8 * n, rng=rng), d], {1: a[::2], 2: want_d})


def test_ramp_as_value_and_int32_index(check):
    """C[i*8 + l] = float(i*8 + l) * A[...]: a ramp cast to float; an int32 gather index."""
    i = Var("i")
    A, C = buf("A", [32]), buf("C", [32])
    r = ramp(i * 8, 1, 8)
    reversed_idx = ramp(cast("int32", 31 - i * 8), const(-1, "int32"), 8, dtype="int32")
    f = func("iota", [A, C], loop(i, 4, store(C, r, cast("float32x8", r) * load(A, reversed_idx))))
    a = rand(32, rng=rng)
    check(f, [a, rand(32, rng=rng)], {1: np.arange(32, dtype="float32") * a[::-1]})


def test_float16_in_and_out(check):
    n, i, v = 64, Var("i"), Var("v")
    X, Y, Z = buf("X", [n], "float16"), buf("Y", [n], "float16"), buf("Z", [n], "float16")
    x16 = load(X, i)
    vx = load(X, ramp(v * 8, 1, 8))
    f = func("half", [X, Y, Z],
             loop(i, n, store(Y, i, x16 * 1.5 + cast("float16", x16 * 0.1))),
             loop(v, n // 8, store(Z, ramp(v * 8, 1, 8), vx * vx)))
    x = rand(n, "float16", rng=rng)
    xf = x.astype("float32")
    tenth = (xf * np.float32(0.1)).astype("float16").astype("float32")
    want_y = (xf * np.float32(1.5) + tenth).astype("float16")
    check(f, [x, rand(n, "float16", rng=rng), rand(n, "float16", rng=rng)],
          {1: want_y, 2: (xf * xf).astype("float16")}, rtol=1e-3, atol=1e-3)


def test_int8_dot_accumulates_in_int32(check):
    M, K, i, k = 8, 64, Var("i"), Var("k")
    A, B, C = buf("A", [M, K], "int8"), buf("B", [K], "int8"), buf("C", [M], "int32")
    acc = load(C, i) + cast("int32", load(A, i * K + k)) * cast("int32", load(B, k))
    f = func("qdot", [A, B, C], loop(i, M, store(C, i, const(0, "int32")), loop(k, K, store(C, i, acc))))
    a, b = rand((M, K), "int8", rng=rng, low=-128, high=127), rand(K, "int8", rng=rng, low=-128, high=127)
    check(f, [a, b, rand(M, "int32", rng=rng)], {2: a.astype("int32") @ b.astype("int32")})


def test_narrow_int_wraps_like_numpy(check):
    n, i = 64, Var("i")
    A, B, C, D = buf("A", [n], "int8"), buf("B", [n], "int8"), buf("C", [n], "int8"), buf("D", [n], "uint8")
    f = func("wrap", [A, B, C, D], loop(
        i, n,
        store(C, i, (load(A, i) + load(B, i)) // const(3, "int8")),
        store(D, i, cast("uint8", load(A, i)) * const(3, "uint8")),
    ))
    a, b = rand(n, "int8", rng=rng, low=-128, high=127), rand(n, "int8", rng=rng, low=-128, high=127)
    with np.errstate(over="ignore"):
        want_c = (a + b) // np.int8(3)
        want_d = a.astype("uint8") * np.uint8(3)
    outs = [rand(n, "int8", rng=rng), rand(n, "uint8", rng=rng, low=1, high=9)]
    check(f, [a, b, *outs], {2: want_c, 3: want_d})


def test_comparisons_to_bool(check):
    n, i, v = 32, Var("i"), Var("v")
    A, B, K = buf("A", [n]), buf("B", [n]), buf("K", [n], "bool")
    M1, M2, M3 = buf("M1", [n], "bool"), buf("M2", [n], "bool"), buf("M3", [n], "bool")
    a, b = load(A, i), load(B, i)
    r = ramp(v * 8, 1, 8)
    va, vb, vk = load(A, r), load(B, r), load(K, r)
    f = func("compare", [A, B, K, M1, M2, M3],
             loop(i, n, store(M1, i, binary("<", a, b)),
                  store(M2, i, binary("&&", binary(">=", a, 0.0), ~binary("==", a, b)))),
             loop(v, n // 8, store(M3, r, binary("||", binary("<", va, vb) == vk, ~binary(">", va, 1.0)))))
    x, y, k = rand(n, rng=rng), rand(n, rng=rng), rand(n, "bool", rng=rng)
    y[:4] = x[:4]  # some equal pairs
    outs = [rand(n, "bool", rng=rng) for _ in range(3)]
    check(f, [x, y, k, *outs], {3: x < y, 4: (x >= 0) & (x != y), 5: ((x < y) == k) | ~(x > 1)})


def test_select_scalar_and_vector(check):
    n, i, v = 32, Var("i"), Var("v")
    A, B, C, D, M = buf("A", [n]), buf("B", [n]), buf("C", [n]), buf("D", [n], "int64"), buf("M", [n], "bool")
    E = buf("E", [n])
    r = ramp(v * 8, 1, 8)
    va = load(A, r)
    f = func("sel", [A, B, C, D, M, E],
             loop(i, n, store(C, i, select(load(A, i) > 0.0, load(A, i), load(B, i) * 2.0))),
             loop(v, n // 8,
                  store(D, r, select(va > bcast(0.0, 8), ramp(v * 8, 1, 8), bcast(const(-1), 8))),
                  store(M, r, Select(load(M, r), va < bcast(0.5, 8), bcast(True, 8), "boolx8")),
                  store(E, r, Select(v < 2, va, load(B, r), "float32x8"))))  # one condition, all lanes
    a, b, m = rand(n, rng=rng), rand(n, rng=rng), rand(n, "bool", rng=rng)
    outs = [rand(n, rng=rng), rand(n, "int64", rng=rng), m, rand(n, rng=rng)]
    check(f, [a, b, *outs], {2: np.where(a > 0, a, b * 2), 3: np.where(a > 0, np.arange(n), -1),
                             4: np.where(m, a < 0.5, True), 5: np.where(np.arange(n) < 16, a, b)})


def test_min_max_propagate_nan(check):
    n, i, v = 16, Var("i"), Var("v")
    A, B, C, D = buf("A", [n]), buf("B", [n]), buf("C", [n]), buf("D", [n])
    r = ramp(v * 8, 1, 8)
    f = func("minmax", [A, B, C, D],
             loop(i, n, store(C, i, max_(load(A, i), load(B, i)))),
             loop(v, n // 8, store(D, r, min_(load(A, r), load(B, r)))))
    a, b = rand(n, rng=rng), rand(n, rng=rng)
    a[[0, 9]] = np.nan
    b[[1, 10]] = np.nan
    check(f, [a, b, rand(n, rng=rng), rand(n, rng=rng)], {2: np.maximum(a, b), 3: np.minimum(a, b)})


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_min_max_with_a_constant_keep_x_where_nan_or_equal(check, dtype):
    """ember_maxc/minc (a clip's bounds) over 8, 16 and 32 lanes (one register, or pieces of one,
    each width's path): c > x ? c : x (c < x for min), so NaN and a zero of the other sign stay x."""
    n, v = 64, Var("v")
    funcs = []
    for lanes in (8, 16, 32):
        A, B, C = buf("A", [n], dtype), buf("B", [n], dtype), buf("C", [n], dtype)
        r = ramp(v * lanes, 1, lanes)
        funcs.append(func(f"clip{lanes}", [A, B, C],
                          loop(v, n // lanes, store(B, r, max_(load(A, r), bcast(const(0.0, dtype), lanes))),
                               store(C, r, min_(load(A, r), bcast(const(-0.0, dtype), lanes))))))
    a = rand(n, dtype, rng=rng)
    a[[0, 17, 40]], a[[1, 33]], a[[2, 50]] = np.nan, -0.0, 0.0
    for f in funcs:
        runs = check(f, [a, rand(n, dtype, rng=rng), rand(n, dtype, rng=rng)],
                     {1: np.where(a < 0.0, 0.0, a), 2: np.where(a > -0.0, -0.0, a)})
        zeros = [1, 2, 33, 50]  # (equal to a zero of either sign, so assert_array_equal does not tell)
        for got in (runs["c"][1], runs["c"][2]):
            np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(a[zeros]))


_DOMAIN = {"log": (0.1, 4), "sqrt": (0.1, 4), "rsqrt": (0.1, 4), "log2": (0.1, 4), "log1p": (-0.5, 4),
           "pow": (0.1, 3)}
_NUMPY = {"rsqrt": lambda x: 1 / np.sqrt(x), "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "round": np.rint,
          "erf": np.vectorize(math.erf), "pow": np.power}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_math_function(check, dtype):
    """Each intrinsic, scalar and 8-lane, in one library, against NumPy."""
    n, i, v = 16, Var("i"), Var("v")
    funcs, cases = [], []
    for name in MATH_FUNCS:
        A, B, C, D = buf("A", [n], dtype), buf("B", [n], dtype), buf("C", [n], dtype), buf("D", [n], dtype)
        r = ramp(v * 8, 1, 8)
        binary_fn = name in ("pow", "fmod")
        args = (load(A, i), load(B, i)) if binary_fn else (load(A, i),)
        vargs = (load(A, r), load(B, r)) if binary_fn else (load(A, r),)
        funcs.append(func(f"math_{name}", [A, B, C, D],
                          loop(i, n, store(C, i, call(name, *args))),
                          loop(v, n // 8, store(D, r, call(name, *vargs)))))
        low, high = _DOMAIN.get(name, (-3, 3))
        a, b = rand(n, dtype, rng=rng, low=low, high=high), rand(n, dtype, rng=rng, low=0.5, high=2)
        if name == "round":
            a[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5]  # half to even
        ref = _NUMPY.get(name, getattr(np, name, None))
        want = (ref(a, b) if binary_fn else ref(a)).astype(dtype)
        cases.append((a, b, want))
    kernels = build_c_module(funcs)
    tol = 1e-5 if dtype == "float32" else 1e-12
    for f, (a, b, want) in zip(funcs, cases):
        check(f, [a, b, rand(n, dtype, rng=rng), rand(n, dtype, rng=rng)], {2: want, 3: want},
              rtol=tol, atol=tol, kernel=kernels[f.name])


def test_abs_of_ints(check):
    n, i = 16, Var("i")
    A, C = buf("A", [n], "int32"), buf("C", [n], "int32")
    f = func("iabs", [A, C], loop(i, n, store(C, i, call("abs", load(A, i)))))
    a = rand(n, "int32", rng=rng, low=-50, high=50)
    check(f, [a, rand(n, "int32", rng=rng)], {1: np.abs(a)})


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64", "float32", "float64"])
def test_floor_div_mod_of_negatives(check, dtype):
    n, i, v = 64, Var("i"), Var("v")
    A, B, Q, R, VQ, VR = (buf(x, [n], dtype) for x in ("A", "B", "Q", "R", "VQ", "VR"))
    r = ramp(v * 8, 1, 8)
    f = func("floordiv", [A, B, Q, R, VQ, VR],
             loop(i, n, store(Q, i, load(A, i) // load(B, i)), store(R, i, load(A, i) % load(B, i))),
             loop(v, n // 8, store(VQ, r, load(A, r) // load(B, r)), store(VR, r, load(A, r) % load(B, r))))
    a, b = rand(n, dtype, rng=rng, low=-20, high=20), rand(n, dtype, rng=rng, low=-7, high=7)
    if dtype != "uint8":
        a[:4], b[:4] = [-7, 7, -7, 7], [2, -2, -2, 2]
    q, m = np.floor_divide(a, b), np.remainder(a, b)
    if dt.is_int(dtype):  # numpy's integer rules are Python's
        assert [int(x) // int(y) for x, y in zip(a, b)] == q.tolist()
        assert [int(x) % int(y) for x, y in zip(a, b)] == m.tolist()
    outs = [rand(n, dtype, rng=rng) for _ in range(4)]
    check(f, [a, b, *outs], {2: q, 3: m, 4: q, 5: m})


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64"])
def test_bitwise_and_or_xor(check, dtype):
    """&, |, ^ on integers (two's complement, negatives too), scalar and 8-lane, one expression
    mixing them with + so that C's precedence shows."""
    n, i, v = 64, Var("i"), Var("v")
    A, B, S, V = (buf(x, [n], dtype) for x in ("A", "B", "S", "V"))
    r = ramp(v * 8, 1, 8)

    def expr(x, y):
        return binary("^", binary("&", x + y, y), binary("|", x, y))

    f = func("bitwise", [A, B, S, V], loop(i, n, store(S, i, expr(load(A, i), load(B, i)))),
             loop(v, n // 8, store(V, r, expr(load(A, r), load(B, r)))))
    a, b = rand(n, dtype, rng=rng, low=-100, high=100), rand(n, dtype, rng=rng, low=-100, high=100)
    want = ((a + b) & b) ^ (a | b)
    check(f, [a, b, rand(n, dtype, rng=rng), rand(n, dtype, rng=rng)], {2: want, 3: want})


def test_bitwise_refuses_floats_and_booleans():
    with pytest.raises(dt.DTypeError, match="integer operands"):
        binary("&", const(1.0, "float32"), const(2.0, "float32"))
    with pytest.raises(dt.DTypeError, match="integer operands"):
        binary("|", const(True, "bool"), const(False, "bool"))


def test_casts(check):
    n, i, v = 16, Var("i"), Var("v")
    A, I8, I32, F, H, VI = (buf("A", [n]), buf("I8", [n], "int8"), buf("I32", [n], "int32"),
                            buf("F", [n]), buf("H", [n]), buf("VI", [n], "int32"))
    a, r = load(A, i), ramp(v * 8, 1, 8)
    f = func("casts", [A, I8, I32, F, H, VI],
             loop(i, n,
                  store(I8, i, cast("int8", cast("int64", a * 100.0))),  # truncate, then wrap
                  store(I32, i, cast("int32", a)),
                  store(F, i, cast("float32", a > 0.0) + cast("float32", i)),
                  store(H, i, cast("float32", cast("float16", a * 1000.0)))),
             loop(v, n // 8, store(VI, r, cast("int32x8", load(A, r) * bcast(10.0, 8)))))
    x = rand(n, rng=rng, low=-4, high=4)
    with np.errstate(over="ignore"):
        want_i8 = (x * np.float32(100)).astype("int64").astype("int8")
    check(f, [x, *(rand(n, d, rng=rng) for d in ("int8", "int32", "float32", "float32", "int32"))],
          {1: want_i8, 2: x.astype("int32"), 3: (x > 0).astype("float32") + np.arange(n, dtype="float32"),
           4: (x * np.float32(1000)).astype("float16").astype("float32"),
           5: (x * np.float32(10)).astype("int32")})


def test_bool_vector_casts(check):
    n, v = 16, Var("v")
    A, F, M = buf("A", [n]), buf("F", [n]), buf("M", [n], "bool")
    r = ramp(v * 8, 1, 8)
    f = func("boolcasts", [A, F, M], loop(
        v, n // 8,
        store(F, r, cast("float32x8", load(M, r)) + cast("float32x8", load(A, r) > bcast(0.0, 8))),
        store(M, r, cast("boolx8", load(A, r))),
    ))
    a, m = rand(n, rng=rng), rand(n, "bool", rng=rng)
    a[3] = 0.0
    check(f, [a, rand(n, rng=rng), m], {1: m.astype("float32") + (a > 0), 2: a != 0})


def test_local_scratch_allocate(check):
    """Each row is reversed through a 16-element stack scratch buffer."""
    rows, i, j = 5, Var("i"), Var("j")
    A, C = buf("A", [rows, 16]), buf("C", [rows, 16])
    T = buf("T", [16], scope="local")
    f = func("scratch", [A, C], loop(i, rows, Allocate(T, seq(
        loop(j, 16, store(T, j, load(A, i * 16 + j) * 2.0)),
        loop(j, 16, store(C, i * 16 + j, load(T, 15 - j) + 1.0)))), kind="parallel"))
    a = rand((rows, 16), rng=rng)
    check(f, [a, rand((rows, 16), rng=rng)], {1: a[:, ::-1] * 2 + 1})


def test_global_allocate_symbolic_size(check):
    n, i = Var("n"), Var("i")
    A, C = buf("A", [n]), buf("C", [n])
    T = buf("T", [n, 2], "float64")
    body = seq(
        loop(i, n, store(T, i * 2, cast("float64", load(A, i))), store(T, i * 2 + 1, const(1.0, "float64"))),
        loop(i, n, store(C, i, cast("float32", load(T, (n - 1 - i) * 2) + load(T, i * 2 + 1)))))
    f = func("heap", [A, C], Allocate(T, body))
    a = rand(37, rng=rng)
    check(f, [a, rand(37, rng=rng)], {1: a[::-1] + 1})


def test_if_then_else_unrolled_and_simd_loops(check):
    n, i, j, k = 24, Var("i"), Var("j"), Var("k")
    A, C, D = buf("A", [n]), buf("C", [n]), buf("D", [n])
    f = func("loops", [A, C, D],
             loop(i, n, IfThenElse(load(A, i) > 0.0, store(C, i, load(A, i)), store(C, i, 0.0)),
                  kind="unrolled"),
             loop(j, n // 4, loop(k, 4, store(D, j * 4 + k, load(A, j * 4 + k) * 3.0), kind="vectorized"),
                  kind="parallel"),
             Evaluate(const(0)))
    a = rand(n, rng=rng)
    check(f, [a, rand(n, rng=rng), rand(n, rng=rng)], {1: np.maximum(a, 0), 2: a * 3})


def test_awkward_names(check):
    """Two variables named i in one nest, names that are C keywords or libm functions, dots."""
    i_outer, i_inner = Var("i"), Var("i")
    A, C = buf("exp", [4, 4]), buf("A.out", [4, 4])
    n = Var("int")
    B = buf("double", [n])
    f = func("sqrt", [A, C, B], loop(i_outer, 4, loop(i_inner, 4, store(
        C, i_outer * 4 + i_inner, load(A, i_outer * 4 + i_inner) + cast("float32", i_outer * 10)))))
    a = rand((4, 4), rng=rng)
    tens = np.arange(0, 40, 10, dtype="float32")[:, None]
    check(f, [a, rand((4, 4), rng=rng), rand(3, rng=rng)], {1: a + tens})


def test_constants_exact(check):
    """Float constants keep their exact value: C literals and the interpreter agree with NumPy."""
    values = [0.1, -1 / 3, 1e-30, 3.4e38, float("inf"), -float("inf"), 16777217.0]
    C, D = buf("C", [len(values)]), buf("D", [len(values)], "float64")
    stmts = [store(C, k, const(x, "float32")) for k, x in enumerate(values)]
    stmts += [store(D, k, const(x, "float64")) for k, x in enumerate(values)]
    f = func("consts", [C, D], *stmts)
    check(f, [rand(len(values), rng=rng), rand(len(values), "float64", rng=rng)],
          {0: np.array(values, dtype="float32"), 1: np.array(values)})
    nan = func("nan", [C], store(C, 0, const(float("nan"), "float32")))
    runs = check(nan, [rand(len(values), rng=rng)], {})
    assert all(np.isnan(r[0][0]) for r in runs.values())



@pytest.mark.parametrize("lanes", [16, 8, 4])
def test_vector_rint_to_int32(check, lanes):
    """cast(int32, round(x)) on vectors: one conversion by the current rounding mode where the
    target has the width (ember_rint_int32x*), rintf's values: ties to even, both signs."""
    v = Var("v")
    A, Q = buf("A", [64]), buf("Q", [64], "int32")
    r = ramp(v * lanes, 1, lanes)
    f = func("rint32", [A, Q], loop(v, 64 // lanes, store(Q, r, cast(f"int32x{lanes}", call("round", load(A, r))))))
    assert f"ember_rint_int32x{lanes}(ember_load_float32x{lanes}(" in codegen_c(f)
    a = np.concatenate([np.arange(-8, 8) + 0.5, rng.uniform(-300, 300, 48)]).astype(np.float32)
    check(f, [a, np.zeros(64, "int32")], {1: np.rint(a).astype(np.int32)})

"""The tile language's semantics in the interpreter, builtin by builtin, against NumPy: Triton's
typing, C's integer division, block shapes and indexing, reductions and their tie-breaking,
math, dot, block pointers, atomics, and the debugging builtins."""

import math

import numpy as np
import pytest
import torch
from tile_modes import launch_mode

import ember.triton as triton
import ember.triton.language as tl
from ember.errors import TileError
from ember.triton.interpreter import Semantics
from ember.triton.interpreter.values import computation_type
from ember.triton.language import core


@pytest.fixture(autouse=True)
def interpreted():
    with launch_mode("interpret"):
        yield



def test_every_builtin_has_semantics():
    assert not [name for name in core.BUILTINS if not callable(getattr(Semantics, name, None))]


# --- typing -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("a,a_weak,b,b_weak,want", [
    (tl.int32, False, tl.int64, False, tl.int64),
    (tl.int32, False, tl.float32, False, tl.float32),
    (tl.float16, False, tl.float32, False, tl.float32),
    (tl.float16, False, tl.float16, False, tl.float16),
    (tl.bfloat16, False, tl.float16, False, tl.float16),
    (tl.bfloat16, False, tl.int32, False, tl.float32),
    (tl.int8, False, tl.uint8, False, tl.uint8),
    (tl.int64, False, tl.uint32, False, tl.int64),
    (tl.int1, False, tl.int32, False, tl.int32),
    (tl.float16, False, tl.float32, True, tl.float16),  # x_fp16 * 2.0 stays float16
    (tl.int8, False, tl.int32, True, tl.int8),  # x_i8 + 1 stays int8
    (tl.int32, False, tl.float32, True, tl.float32),  # offs * 0.5 is float
    (tl.int1, False, tl.int32, True, tl.int32),
])
def test_computation_type_follows_triton(a, a_weak, b, b_weak, want):
    assert computation_type(a, a_weak, b, b_weak) == want
    assert computation_type(b, b_weak, a, a_weak) == want


def test_division_of_half_precision_is_float32():
    assert computation_type(tl.float16, False, tl.float16, False, div_or_mod=True) == tl.float32
    assert computation_type(tl.float16, False, tl.float32, True, div_or_mod=True) == tl.float32


@triton.jit
def typed_kernel(x16_ptr, i8_ptr, i32_ptr, i64_ptr, out_ptr):
    x = tl.load(x16_ptr + tl.arange(0, 4))
    tl.static_assert((x * 2.0).dtype == tl.float16)
    tl.static_assert((x / x).dtype == tl.float32)
    tl.static_assert((x + tl.load(i32_ptr + tl.arange(0, 4))).dtype == tl.float16)
    i8 = tl.load(i8_ptr + tl.arange(0, 4))
    tl.static_assert((i8 + 1).dtype == tl.int8)
    tl.static_assert((i8 + tl.load(i32_ptr + tl.arange(0, 4))).dtype == tl.int32)
    tl.static_assert((tl.load(i32_ptr) + tl.load(i64_ptr)).dtype == tl.int64)
    tl.static_assert((tl.arange(0, 4) < 2).dtype == tl.int1)
    tl.static_assert((tl.arange(0, 4) / 2).dtype == tl.float32)
    tl.static_assert(tl.program_id(0).dtype == tl.int32)
    tl.static_assert(x16_ptr.dtype.element_ty == tl.float16)
    tl.static_assert(tl.sum(i8, axis=0).dtype == tl.int32)
    tl.static_assert(tl.argmax(x, axis=0).dtype == tl.int32)
    tl.store(out_ptr + tl.arange(0, 4), (i8 * 100).to(tl.int32))  # wraps in int8, as C does


def test_kernel_values_carry_tritons_types():
    i8 = np.array([1, 2, 3, -4], np.int8)
    out = np.zeros(4, np.int32)
    typed_kernel[(1,)](np.ones(4, np.float16), i8, np.ones(4, np.int32), np.ones(1, np.int64), out)
    np.testing.assert_array_equal(out, (i8 * np.int8(100)).astype(np.int32))


@triton.jit
def scalar_args_kernel(out_ptr, i, big, f, flag):
    tl.static_assert(i.dtype == tl.int32)
    tl.static_assert(big.dtype == tl.int64)
    tl.static_assert(f.dtype == tl.float32)
    tl.static_assert(flag.dtype == tl.int1)
    tl.store(out_ptr, (i + big).to(tl.float64) + f)


def test_python_scalars_are_typed_as_triton_types_them():
    out = np.zeros(1, np.float64)
    scalar_args_kernel[(1,)](out, 3, 2**40, 0.5, True)
    assert out[0] == 3 + 2**40 + 0.5


@triton.jit
def int_div_kernel(a_ptr, b_ptr, q_ptr, r_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=1)
    b = tl.load(b_ptr + offs, mask=mask, other=1)
    tl.store(q_ptr + offs, a // b, mask=mask)
    tl.store(r_ptr + offs, a % b, mask=mask)


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32"])
def test_division_and_remainder_truncate_as_in_c(rng, dtype):
    n = 300
    a = rng.integers(-1000, 1000, n).astype(dtype)
    b = rng.integers(1, 30, n).astype(dtype) * rng.choice([-1, 1], n).astype(dtype)
    q, r = np.zeros(n, dtype), np.zeros(n, dtype)
    if dtype == "float32":
        with pytest.raises(TileError, match="// needs integers"):
            int_div_kernel[(triton.cdiv(n, 128),)](a, b, q, r, n, BLOCK=128)
        return
    int_div_kernel[(triton.cdiv(n, 128),)](a, b, q, r, n, BLOCK=128)
    np.testing.assert_array_equal(q, np.trunc(a / b).astype(dtype))
    np.testing.assert_array_equal(r, np.fmod(a, b))
    assert (np.sign(r) * np.sign(a) >= 0).all()  # the remainder has the dividend's sign


@triton.jit
def float_mod_kernel(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(a_ptr + offs) % tl.load(b_ptr + offs))


def test_float_remainder_is_fmod(rng):
    a = rng.standard_normal(64).astype("float32") * 10
    b = rng.standard_normal(64).astype("float32")
    out = np.zeros(64, np.float32)
    float_mod_kernel[(1,)](a, b, out, BLOCK=64)
    np.testing.assert_allclose(out, np.fmod(a, b), rtol=1e-6, atol=1e-6)


@triton.jit
def cast_kernel(x_ptr, i_ptr, h_ptr, bits_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(i_ptr + offs, x.to(tl.int32))
    tl.store(h_ptr + offs, x.to(tl.bfloat16).to(tl.float32))
    tl.store(bits_ptr + offs, x.to(tl.int32, bitcast=True))


def test_casts_truncate_round_and_bitcast(rng):
    import ml_dtypes

    x = (rng.standard_normal(16) * 100).astype("float32")
    i, h, bits = np.zeros(16, np.int32), np.zeros(16, np.float32), np.zeros(16, np.int32)
    cast_kernel[(1,)](x, i, h, bits, BLOCK=16)
    np.testing.assert_array_equal(i, np.trunc(x).astype(np.int32))
    np.testing.assert_array_equal(h, x.astype(ml_dtypes.bfloat16).astype(np.float32))
    np.testing.assert_array_equal(bits, x.view(np.int32))


# --- programs, shapes and indexing -------------------------------------------------------------------------

@triton.jit
def grid_kernel(out_ptr):
    x, y, z = tl.program_id(0), tl.program_id(1), tl.program_id(axis=2)
    nx, ny = tl.num_programs(0), tl.num_programs(1)
    tl.store(out_ptr + x + nx * (y + ny * z), x + 10 * y + 100 * z + 1000 * tl.num_programs(2))


def test_program_ids_cover_a_3d_grid():
    out = np.zeros(3 * 2 * 4, np.int32)
    grid_kernel[(3, 2, 4)](out)
    x, y, z = np.meshgrid(np.arange(3), np.arange(2), np.arange(4), indexing="ij")
    want = np.zeros((4, 2, 3), np.int32)
    want[z, y, x] = x + 10 * y + 100 * z + 4000
    np.testing.assert_array_equal(out, want.reshape(-1))


@triton.jit
def outer_kernel(x_ptr, y_ptr, out_ptr, outT_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm, rn = tl.arange(0, BM), tl.arange(0, BN)
    x = tl.load(x_ptr + rm, mask=rm < M, other=0.0)
    y = tl.load(y_ptr + rn, mask=rn < N, other=0.0)
    prod = x[:, None] * y[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], prod, mask=mask)
    tl.store(outT_ptr + rn[:, None] * M + rm[None, :], prod.T, mask=mask.T)


def test_broadcasting_with_none_indexing_and_transpose(rng):
    M, N = 13, 7
    x, y = rng.standard_normal(M, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    out, outT = np.zeros((M, N), np.float32), np.zeros((N, M), np.float32)
    outer_kernel[(1,)](x, y, out, outT, M, N, BM=16, BN=8)
    np.testing.assert_array_equal(out, np.outer(x, y))
    np.testing.assert_array_equal(outT, np.outer(x, y).T)


@triton.jit
def reshape_kernel(x_ptr, out_ptr, perm_ptr):
    x = tl.load(x_ptr + tl.arange(0, 32))
    m = x.reshape(4, 8)
    tl.store(out_ptr + tl.arange(0, 32), tl.reshape(tl.trans(m), (32,)))
    p = tl.permute(tl.reshape(x, 2, 4, 4), (2, 0, 1))
    tl.store(perm_ptr + tl.arange(0, 32), tl.ravel(p))


def test_reshape_trans_permute(rng):
    x = rng.standard_normal(32, dtype=np.float32)
    out, perm = np.zeros(32, np.float32), np.zeros(32, np.float32)
    reshape_kernel[(1,)](x, out, perm)
    np.testing.assert_array_equal(out, x.reshape(4, 8).T.reshape(-1))
    np.testing.assert_array_equal(perm, x.reshape(2, 4, 4).transpose(2, 0, 1).reshape(-1))


# --- reductions ------------------------------------------------------------------------------------------

@triton.jit
def reduce_kernel(x_ptr, sum_ptr, max_ptr, min_ptr, all_ptr, keep_ptr, R: tl.constexpr, C: tl.constexpr,
                  AXIS: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    n = R if AXIS == 1 else C
    other = tl.arange(0, n)
    tl.store(sum_ptr + other, tl.sum(x, axis=AXIS))
    tl.store(max_ptr + other, tl.max(x, axis=AXIS))
    tl.store(min_ptr + other, x.min(AXIS))
    tl.store(all_ptr, tl.sum(x))
    kept = tl.max(x, axis=AXIS, keep_dims=True)
    tl.static_assert(len(kept.shape) == 2)
    tl.store(keep_ptr + other, tl.reshape(kept, (n,)))


@pytest.mark.parametrize("axis", [0, 1])
def test_reductions_along_an_axis(rng, axis):
    x = rng.standard_normal((8, 16), dtype=np.float32)
    n = x.shape[1 - axis]
    s, mx, mn, keep = (np.zeros(n, np.float32) for _ in range(4))
    total = np.zeros(1, np.float32)
    reduce_kernel[(1,)](x, s, mx, mn, total, keep, R=8, C=16, AXIS=axis)
    np.testing.assert_allclose(s, x.sum(axis=axis), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(mx, x.max(axis=axis))
    np.testing.assert_array_equal(mn, x.min(axis=axis))
    np.testing.assert_array_equal(keep, x.max(axis=axis))
    np.testing.assert_allclose(total, x.sum(), rtol=1e-5)


@triton.jit
def argmax_kernel(x_ptr, first_ptr, last_ptr, minfirst_ptr, val_ptr, idx_ptr, C: tl.constexpr):
    rows = tl.arange(0, 4)
    x = tl.load(x_ptr + rows[:, None] * C + tl.arange(0, C)[None, :])
    tl.store(first_ptr + rows, tl.argmax(x, axis=1))
    tl.store(last_ptr + rows, tl.argmax(x, axis=1, tie_break_left=False))
    tl.store(minfirst_ptr + rows, tl.argmin(x, 1))
    value, index = tl.max(x, axis=1, return_indices=True)
    tl.store(val_ptr + rows, value)
    tl.store(idx_ptr + rows, index)


def test_argmax_and_argmin_break_ties_as_asked(rng):
    x = rng.integers(0, 3, (4, 16)).astype(np.float32)  # many ties
    first, last, minfirst, idx = (np.zeros(4, np.int32) for _ in range(4))
    val = np.zeros(4, np.float32)
    argmax_kernel[(1,)](x, first, last, minfirst, val, idx, C=16)
    np.testing.assert_array_equal(first, x.argmax(axis=1))
    np.testing.assert_array_equal(x[np.arange(4), last], x.max(axis=1))  # Triton leaves which one open
    np.testing.assert_array_equal(last, 15 - x[:, ::-1].argmax(axis=1))  # the interpreter takes the last
    np.testing.assert_array_equal(minfirst, x.argmin(axis=1))
    np.testing.assert_array_equal(val, x.max(axis=1))
    np.testing.assert_array_equal(idx, x.argmax(axis=1))


@triton.jit
def scan_kernel(x_ptr, out_ptr, rev_ptr, B: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, B))
    tl.store(out_ptr + tl.arange(0, B), tl.cumsum(x, 0))
    tl.store(rev_ptr + tl.arange(0, B), tl.cumsum(x, axis=0, reverse=True))


def test_cumsum_forward_and_reverse(rng):
    x = rng.integers(-50, 50, 32).astype(np.int32)
    out, rev = np.zeros(32, np.int32), np.zeros(32, np.int32)
    scan_kernel[(1,)](x, out, rev, B=32)
    np.testing.assert_array_equal(out, np.cumsum(x))
    np.testing.assert_array_equal(rev, np.cumsum(x[::-1])[::-1])


# --- elementwise and math -----------------------------------------------------------------------------------

MATH = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
        "rsqrt": lambda v: 1 / np.sqrt(v), "abs": np.abs, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "erf": np.vectorize(math.erf), "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "floor": np.floor,
        "ceil": np.ceil}


@triton.jit
def math_kernel(x_ptr, out_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=1.0)
    if FN == "exp":
        y = tl.exp(x)
    elif FN == "exp2":
        y = tl.exp2(x)
    elif FN == "log":
        y = tl.log(x)
    elif FN == "log2":
        y = tl.log2(x)
    elif FN == "sqrt":
        y = tl.sqrt(x)
    elif FN == "rsqrt":
        y = tl.rsqrt(x)
    elif FN == "abs":
        y = tl.abs(x)
    elif FN == "sigmoid":
        y = tl.sigmoid(x)
    elif FN == "erf":
        y = tl.erf(x)
    elif FN == "tanh":
        y = tl.tanh(x)
    elif FN == "sin":
        y = tl.sin(x)
    elif FN == "cos":
        y = x.cos()
    elif FN == "floor":
        y = tl.floor(x)
    else:
        y = tl.ceil(x)
    tl.static_assert(y.dtype == x.dtype)
    tl.store(out_ptr + offs, y, mask=offs < n)


@pytest.mark.parametrize("fn", sorted(MATH))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_math_functions(rng, fn, dtype):
    x = rng.uniform(0.1, 4, 50).astype(dtype) * (1 if fn in ("log", "log2", "sqrt", "rsqrt") else
                                                 rng.choice([-1, 1], 50).astype(dtype))
    out = np.zeros(50, dtype)
    math_kernel[(1,)](x, out, 50, FN=fn, BLOCK=64)
    tol = 1e-6 if dtype == "float32" else 1e-3
    np.testing.assert_allclose(out, MATH[fn](x.astype("float64")).astype(dtype), rtol=tol, atol=tol)


@triton.jit
def where_kernel(x_ptr, y_ptr, w_ptr, mx_ptr, mn_ptr, c_ptr, B: tl.constexpr):
    offs = tl.arange(0, B)
    x, y = tl.load(x_ptr + offs), tl.load(y_ptr + offs)
    tl.store(w_ptr + offs, tl.where(x > y, x, 0.0))
    tl.store(mx_ptr + offs, tl.maximum(x, y))
    tl.store(mn_ptr + offs, tl.minimum(x, y))
    tl.store(c_ptr + offs, tl.clamp(x, -0.5, 0.5))


def test_where_maximum_minimum_clamp(rng):
    x, y = rng.standard_normal(32, dtype=np.float32), rng.standard_normal(32, dtype=np.float32)
    w, mx, mn, c = (np.zeros(32, np.float32) for _ in range(4))
    where_kernel[(1,)](x, y, w, mx, mn, c, B=32)
    np.testing.assert_array_equal(w, np.where(x > y, x, 0))
    np.testing.assert_array_equal(mx, np.maximum(x, y))
    np.testing.assert_array_equal(mn, np.minimum(x, y))
    np.testing.assert_array_equal(c, np.clip(x, -0.5, 0.5))


# --- dot -------------------------------------------------------------------------------------------------

@triton.jit
def dot_kernel(a_ptr, b_ptr, acc_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    acc = tl.load(acc_ptr + rm[:, None] * N + rn[None, :])
    c = tl.dot(a, b, acc)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], c)


@pytest.mark.parametrize("dtype,acc_dtype", [("float16", "float32"), ("bfloat16", "float32"),
                                             ("float32", "float32"), ("int8", "int32")])
def test_dot_accumulates_in_the_wider_type(rng, dtype, acc_dtype):
    import ml_dtypes

    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    a = (rng.standard_normal((16, 32)) * 8).astype(np_dtype)
    b = (rng.standard_normal((32, 16)) * 8).astype(np_dtype)
    acc = rng.integers(-5, 5, (16, 16)).astype(acc_dtype)
    out = np.zeros((16, 16), acc_dtype)
    dot_kernel[(1,)](a, b, acc, out, M=16, N=16, K=32)
    want = a.astype("float64") @ b.astype("float64") + acc
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-3)


# --- memory ----------------------------------------------------------------------------------------------

@triton.jit
def masked_load_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=-7.0))


def test_masked_load_fills_with_other(rng):
    x = rng.standard_normal(5, dtype=np.float32)
    out = np.zeros(8, np.float32)
    masked_load_kernel[(1,)](x, out, 5, BLOCK=8)
    np.testing.assert_array_equal(out, np.concatenate([x, np.full(3, -7.0, np.float32)]))


@triton.jit
def block_ptr_kernel(x_ptr, out_ptr, M, N, stride_m, stride_n, BM: tl.constexpr, BN: tl.constexpr,
                     PADDING: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    src = tl.make_block_ptr(base=x_ptr, shape=(M, N), strides=(stride_m, stride_n), offsets=(0, pid_n * BN),
                            block_shape=(BM, BN), order=(1, 0))
    src = tl.advance(src, (pid_m * BM, 0))
    block = tl.load(src, boundary_check=(0, 1), padding_option=PADDING)
    dst = tl.make_block_ptr(out_ptr, (M + BM, N + BN), (N + BN, 1), (pid_m * BM, pid_n * BN), (BM, BN), (1, 0))
    tl.store(dst, block)


@pytest.mark.parametrize("padding", ["zero", "nan"])
def test_block_pointers_check_their_boundaries(rng, padding):
    M, N, BM, BN = 10, 13, 8, 8
    x = rng.standard_normal((M, 2 * N), dtype=np.float32)[:, ::2]  # strided
    out = np.full((M + BM, N + BN), 5.0, np.float32)
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    block_ptr_kernel[grid](x, out, M, N, x.strides[0] // 4, x.strides[1] // 4, BM=BM, BN=BN, PADDING=padding)
    window = out[:16, :16]
    inside = (np.arange(16)[:, None] < M) & (np.arange(16)[None, :] < N)
    np.testing.assert_array_equal(out[:M, :N], x)
    assert (np.isnan(window[~inside]) if padding == "nan" else window[~inside] == 0).all()


@triton.jit
def atomic_kernel(counter_ptr, old_ptr, max_ptr, vals_ptr, B: tl.constexpr):
    offs = tl.arange(0, B)
    ones = tl.full((B,), 1, tl.int32)
    old = tl.atomic_add(counter_ptr + offs * 0, ones)  # every lane on one element
    tl.store(old_ptr + offs, old)
    tl.atomic_max(max_ptr + offs % 4, tl.load(vals_ptr + offs))


def test_atomics_return_the_old_values_lane_by_lane(rng):
    counter, old = np.array([10], np.int32), np.zeros(16, np.int32)
    vals = rng.integers(-100, 100, 16).astype(np.int32)
    mx = np.full(4, -1000, np.int32)
    atomic_kernel[(3,)](counter, old, mx, vals, B=16)
    assert counter[0] == 10 + 3 * 16
    np.testing.assert_array_equal(old, 10 + 2 * 16 + np.arange(16))  # the last program's view
    np.testing.assert_array_equal(mx, vals.reshape(4, 4).max(axis=0))


@triton.jit
def lock_kernel(lock_ptr, total_ptr, seen_ptr):
    pid = tl.program_id(0)
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    seen = tl.atomic_xchg(seen_ptr, pid)
    tl.store(total_ptr, tl.load(total_ptr) + seen)
    tl.atomic_xchg(lock_ptr, 0)


def test_a_spin_lock_with_cas_and_xchg():
    lock, total, seen = np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1, np.int32)
    lock_kernel[(6,)](lock, total, seen)
    assert lock[0] == 0 and seen[0] == 5 and total[0] == sum(range(5))


@triton.jit
def cas_kernel(x_ptr, cmp_ptr, old_ptr, B: tl.constexpr):
    offs = tl.arange(0, B)
    tl.store(old_ptr + offs, tl.atomic_cas(x_ptr + offs, tl.load(cmp_ptr + offs), offs + 100))


def test_atomic_cas_swaps_where_equal(rng):
    x = rng.integers(0, 3, 16).astype(np.int32)
    cmp = rng.integers(0, 3, 16).astype(np.int32)
    before, old = x.copy(), np.zeros(16, np.int32)
    cas_kernel[(1,)](x, cmp, old, B=16)
    np.testing.assert_array_equal(old, before)
    np.testing.assert_array_equal(x, np.where(before == cmp, np.arange(16) + 100, before))


# --- functions, loops, constexprs ---------------------------------------------------------------------------

@triton.jit
def square(x):
    return x * x


@triton.jit
def add_squares(a, b):
    return square(a) + square(b)


@triton.jit
def loops_kernel(x_ptr, out_ptr, n, UNROLL: tl.constexpr, MODE: tl.constexpr, BLOCK: tl.constexpr):
    tl.static_assert(isinstance(BLOCK, int) and BLOCK == 16)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in tl.range(0, n, BLOCK, num_stages=2):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    for i in tl.static_range(UNROLL):
        acc = acc + i
    if MODE == "squares":
        acc = add_squares(acc, acc)
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


@pytest.mark.parametrize("mode", ["squares", "plain"])
def test_loops_nested_functions_and_constexpr_strings(rng, mode):
    n = 100
    x = rng.standard_normal(n, dtype=np.float32)
    out = np.zeros(16, np.float32)
    loops_kernel[(1,)](x, out, n, UNROLL=3, MODE=mode, BLOCK=16)
    want = np.zeros(16, np.float32)
    for start in range(0, n, 16):
        chunk = x[start:start + 16]
        want[:len(chunk)] += chunk
    want += 3
    if mode == "squares":
        want = 2 * want * want
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_a_constexpr_default_and_a_grid_function(rng):
    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, FACTOR: tl.constexpr = 3, BLOCK: tl.constexpr = 32):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * FACTOR, mask=offs < n)

    x = rng.standard_normal(70, dtype=np.float32)
    out = np.zeros(70, np.float32)
    scale_kernel[lambda meta: (triton.cdiv(70, meta["BLOCK"]),)](x, out, 70, num_warps=8)
    np.testing.assert_allclose(out, x * 3, rtol=1e-6)


def test_strided_torch_tensors(rng):
    @triton.jit
    def copy2d(x_ptr, out_ptr, M, N, sxm, sxn, BM: tl.constexpr, BN: tl.constexpr):
        rm, rn = tl.arange(0, BM), tl.arange(0, BN)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        v = tl.load(x_ptr + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask)
        tl.store(out_ptr + rm[:, None] * N + rn[None, :], v, mask=mask)

    x = torch.randn(9, 12).t()[2:]  # transposed, not starting at the storage's start
    out = torch.zeros(x.shape)
    copy2d[(1,)](x, out, x.shape[0], x.shape[1], x.stride(0), x.stride(1), BM=16, BN=16)
    torch.testing.assert_close(out, x, rtol=0, atol=0)
    y = rng.standard_normal((9, 12), dtype=np.float32)[::-1, ::-2]  # negative strides reach backwards
    out = np.zeros(y.shape, np.float32)
    copy2d[(1,)](y, out, y.shape[0], y.shape[1], y.strides[0] // 4, y.strides[1] // 4, BM=16, BN=8)
    np.testing.assert_array_equal(out, y)


# --- debugging -------------------------------------------------------------------------------------------

@triton.jit
def debug_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.device_print("x = ", x)
    print("python print", tl.program_id(0))
    tl.static_print("static", BLOCK)
    tl.device_assert(x >= 0, "x must not be negative", mask=offs < n)
    breakpoint()
    tl.debug_barrier()


def test_print_and_breakpoint_work_inside_a_kernel(capsys, monkeypatch):
    stops = []
    monkeypatch.setattr("sys.breakpointhook", lambda *a, **k: stops.append(1))
    debug_kernel[(2,)](np.arange(3, dtype=np.int32), 3, BLOCK=4)
    out = capsys.readouterr().out
    assert "pid (0, 0, 0) x = [0 1 2 0]" in out and "pid (1, 0, 0) x = " in out
    assert "python print 1" in out and "static 4" in out
    assert stops == [1, 1]


def test_device_assert_fails_with_its_message(monkeypatch):
    monkeypatch.setattr("sys.breakpointhook", lambda *a, **k: None)
    with pytest.raises(TileError, match=r"program \(0, 0, 0\).*device_assert failed at index \(1,\).*not be "
                                        r"negative"):
        debug_kernel[(1,)](np.array([1, -2, 3], np.int32), 3, BLOCK=4)


def test_static_assert_fails_with_its_message():
    @triton.jit
    def k(BLOCK: tl.constexpr):
        tl.static_assert(BLOCK % 16 == 0, "BLOCK must be a multiple of 16")

    with pytest.raises(TileError, match="static_assert failed: BLOCK must be a multiple of 16"):
        k[(1,)](BLOCK=8)
    k[(1,)](BLOCK=32)


def test_triton_interpret_is_read_too(monkeypatch, rng):
    monkeypatch.delenv("EMBER_INTERPRET", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x = rng.standard_normal(5, dtype=np.float32)
    out = np.zeros(8, np.float32)
    masked_load_kernel[(1,)](x, out, 5, BLOCK=8)
    np.testing.assert_array_equal(out[:5], x)

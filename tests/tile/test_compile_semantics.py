"""Where the compiler follows Triton's semantics (as the interpreter does): C's integer division
and remainder, fmod, bitwise operators between run-time integers, builtins of constants only,
half-float division in float32, math as block methods and under tl.math, xor_sum and umulhi.
Each kernel runs compiled and interpreted, against NumPy."""

import numpy as np
import pytest
from tile_modes import HAS_COMPILER, MODES, launch_mode

import ember.triton as triton
import ember.triton.language as tl
from ember.errors import TileError

rng = np.random.default_rng()


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def c_div(a, b):
    """C's integer division: toward zero."""
    q = np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64)) * np.sign(a) * np.sign(b)
    return q.astype(a.dtype)


@triton.jit
def int_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1)
    y = tl.load(y_ptr + offs, mask=m, other=1)
    tl.store(out_ptr + 0 * n + offs, x // y, mask=m)
    tl.store(out_ptr + 1 * n + offs, x % y, mask=m)
    tl.store(out_ptr + 2 * n + offs, x & y, mask=m)
    tl.store(out_ptr + 3 * n + offs, x | y, mask=m)
    tl.store(out_ptr + 4 * n + offs, (x ^ y) + (x & 6) - (y | -8), mask=m)
    tl.store(out_ptr + 5 * n + offs, x % 7 + x // -3, mask=m)
    tl.store(out_ptr + 6 * n + offs, tl.umulhi(x, y), mask=m)
    tl.store(out_ptr + 7 * n + offs, ((x > 0) ^ (y > 0)).to(x.dtype), mask=m)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_integer_division_truncates_and_bitwise(mode, dtype):
    n = 203
    x = rng.integers(-100, 100, n).astype(dtype)
    y = rng.integers(-9, 10, n).astype(dtype)
    y[y == 0] = 5
    x[:4], y[:4] = [-7, 7, -7, 7], [2, -2, -2, 2]
    out = np.zeros(8 * n, dtype)
    with launch_mode(mode):
        if dtype != "int32":  # umulhi takes 32-bit integers only
            with pytest.raises(TileError, match="umulhi"):
                int_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
            return
        int_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    q = c_div(x, y)
    wide = x.astype(np.int64) * y.astype(np.int64)
    want = [q, x - q * y, x & y, x | y, (x ^ y) + (x & 6) - (y | -8),
            x - c_div(x, np.full_like(x, 7)) * 7 + c_div(x, np.full_like(x, -3)), (wide >> 32).astype(dtype),
            ((x > 0) ^ (y > 0)).astype(dtype)]
    for k, w in enumerate(want):
        np.testing.assert_array_equal(out[k * n:(k + 1) * n], w, err_msg=f"output {k}")


@triton.jit
def float_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    y = tl.load(y_ptr + offs, mask=m, other=1.0)
    q = x / y
    tl.static_assert(q.dtype == tl.float32)  # half floats divide in float32, as Triton does
    tl.store(out_ptr + 0 * n + offs, q, mask=m)
    tl.store(out_ptr + 1 * n + offs, (x % y).to(tl.float32), mask=m)
    tl.store(out_ptr + 2 * n + offs, x.exp2().to(tl.float32), mask=m)
    tl.store(out_ptr + 3 * n + offs, tl.math.exp2(x).to(tl.float32), mask=m)
    tl.store(out_ptr + 4 * n + offs, (x.cos() + x.sin() + tl.math.log2(x.abs() + 1)).to(tl.float32), mask=m)
    tl.store(out_ptr + 5 * n + offs, (x + tl.maximum(-2.0, -2.5) * tl.minimum(3, 5)).to(tl.float32), mask=m)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_float_remainder_half_division_and_methods(mode, dtype):
    n = 150
    x = (rng.standard_normal(n) * 4).astype(dtype)
    y = (rng.standard_normal(n) + np.where(rng.random(n) < 0.5, -2, 2)).astype(dtype)
    out = np.zeros(6 * n, np.float32)
    with launch_mode(mode):
        float_kernel[(triton.cdiv(n, 32),)](x, y, out, n, BLOCK=32)
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    half = dtype == "float16"
    with np.errstate(all="ignore"):
        want = [x32 / y32, np.fmod(x, y), np.exp2(x), np.exp2(x),
                np.cos(x32) + np.sin(x32) + np.log2(np.abs(x32) + 1), x32 - 6.0]
    tol = {0: 1e-6, 1: 0, 2: 1e-3 if half else 2e-6, 3: 1e-3 if half else 2e-6, 4: 2e-3 if half else 1e-5, 5: 0}
    for k, w in enumerate(want):
        np.testing.assert_allclose(out[k * n:(k + 1) * n], np.asarray(w, np.float32), rtol=tol[k], atol=tol[k],
                                   err_msg=f"output {k}")


@triton.jit
def xor_sum_kernel(x_ptr, out_ptr, R, C, BR: tl.constexpr, BC: tl.constexpr):
    rows, cols = tl.arange(0, BR), tl.arange(0, BC)
    m = (rows[:, None] < R) & (cols[None, :] < C)
    x = tl.load(x_ptr + rows[:, None] * C + cols[None, :], mask=m, other=0)
    tl.store(out_ptr + rows, x.xor_sum(axis=1), mask=rows < R)
    tl.store(out_ptr + R + cols, tl.xor_sum(x, axis=0), mask=cols < C)


@pytest.mark.parametrize("mode", MODES)
def test_xor_sum(mode):
    R, C = 13, 21
    x = rng.integers(-2**31, 2**31 - 1, (R, C)).astype(np.int32)
    out = np.zeros(R + C, np.int32)
    with launch_mode(mode):
        xor_sum_kernel[(1,)](x, out, R, C, BR=16, BC=32)
    np.testing.assert_array_equal(out[:R], np.bitwise_xor.reduce(x, axis=1))
    np.testing.assert_array_equal(out[R:], np.bitwise_xor.reduce(x, axis=0))


@triton.jit
def float_floordiv_kernel(x_ptr):
    x = tl.load(x_ptr)
    tl.store(x_ptr, x // 2.0)


@pytest.mark.parametrize("mode", MODES)
def test_float_floor_division_is_refused(mode):
    x = rng.random(1).astype(np.float32)
    with launch_mode(mode), pytest.raises(TileError, match="//"):
        float_floordiv_kernel[(1,)](x)


@pytest.mark.skipif(not HAS_COMPILER, reason="ember.triton.compiler is not in this tree")
def test_bitwise_is_one_operator_in_the_loop_ir():
    n = 64
    x, y, out = (np.ones(8 * n, np.int32) for _ in range(3))
    ir = int_kernel.ir(x, y, out, n, BLOCK=64)
    assert " ^ " in ir and " & " in ir and " | " in ir


@triton.jit
def index_kernel(x_ptr, out_ptr, n, C: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + (offs % C) * 7 + offs // C, mask=offs < n), mask=offs < n)


@pytest.mark.skipif(not HAS_COMPILER, reason="ember.triton.compiler is not in this tree")
def test_division_of_indices_is_the_floor():
    """Indices are never negative: their // and % are the loop IR's own, without a sign test."""
    x, out = rng.standard_normal(1000).astype(np.float32), np.zeros(100, np.float32)
    assert "select" not in index_kernel.ir(x, out, 100, C=10, BLOCK=64).split("else:")[0]
    index_kernel[(2,)](x, out, 100, C=10, BLOCK=64)
    offs = np.arange(100)
    np.testing.assert_array_equal(out, x[(offs % 10) * 7 + offs // 10])

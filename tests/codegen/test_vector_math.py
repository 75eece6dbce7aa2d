"""The generated C's vector math (ember/codegen/c_vmath.py): accuracy in ULP over float32 sweeps,
edge values, and vector lanes that agree bit for bit with the scalar code of a loop's tail."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from ember import te
from ember.codegen import c_vmath
from ember.codegen.c import codegen_c
from ember.codegen.c_vmath import VECTOR_MATH
from ember.kernel import build, lower

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.vector_math import FUNCTIONS, accuracy, evaluate, kernel, same_bits, ulp_errors  # noqa: E402
from benchmarks.vector_math_fit import FITS, fit  # noqa: E402

MAX_ULP = 4.0
F32 = np.finfo(np.float32)
SUBNORMALS = [1e-45, 1e-40, 1.1754942e-38]  # the smallest, one in the middle, the largest
COMMON = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, F32.max, -F32.max, F32.tiny, -F32.tiny,
          *SUBNORMALS, *(-x for x in SUBNORMALS)]
# per function, the values where its behaviour changes: overflow and underflow thresholds, the
# switch between two formulas, saturation
EDGES = {
    "exp": [88.72283, 88.72284, 89.0, -87.33654, -87.33655, -103.27893, -103.972, -103.98, -104.0, -105.0,
            0.34657359, -0.34657359, 1e-8, -1e-8],
    "log": [0.70710677, 0.7071068, 1.4142135, 1.4142137, 2.0, 0.5, 1.0000001, 0.99999994, 1e38, -1e-40],
    "tanh": [0.625, 0.62499994, -0.625, 9.0, 9.1, -9.1, 44.0, 1e-20, -1e-20, 1e-3],
    "erf": [0.875, 0.87499994, -0.875, 3.9, 3.92, 4.0, 4.1, -4.1, 1e-20, -1e-20, 1e-3],
    "sigmoid": [-87.0, -88.8, -100.0, -103.0, -104.0, -110.0, 17.0, 17.33, 88.8, 1e-20, -1e-20],
    "expm1": [-30.0, -17.0, 10.0, 88.72283, 88.72284, 5.9604645e-08, -5.9604645e-08, 0.34657359, -0.34657359,
              1e-8, -1e-8],
    "log1p": [-1.0, -0.99999994, -1.0000001, -0.29289323, 0.41421357, 5.9604645e-08, -5.9604645e-08, 1e-8,
              -1e-8, 1e38],
}
LANES = (4, 8, 16)


@pytest.fixture(scope="module", params=list(FUNCTIONS))
def function(request):
    return request.param


def test_vector_math_covers_the_intrinsics_of_the_sweep():
    assert set(FUNCTIONS) < set(VECTOR_MATH["float32"])


def test_within_4_ulp_over_float32(function):
    """Every 4099th bit pattern of float32 (about a million values, both signs, NaNs, infinities)
    and the regions where the function changes, densely."""
    err, at, count, same = accuracy(function, 4099, dense=1 << 16)
    assert count > 1_000_000
    assert err <= MAX_ULP, f"{function}: {err:.2f} ULP at x = {at!r}"
    assert same, f"{function}: the scalar and vector loops differ"


def _edge_inputs(function: str) -> np.ndarray:
    values = np.float32(COMMON + EDGES[function])
    with np.errstate(over="ignore"):
        ulp_apart = [np.nextafter(values, np.float32(np.inf)), np.nextafter(values, np.float32(-np.inf))]
    return np.concatenate([values, *ulp_apart])


@pytest.mark.parametrize("lanes", LANES)
def test_edge_values(function, lanes):
    """±0, ±inf, NaN, subnormals, the thresholds and their neighbours: the reference's value
    (within 4 ULP; the same infinity, NaN, and sign of zero), at every position of a vector and in
    the scalar loop, at every vector width alike."""
    fn, ref, _ = FUNCTIONS[function]
    x = _edge_inputs(function)
    x = np.concatenate([np.roll(x, k) for k in range(lanes)])  # each value in each lane
    s, v = evaluate(kernel(fn, 256, lanes), x, 256)
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
    for got in (v, s):
        err = ulp_errors(got, want)
        bad = err > MAX_ULP
        assert not bad.any(), f"{function}({x[bad][:4]}) = {got[bad][:4]}, want {want[bad][:4]}"
        zero = want == 0
        assert np.array_equal(np.signbit(got[zero]), np.signbit(want[zero])), f"{function}: sign of zero"
    assert same_bits(s, v)


def test_the_same_bits_at_every_vector_width(function):
    """4, 8, 16 lanes, and 3 (in a vector type of 4)."""
    fn, _, regions = FUNCTIONS[function]
    n = 4080  # a multiple of 3 and 16
    x = np.random.default_rng().uniform(*regions[0], n).astype(np.float32)
    outs = [evaluate(kernel(fn, n, lanes), x, n)[1] for lanes in (3, *LANES)]
    for out in outs[1:]:
        assert same_bits(out, outs[0])


def test_reference_conventions():
    """What the edge test relies on from the references: tanh and erf keep -0, log(0) = -inf."""
    x = np.float64([-0.0, 0.0])
    assert np.signbit(FUNCTIONS["tanh"][1](x)).tolist() == [True, False]
    assert np.signbit(FUNCTIONS["erf"][1](x)).tolist() == [True, False]
    with np.errstate(divide="ignore", invalid="ignore"):
        assert FUNCTIONS["log"][1](np.float64([0.0, -0.0, -1.0, np.inf])).tolist()[:2] == [-np.inf, -np.inf]


@pytest.mark.parametrize("table", sorted(FITS))
def test_coefficients_are_the_fits_that_the_fit_script_prints(table):
    f, lo, hi, degree, options = FITS[table]
    written = [float.fromhex(c.rstrip("f")) for c in getattr(c_vmath, table)]
    # the same up to the last bits, which another LAPACK may round the other way
    np.testing.assert_allclose(fit(f, lo, hi, degree, **options), written, rtol=1e-5)


def _pow_kernel(n: int, lanes: int):
    a, b = te.placeholder((n,), "float32", name="A"), te.placeholder((n,), "float32", name="B")
    s_out = te.compute((n,), lambda i: te.pow(a[i], b[i]), name="S")
    v_out = te.compute((n,), lambda i: te.pow(a[i], b[i]), name="V")
    s = te.create_schedule([s_out.op, v_out.op])
    _, inner = s[v_out].split(v_out.op.axis[0], factor=lanes)
    s[v_out].vectorize(inner)
    return build(s, [a, b, s_out, v_out])


def test_pow_is_within_one_ulp_and_follows_c_at_the_edges():
    """pow computes in double: within a rounding (0.5 ULP, and 1 for safety) of the exact power;
    every pair of special values (zeros, infinities, NaN, ±1, integers odd and even, fractions)
    gives what C's powf gives (NumPy's float32 power)."""
    rng = np.random.default_rng()
    special = np.float32([0, -0.0, 1, -1, 2, -2, 3, -3, 0.5, -0.5, 1 / 3, np.inf, -np.inf, np.nan, 1e-40, -1e-40,
                          1e30, -1e30, 2.0**24 + 2, -(2.0**25)])
    gx, gy = (g.ravel() for g in np.meshgrid(special, special))
    n = 1 << 14
    m = n - len(gx)
    x = np.concatenate([gx, rng.uniform(-10, 10, m) * np.exp(rng.uniform(-15, 15, m))]).astype(np.float32)
    y = np.concatenate([gy, np.where(rng.random(m) < 0.5, np.round(rng.uniform(-9, 9, m)),
                                     rng.uniform(-20, 20, m))]).astype(np.float32)
    s, v = np.empty_like(x), np.empty_like(x)
    _pow_kernel(n, 16)(x, y, s, v)
    assert same_bits(s, v)
    with np.errstate(all="ignore"):
        err = ulp_errors(v, np.power(x.astype(np.float64), y.astype(np.float64)))
        c_pow = np.power(gx, gy)
    assert err.max() <= 1.0, f"pow({x[err.argmax()]}, {y[err.argmax()]}) off by {err.max():.2f} ULP"
    got = v[:len(gx)]
    exact = ~np.isfinite(c_pow) | (c_pow == 0) | (np.abs(c_pow) == 1) | np.isin(np.abs(c_pow), [0.5, 2, 4, 8])
    assert np.array_equal(np.isnan(got), np.isnan(c_pow))
    assert np.array_equal(got[exact & ~np.isnan(c_pow)], c_pow[exact & ~np.isnan(c_pow)])
    assert np.array_equal(np.signbit(got[c_pow == 0]), np.signbit(c_pow[c_pow == 0]))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name", sorted(VECTOR_MATH["float32"]))
def test_no_libm_call_lane_by_lane(name, dtype):
    """float32 and float16 (computed in float32) math runs on whole vectors, and scalars through
    the same code; float64 keeps libm."""
    n = 64
    args = [te.placeholder((n,), dtype, name=f"A{k}") for k in range(2 if name == "pow" else 1)]
    out = te.compute((n,), lambda i: getattr(te, name)(*(a[i] for a in args)), name="out")
    s = te.create_schedule(out.op)
    _, inner = s[out].split(out.op.axis[0], factor=16)
    s[out].vectorize(inner)
    source = codegen_c(lower(s, [*args, out], "main"))
    assert "r[l] =" not in source
    assert f"ember_{name}_float32x" in source

"""The narrow floats (float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz,
float8_e8m0fnu, float4_e2m1fn) and sub-byte integers (int4, uint4, int2, uint2) in kernels, on the
C target and the interpreter, bit for bit against ml_dtypes: every code widened, every float16
and random float32 and float64 bits narrowed (NaN of either sign and payload, infinities, values
past the largest, subnormals, -0.0), integers wrapped, data movement keeping every code; and the
bitwise operators and bitcast against their NumPy references."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ember.graph.core import TensorType
from ember.testing import build_op, check_op
from ember.tir import dtype as dt

RNG = np.random.default_rng()
MINIFLOATS = list(dt.MINIFLOATS)
SUBBYTE = list(dt.SUBBYTE_INTS)
EDGES = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -1e-45, 1e-40, 3.4e38, -3.4e38, 448, 464, 480,
                  240, 57344, 61440, 65536, 6, 7, -7, 0.25, 0.75, 1.0625, 2**-127, 2**-128, 2**127 * 1.5],
                 dtype=np.float32)


def _float32_inputs(n_random: int) -> np.ndarray:
    """Every float16 (so every narrow code, tie and subnormal of each format), random float32
    bits (NaN payloads included), and the edges."""
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    bits = RNG.integers(0, 1 << 32, n_random, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([halves, bits, EDGES])


def _codes(dtype: str) -> np.ndarray:
    """Every value of a type: each code of a narrow float, each integer of a sub-byte one."""
    if dtype in dt.MINIFLOATS:
        count = 256 if dtype.startswith("float8") else 16
        return np.arange(count, dtype=np.uint8).view(dtype)
    lo, hi = dt.int_range(dtype)
    return np.arange(lo, hi + 1).astype(dtype)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"uint{a.dtype.itemsize * 8}")


def _cast(x: np.ndarray, dtype: str, target: str) -> np.ndarray:
    (out,) = build_op("cast", [TensorType(x.shape, x.dtype.name)], {"dtype": dtype}, target).run(x)
    return out


@pytest.fixture(scope="module")
def float32_inputs():
    return _float32_inputs(1 << 16)


@pytest.mark.parametrize("dtype", MINIFLOATS + SUBBYTE)
def test_narrowing_matches_ml_dtypes(dtype, float32_inputs):
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(_bits(_cast(float32_inputs, dtype, "c")), _bits(float32_inputs.astype(dtype)))
        x = np.ascontiguousarray(float32_inputs[:: len(float32_inputs) // 3000])  # the interpreter is slow
        np.testing.assert_array_equal(_bits(_cast(x, dtype, "python")), _bits(x.astype(dtype)))
        doubles = np.concatenate([RNG.standard_normal(20000) * RNG.choice([1e-3, 1, 300, 1e5], 20000),
                                  EDGES.astype(np.float64), [1.0625 + 2**-30, 2.0**31 + 5, 2.0**30 + 3]])
        np.testing.assert_array_equal(_bits(_cast(doubles, dtype, "c")), _bits(doubles.astype(dtype)))


@pytest.mark.parametrize("dtype", MINIFLOATS + SUBBYTE)
@pytest.mark.parametrize("target", ["c", "python"])
def test_every_value_widens_exactly(dtype, target):
    x = np.resize(_codes(dtype), 1000)  # a vector body and a tail
    for to in ("float32", "float16", "float64", "int32", "int8"):
        with np.errstate(all="ignore"):
            expected = x.astype(to)
        out = _cast(x, to, target)  # NaN's bits too: ml_dtypes' quiet NaN of the code's sign
        f = x.astype(np.float64)  # to an integer: NaN and values past its range are undefined in C
        defined = (np.abs(f) <= np.iinfo(to).max) if dt.is_int(to) else slice(None)
        np.testing.assert_array_equal(_bits(out)[defined], _bits(expected)[defined], err_msg=to)


@pytest.mark.parametrize("dtype", MINIFLOATS + SUBBYTE)
def test_conversions_between_narrow_types(dtype):
    for src in ("float8_e5m2", "float8_e4m3fn", "int4", "uint2", "int8", "bfloat16"):
        x = np.resize(_codes(src) if src in dt.MINIFLOATS or src in dt.SUBBYTE_INTS
                      else RNG.integers(-128, 128, 256).astype(src) if src == "int8"
                      else _float32_inputs(100).astype(src), 700)
        if dtype in dt.SUBBYTE_INTS and dt.is_float(src):  # (inf and NaN to an integer: undefined in C)
            x = x[np.isfinite(x.astype(np.float32))]
        with np.errstate(all="ignore"):  # (a float converts through float32, as ember's reference does)
            try:
                expected = (x.astype(np.float32) if dt.is_float(src) else x).astype(dtype)
            except TypeError:  # a pair ml_dtypes has no conversion for
                continue
            if src == dtype:  # no conversion at all
                continue
            np.testing.assert_array_equal(_bits(_cast(x, dtype, "c")), _bits(expected), err_msg=src)


@pytest.mark.parametrize("dtype", MINIFLOATS + SUBBYTE)
@pytest.mark.parametrize("target", ["c", "python"])
def test_data_movement_keeps_every_code(dtype, target):
    """A transpose copies the bits (float8_e5m2's NaN payloads, which a round trip through float
    would make its one quiet NaN)."""
    for shape in ((4, 300), (16, 64), (3, 5)):  # scalar copies, gathers into vectors, a short tail
        x = RNG.permutation(np.resize(_codes(dtype), shape[0] * shape[1])).reshape(shape)
        out = check_op("transpose", [x], {"perm": (1, 0)}, rtol=0, atol=0, targets=(target,))[0]
        np.testing.assert_array_equal(_bits(out), _bits(x.T), err_msg=str(shape))
    x, idx = np.resize(_codes(dtype), (6, 50)), RNG.integers(0, 50, (9,))
    out = check_op("gather", [x, idx], {"axis": 1}, rtol=0, atol=0, targets=(target,))[0]
    np.testing.assert_array_equal(_bits(out), _bits(x[:, idx]))


@pytest.mark.parametrize("dtype", SUBBYTE)
@pytest.mark.parametrize("target", ["c", "python"])
def test_subbyte_arithmetic_wraps(dtype, target):
    a, b = (RNG.integers(*dt.int_range(dtype), size=(3, 67), endpoint=True).astype(dtype) for _ in range(2))
    for op in ("add", "sub", "mul", "maximum"):
        out = check_op(op, [a, b], None, rtol=0, atol=0, targets=(target,))[0]
        np.testing.assert_array_equal(_bits(out), _bits(get_reference(op, a, b)), err_msg=op)


def get_reference(op: str, a, b):
    from ember.ops.registry import get

    return get(op).reference([a, b], {})[0]


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"])
@pytest.mark.parametrize("target", ["c", "python"])
def test_arithmetic_in_float32(dtype, target):
    a, b = (RNG.standard_normal((5, 41)).astype(dtype) for _ in range(2))
    out = check_op("add", [a, b], None, rtol=0, atol=0, targets=(target,))[0]
    np.testing.assert_array_equal(_bits(out), _bits((a.astype(np.float32) + b.astype(np.float32)).astype(dtype)))
    check_op("max", [a], {"axes": (1,)}, rtol=0, atol=0, targets=(target,))
    check_op("relu", [a], None, rtol=0, atol=0, targets=(target,))


@pytest.mark.parametrize("dtype", SUBBYTE)
def test_subbyte_reductions(dtype):
    x = RNG.integers(*dt.int_range(dtype), size=(4, 37), endpoint=True).astype(dtype)
    for op in ("max", "min"):
        check_op(op, [x], {"axes": (1,)}, rtol=0, atol=0, targets=("c", "python"))


_KERNELS: dict = {}


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(MINIFLOATS), hnp.arrays(np.float32, st.integers(1, 70),
                                                 elements=st.floats(width=32, allow_nan=True)))
def test_narrowing_any_float32(dtype, x):
    key = (dtype, x.shape)
    if key not in _KERNELS:
        _KERNELS[key] = build_op("cast", [TensorType(x.shape, "float32")], {"dtype": dtype}, "c")
    (out,) = _KERNELS[key].run(x)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(_bits(out), _bits(x.astype(dtype)))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint32", "int64", "uint64", "int4", "uint2"])
def test_bitwise_operators(dtype):
    lo, hi = dt.int_range(dtype)
    a = RNG.integers(max(lo, -(1 << 62)), min(hi, 1 << 62), size=(4, 33), endpoint=True).astype(dtype)
    b = RNG.integers(max(lo, -(1 << 62)), min(hi, 1 << 62), size=(33,), endpoint=True).astype(dtype)
    for op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        check_op(op, [a, b], None, rtol=0, atol=0, targets=("c", "python"))
    check_op("bitwise_not", [a], None, rtol=0, atol=0, targets=("c", "python"))


@pytest.mark.parametrize("src, dst", [
    ("float32", "int32"), ("int32", "float32"), ("float64", "uint64"), ("uint64", "float64"), ("float16", "int16"),
    ("uint16", "float16"), ("bfloat16", "uint16"), ("int16", "bfloat16"), ("float8_e4m3fn", "uint8"),
    ("uint8", "float8_e5m2"), ("int8", "uint8"), ("bool", "uint8"), ("int4", "uint8"), ("uint8", "int4"),
    ("float4_e2m1fn", "int8"),
])
def test_bitcast_reads_the_bits(src, dst):
    if src in dt.MINIFLOATS or src in dt.SUBBYTE_INTS:
        x = np.resize(_codes(src), 300)
    elif src == "bool":
        x = RNG.random(300) < 0.5
    elif dt.is_float(src):
        x = (RNG.standard_normal(300) * 100).astype(src)
        x[:4] = [np.inf, -np.inf, -0.0, 1e-30]
    else:
        bits = RNG.integers(0, 1 << 62, 300, dtype=np.uint64).astype(f"uint{dt.bits(src)}")
        x = bits.view(src)
        if src in ("uint16", "int16"):  # half NaNs are quieted by the float computing them
            x = x[~np.isnan(x.view(ml_dtypes.bfloat16 if dst == "bfloat16" else np.float16))]
        if src == "uint8":
            x = x[~np.isnan(x.view(dst).astype(np.float32))] if dst in dt.MINIFLOATS else x & 0x0F
    out = check_op("bitcast", [x], {"dtype": dst}, rtol=0, atol=0, targets=("c", "python"))[0]
    np.testing.assert_array_equal(_bits(out), _bits(x.view(dst)))


def test_round_tf32_keeps_ten_mantissa_bits_ties_away_from_zero():
    ulp = 2.0 ** -10  # TF32's step at 1
    exact = np.array([1 + ulp / 2, -(1 + ulp / 2), 1 + ulp / 2 - 2 ** -23, 1 + ulp * 1.5, np.inf, -np.inf, np.nan,
                      np.finfo(np.float32).max, -0.0], np.float32)
    expected = np.array([1 + ulp, -(1 + ulp), 1, 1 + 2 * ulp, np.inf, -np.inf, np.nan, np.inf, -0.0], np.float32)
    x = np.concatenate([exact, (RNG.standard_normal(300) * 10).astype(np.float32)])
    out = check_op("round_tf32", [x], None, rtol=0, atol=0, targets=("c", "python"))[0]
    np.testing.assert_array_equal(out[:len(exact)], expected)
    assert not np.any(out[len(exact):].view(np.uint32) & 0x1FFF)  # 13 low bits cleared
    np.testing.assert_allclose(out[len(exact):], x[len(exact):], rtol=2.0 ** -11, atol=0)

"""bfloat16 kernels (held as their bits in C, widened by a shift, narrowed to nearest even) on the
C target and the interpreter, against NumPy's ml_dtypes.bfloat16: rounding of ties, NaN of
either sign, infinities, overflow to infinity, -0.0; loads and stores of vector, partial-vector
and scalar widths; arithmetic, reductions and a matmul accumulated in float32."""

from __future__ import annotations

import numpy as np
import pytest

from ember.testing import check_op

BF16 = np.dtype("bfloat16")
RNG = np.random.default_rng()
TARGETS = ("c", "python")
SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, 3.4e38, -3.4e38, 1.00390625, 1.01171875, -1.00390625, -0.0,
                    1e-40, 65504.0], dtype="float32")  # ties 1 + 2^-8 (to even: 1) and 1 + 3 * 2^-8 (up)


@pytest.mark.parametrize("n", [12, 37, 64])
def test_cast_rounds_like_ml_dtypes(n):
    x = np.resize(SPECIAL, n) * RNG.choice([1, 1, 1.5], n).astype("float32")
    for target in TARGETS:
        out = check_op("cast", [x], {"dtype": "bfloat16"}, rtol=0, atol=0, targets=(target,))[0]
        np.testing.assert_array_equal(out.view("uint16")[~np.isnan(x)], x.astype(BF16).view("uint16")[~np.isnan(x)])
        assert np.isnan(out.astype("float32")[np.isnan(x)]).all()
        check_op("cast", [x.astype(BF16)], {"dtype": "float32"}, rtol=0, atol=0, targets=(target,))


def test_arithmetic_reductions_and_matmul():
    a, b = RNG.standard_normal((6, 40)).astype(BF16), RNG.standard_normal((40, 24)).astype(BF16)
    for target in TARGETS:
        check_op("add", [a, a], None, rtol=0, atol=0, targets=(target,))
        check_op("exp", [a], None, rtol=2**-7, atol=0, targets=(target,))
        check_op("sum", [a], {"axes": (1,)}, rtol=2**-7, atol=1e-2, targets=(target,))
        check_op("max", [a], {"axes": (0,)}, rtol=0, atol=0, targets=(target,))
        check_op("matmul", [a, b], None, rtol=2**-7, atol=1e-2, targets=(target,))
        check_op("gather", [a, RNG.integers(0, 40, (9,))], {"axis": 1}, rtol=0, atol=0, targets=(target,))

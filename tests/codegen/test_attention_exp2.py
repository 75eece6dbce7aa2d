"""The attention routine's exp (ember/codegen/c_attention.py: 2^x of a score minus its running
maximum, x <= 0): within 2 ULP of float64's 2^x over every float32 from -126 to 0 (a sample of
every 61st bit pattern, and the ends densely), 0 below -126 and for -inf (a masked score), 1 at
-0, and NaN for NaN."""

import ctypes

import numpy as np
import pytest

from ember.codegen.c import CRenderer
from ember.codegen.c_attention import _exp2_nonpositive
from ember.codegen.c_prelude import CPrelude
from ember.runtime.build import build_library

LANES = 16


@pytest.fixture(scope="module")
def exp2():
    lib = CPrelude(CRenderer.SCALAR_TYPES)
    v, u, m = lib.vec("float32", LANES), lib.unaligned_vec("float32", LANES), lib.mask(32, LANES)
    helper = _exp2_nonpositive(lib, v, m)
    source = lib.text() + f"""

void run(const float* x, float* y, long n) {{
  for (long i = 0; i < n; i += {LANES}) *({u}*)(y + i) = {helper}(*(const {u}*)(x + i));
}}
"""
    so = ctypes.CDLL(str(build_library(source)))
    so.run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]

    def call(x: np.ndarray) -> np.ndarray:
        n = -(-x.size // LANES) * LANES
        xs = np.zeros(n, np.float32)
        xs[:x.size] = x
        y = np.empty(n, np.float32)
        so.run(xs.ctypes.data, y.ctypes.data, n)
        return y[:x.size]

    return call


def test_within_2_ulp_from_minus_126_to_0(exp2):
    top = int(np.float32(-126.0).view(np.uint32))  # negative floats: larger bit patterns, larger magnitudes
    bits = np.arange(top, 0x80000000, -61, dtype=np.int64).astype(np.uint32)
    x = np.concatenate([bits.view(np.float32), np.float32(-126.0) + np.arange(4096) * 1e-5,
                        -np.arange(4096, dtype=np.float32) * 1e-7])
    x = np.unique(x.astype(np.float32))
    x = x[(x >= -126.0) & (x <= 0.0)]
    got = exp2(x).astype(np.float64)
    want = np.exp2(x.astype(np.float64))
    ulp = np.abs(got - want) / np.spacing(want.astype(np.float32)).astype(np.float64)
    assert x.size > 1_000_000
    assert ulp.max() <= 2.0, f"{ulp.max():.2f} ULP at x = {x[np.argmax(ulp)]!r}"


def test_edges(exp2):
    x = np.float32([-np.inf, -1e30, -200.0, -126.00002, np.nan, -0.0, 0.0, -126.0])
    got = exp2(x)
    assert (got[:4] == 0.0).all()
    assert np.isnan(got[4])
    assert got[5] == 1.0 and got[6] == 1.0
    assert got[7] == np.float32(2.0 ** -126)

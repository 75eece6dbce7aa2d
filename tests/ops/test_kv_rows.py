"""kv_int8_rows (a decode step's own keys and values as the int8 cache's rows): the C and the
interpreter's kernels are ember.tir.kv_int8.quantize_rows' bytes exactly (codes, then the scale's
4 bytes) on fresh random rows of mixed magnitudes, an all-zero row included, and the rows read
back within half a step of their scale; a float64 or symbolic-width input is an OpTypeError."""

from __future__ import annotations

import numpy as np
import pytest

from ember.graph.core import TensorType
from ember.ops.registry import OpTypeError, infer_types
from ember.testing import check_op
from ember.tir.kv_int8 import dequantize_rows

RNG = np.random.default_rng()


def test_rows_are_quantize_rows_bytes_on_both_targets():
    x = (RNG.standard_normal((1, 3, 5, 40)) * RNG.uniform(0.01, 50, (1, 3, 5, 1))).astype("float32")
    x[0, 1, 2] = 0
    (rows,) = check_op("kv_int8_rows", [x], None, rtol=0, atol=0, targets=("c", "python"))
    scale = np.abs(x).max(axis=-1, keepdims=True) / 127
    assert np.all(np.abs(dequantize_rows(rows) - x) <= scale / 2 * (1 + 1e-5))


@pytest.mark.parametrize("t", [TensorType((2, 8), "float64"), TensorType((2, "e"), "float32")])
def test_bad_rows_are_named(t):
    with pytest.raises(OpTypeError, match="kv_int8_rows: x must be float32 rows"):
        infer_types("kv_int8_rows", [t], None)

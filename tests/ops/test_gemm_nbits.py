"""gemm_nbits (ember/ops/gemm_nbits.py): int8 per channel and per group, int4 per group
(symmetric, and with zero points) on the C target and the interpreter, for a GEMV, a few rows and a prefill's block
of rows, against the float64 product of the NumPy dequantization, over a column count that
leaves the last panel partial; the layout's packing round-trips; bad inputs are OpTypeErrors."""

from __future__ import annotations

import numpy as np
import pytest

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.passes.quantize_weights import quantize_int4, quantize_int8
from ember.testing import check_op_sizes
from ember.tir.nbits import dequantize, pack_int4, pack_int8, unpack

RNG = np.random.default_rng()
K, N = 128, 75  # three panels, the last with 11 columns


def _inputs(bits: int, group: int = 0, zero_points: bool = False, bias: bool = True):
    w = RNG.standard_normal((K, N)).astype(np.float32)
    if bits == 8:
        parts = list(quantize_int8(w))
        if group:  # per group: the per-column scales varied down the rows
            vary = RNG.uniform(0.5, 2, (K // group, 1)).astype(np.float32)
            parts[1] = np.repeat(parts[1][None], K // group, 0) * vary
    else:
        codes, scales, offsets = quantize_int4(w, group, zero_points)
        parts = [codes, scales] + ([offsets] if zero_points else [])
    if bias:
        parts.append(np.pad(RNG.standard_normal(N).astype(np.float32), (0, 96 - N)))
    return parts, {"bits": bits, "group": group, "n": N, "offsets": zero_points}


@pytest.mark.parametrize("bits,group,zero_points,bias", [(8, 0, False, True), (8, 32, False, False),
                                                          (4, 32, False, False), (4, 64, True, True)])
def test_gemm_nbits_against_dequantized_product(bits, group, zero_points, bias):
    weights, attrs = _inputs(bits, group, zero_points, bias)
    types = [TensorType(("m", K), "float32")] + [TensorType(p.shape, p.dtype.name) for p in weights]
    sets = [[RNG.standard_normal((m, K)).astype(np.float32)] + weights for m in (1, 3, 70)]
    check_op_sizes("gemm_nbits", types, attrs, sets, rtol=1e-4, atol=1e-4, targets=("c", "python"))


def test_quantization_error_is_small():
    w = RNG.standard_normal((K, N)).astype(np.float32)
    for parts, bits, tol in ((quantize_int8(w) + (None,), 8, 0.01), (quantize_int4(w, 32, False), 4, 0.12),
                             (quantize_int4(w, 32, True), 4, 0.12)):
        codes, scales, offsets = parts
        back = dequantize(codes, scales, offsets, bits)[:, :N]
        assert np.linalg.norm(back - w) / np.linalg.norm(w) < tol


def test_packing_round_trips():
    q8 = RNG.integers(-128, 128, (K, N)).astype(np.int8)
    q4 = RNG.integers(0, 16, (K, N)).astype(np.uint8)
    assert np.array_equal(unpack(pack_int8(q8), 8)[:, :N], q8)
    assert np.array_equal(unpack(pack_int4(q4), 4)[:, :N], q4)
    assert not unpack(pack_int4(q4), 4)[:, N:].any()


def test_bad_inputs_are_op_type_errors():
    weights, attrs = _inputs(4, 32)
    types = [TensorType((1, K), "float32")] + [TensorType(p.shape, p.dtype.name) for p in weights]
    with pytest.raises(OpTypeError, match="group must be one of"):
        infer_types("gemm_nbits", types, {**attrs, "group": 48})
    with pytest.raises(OpTypeError, match="codes must be uint8"):
        infer_types("gemm_nbits", [types[0], TensorType(weights[0].shape, "int8")] + types[2:], attrs)
    with pytest.raises(OpTypeError, match="x must be float32"):
        infer_types("gemm_nbits", [TensorType((1, K), "float16")] + types[1:], attrs)
    weights8, attrs8 = _inputs(8)
    types8 = types[:1] + [TensorType(p.shape, p.dtype.name) for p in weights8]
    with pytest.raises(OpTypeError, match="offsets"):
        infer_types("gemm_nbits", types8, {**attrs8, "offsets": True})

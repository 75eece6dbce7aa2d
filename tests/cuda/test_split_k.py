"""Split-K (ember.schedules.gpu.split_k): a product whose tiles leave multiprocessors idle computed
as partial sums over parts of K (a kernel) then their sum in a fixed order with the bias (a
second kernel); both on the interpreter with GPU semantics against NumPy, built by NVRTC for
sm_90, and the number of parts for BERT-base's layers at 128 tokens."""

import numpy as np
import pytest
from gpu_kernels import needs_nvrtc

import ember
from ember.errors import ScheduleError
from ember.schedules.gpu.split_k import split_k_gemm, splits_for
from ember.testing import random_array

RNG = np.random.default_rng(43)


@pytest.mark.parametrize("trans_b, bias", [(True, True), (False, False)])
def test_partial_sums_then_their_sum_match_numpy_on_the_interpreter(trans_b, bias):
    M, N, K, splits = 20, 24, 96, 3  # tiles past M and N: padded and guarded
    (first, partial_args), (second, sum_args) = split_k_gemm(M, N, K, splits, trans_b=trans_b, bias=bias)
    partials, total = ember.build(first, partial_args, target="python"), ember.build(second, sum_args, target="python")
    a, b, c = (random_array(shape, "float32", RNG) for shape in ((M, K), (N, K) if trans_b else (K, N), (N,)))
    P, out = np.full((splits, M, N), np.nan, np.float32), np.full((M, N), np.nan, np.float32)
    partials(a, b, P)
    total(P, *([c] if bias else []), out)
    expected = a.astype(np.float64) @ (b.T if trans_b else b) + (c if bias else 0)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_parts_fill_the_gpu_only_where_k_is_long_enough():
    assert splits_for(1, 128, 768, 768) == 2  # BERT-base's attention projections: 96 blocks of 32 x 32 -> 192
    assert splits_for(1, 128, 768, 3072) == 2  # its MLP down
    assert splits_for(1, 128, 3072, 768) == 1  # its MLP up: 192 blocks already
    assert splits_for(1, 128, 768, 384) == 1  # parts of 192: too short
    assert splits_for(1, 16, 64, 4096) == 16  # 2 blocks of 16 x 32: as many parts of 256 as K holds
    with pytest.raises(ScheduleError, match="parts of K"):
        split_k_gemm(128, 768, 768, 5)


@needs_nvrtc
def test_bert_base_layer_in_two_parts_compiles_for_sm90():
    (first, partial_args), (second, sum_args) = split_k_gemm(128, 768, 768, 2, trans_b=True, bias=True)
    partials = ember.build(first, partial_args, target="cuda", arch="sm_90")
    total = ember.build(second, sum_args, target="cuda", arch="sm_90")
    assert partials.grid == (24, 4, 2) and partials.block == (16, 16, 1)  # 192 blocks: every multiprocessor busy
    assert "cp.async" in partials.source and total.grid == (384, 1, 1)

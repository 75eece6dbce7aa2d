"""The torch frontend's operators of hub models (converters/strided.py, indexing.py's index_put,
moe.py) against torch eager on fresh random inputs: as_strided over dense memory in any stride
order (a view, a restrided read, overlapping windows) and its refusal of memory that is not
dense; index_put with one or several index tensors, broadcast values and accumulation; histc
and the grouped matmul of mixture-of-experts layers."""

from __future__ import annotations

import pytest
import torch
from test_torch_indexing import Fn
from torch_check import check_import, run_ember

from ember.errors import IndexOutOfRangeError
from ember.ops.registry import UnsupportedOpError


def test_as_strided_after_permute_is_a_view():
    pool = torch.nn.AdaptiveAvgPool2d(1)  # ConvNeXt's and Swin's head: as_strided of a channels-last mean
    x = torch.randn(2, 5, 6, 8)
    graph = check_import(Fn(lambda x: pool(x.permute(0, 3, 1, 2))), x)
    assert "gather" not in graph.op_histogram()


def test_as_strided_reads_dense_memory_in_stride_order():
    x = torch.randn(4, 6)
    check_import(Fn(lambda x: torch.as_strided(x.t() * 2, (3, 8), (8, 1))), x)  # memory of x, transposed
    check_import(Fn(lambda x: torch.as_strided(x + 1, (5, 4), (4, 1), 2)), x)  # an offset, a reshape
    windows = check_import(Fn(lambda x: torch.as_strided(x.reshape(-1) + 0, (7, 6), (3, 1))), x)  # overlapping
    assert "gather" in windows.op_histogram()


def test_as_strided_refuses_memory_that_is_not_dense():
    with pytest.raises(UnsupportedOpError, match="not dense"):
        check_import(Fn(lambda x: torch.as_strided(x.expand(3, 4, 6), (4, 6), (6, 1))), torch.randn(4, 6))


def put(x, index, values, accumulate=False):
    """x with x[index] = values (+= with accumulate), written in place on a copy, as models do."""
    y = x.clone()
    if accumulate:
        y.index_put_(index, values, accumulate=True)
    else:
        y[index] = values
    return y


def test_index_put():
    x, v = torch.randn(5, 4, 3), torch.randn(2, 3)
    i, j = torch.tensor([4, 0]), torch.tensor([1, 3])
    graph = check_import(Fn(lambda x, i, j, v: (
        put(x, (i,), v[:, None, :] + 0 * x[:2]),  # whole rows
        put(x, (i, j), v),  # adjacent dims from the first
        put(x, (slice(None), j), torch.ones(5, 2, 3)),  # a dim after a whole one
        put(x, (i, slice(None), j % 3), v[:, :1] * 3),  # dims apart, broadcast values
        put(x, (torch.tensor([1, 1, 2]),), torch.ones(3, 4, 3), accumulate=True))), x, i, j, v)
    assert "scatter_nd" in graph.op_histogram()


def test_inverse_permutation_as_transformers_writes_it():
    def invert(perm):
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.size(0))
        return inv

    check_import(Fn(invert), torch.randperm(9))


def test_histc_and_grouped_mm_of_experts():
    pytest.importorskip("transformers.integrations.moe")  # registers transformers' grouped_mm_fallback
    experts = 4
    w = torch.randn(experts, 8, 5)

    def route(ids, x):
        ids, perm = torch.sort(ids)
        counts = torch.histc(ids.float(), bins=experts, min=0, max=experts - 1)
        offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
        return counts, torch.ops.transformers.grouped_mm_fallback(x[perm], w, offsets)

    graph = check_import(Fn(route), torch.randint(0, experts, (10,)), torch.randn(10, 8), rtol=1e-5, atol=1e-5)
    assert {"histc", "grouped_matmul"} <= set(graph.op_histogram())


def test_torch_grouped_mm_in_bfloat16():
    w, offsets = torch.randn(3, 8, 16).bfloat16(), torch.tensor([2, 2, 6], dtype=torch.int32)
    check_import(Fn(lambda x: torch._grouped_mm(x.bfloat16(), w, offs=offsets).float()), torch.randn(6, 8),
                 rtol=2e-2, atol=2e-2)


def test_histc_over_the_datas_own_range_is_refused():
    with pytest.raises(UnsupportedOpError, match="not the data's own"):
        check_import(Fn(lambda x: torch.histc(x, bins=4)), torch.randn(6))


def test_bincount_and_nonzero_sizes_from_the_data():
    x, w = torch.randint(0, 6, (10,)), torch.randn(10)
    graph = check_import(Fn(lambda x, w: (torch.bincount(x, minlength=3) * 2, torch.bincount(x, w, minlength=9) + 1,
                                          torch.nonzero(x > 2))), x, w)
    assert {"bincount", "nonzero"} <= set(graph.op_histogram())
    with pytest.raises(IndexOutOfRangeError, match="negative"):
        run_ember(graph, [x - 3, w])

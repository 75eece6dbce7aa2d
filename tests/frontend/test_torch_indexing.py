"""The torch frontend's gather, scatter (tensor and value, add and multiply), scatter_add,
scatter_reduce, topk and sort (ember/frontend/torch/converters/indexing.py) against torch eager
on fresh random inputs; tril, triu, einsum and repeat, which torch.export decomposes; the inverse
trigonometric and hyperbolic functions."""

from __future__ import annotations

import pytest
import torch
from torch_check import check_import


class Fn(torch.nn.Module):
    """A module of a function."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def distinct_index(rows: int, n: int, k: int, cols: int) -> torch.Tensor:
    """Indices into an axis of n, distinct along it (so that plain scatters have no duplicates)."""
    return torch.stack([torch.randperm(n)[:k] for _ in range(rows * cols)]).reshape(rows, cols, k).transpose(1, 2)


def test_gather_and_scatters():
    x, src = torch.randn(3, 6, 4), torch.randn(3, 2, 4)
    index = distinct_index(3, 6, 2, 4)
    dup = torch.randint(0, 6, (3, 2, 4))
    graph = check_import(Fn(lambda x, i, d, s: (
        torch.gather(x, 1, d), x.scatter(1, i, s), x.scatter(1, i, 2.5), x.scatter_add(1, d, s),
        x.scatter(1, d, s, reduce="multiply"), x.scatter_reduce(1, d, s, "amax"), x.scatter_reduce(1, d, s, "sum"),
        x.scatter_reduce(1, d, s, "amin"), x.scatter_reduce(1, d, s, "prod"))), x, index, dup, src, rtol=1e-5,
        atol=1e-6)
    assert {"gather_elements", "scatter_elements"} <= set(graph.op_histogram())


@pytest.mark.parametrize("largest", [True, False])
def test_topk_and_sort(largest):
    x = torch.randn(4, 7, 5)  # no ties: torch's order of equal elements is unspecified
    check_import(Fn(lambda x: (torch.topk(x, 3, dim=1, largest=largest), torch.sort(x, dim=-1, descending=largest),
                               torch.sort(x, stable=True))), x, rtol=0, atol=0)


def test_decomposed_by_export():
    x, a, b = torch.randn(2, 5, 4), torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    check_import(Fn(lambda x, a, b: (torch.tril(x), torch.triu(x, 1), torch.einsum("bij,bjk->bik", a, b),
                                     x.repeat(2, 1, 3), torch.einsum("bii->bi", x[:, :4]), torch.diagonal(x, 1, 1, 2),
                                     torch.diagonal(x, -2, -1, 1))), x, a, b,
                 rtol=1e-5, atol=1e-5)


def test_inverse_trigonometric_and_hyperbolic():
    check_import(Fn(lambda x: (torch.asin(x), torch.acos(x), torch.atan(x), torch.asinh(x), torch.atanh(x),
                               torch.acosh(x + 2))), torch.rand(3, 4) * 1.8 - 0.9, rtol=1e-5, atol=1e-6)

"""pad_einsum: a product padded with zeros to multiples of its tiles computes what it computed,
with tiles that divide its padded loops; what is not a sum of products of loads is refused."""

import numpy as np
import pytest

from ember import te
from ember.errors import ScheduleError
from ember.testing import check_schedule
from ember.tir import Schedule


def _product(m, n, k, transposed=False):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((n, k) if transposed else (k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * (B[j, r] if transposed else B[r, j]), axis=r), name="C")
    D = te.compute((m, n), lambda i, j: te.max(C[i, j], 0.0), name="D")
    return A, B, C, D


@pytest.mark.parametrize("transposed", [False, True])
def test_a_padded_product_tiled_by_its_padding_matches_numpy(transposed):
    A, B, C, D = _product(21, 13, 11, transposed)
    sch = Schedule(te.create_prim_func([A, B, D]))
    sch.pad_einsum(sch.get_block("C"), padding=[8, 8, 4])
    assert [r.block.name for r in sch.all_realizes()] == ["A_pad", "B_pad", "C", "C_unpad", "D"]
    i, j, k = sch.get_loops(sch.get_block("C"))
    for loop, f in ((i, 8), (j, 8), (k, 4)):  # whole tiles: no split leaves a guard on the product
        sch.split(loop, factors=[None, f])
    assert "C_pad" in str(sch.mod) and "select" in str(sch.mod)
    check_schedule(sch, None, lambda a, b: np.maximum(a @ (b.T if transposed else b), 0), targets=("c", "python"),
                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m", [3, 21])
def test_a_symbolic_extent_is_padded_to_whole_tiles_at_each_size(m):
    rows = te.var("m")
    A, B, C, D = _product(rows, 13, 11)
    sch = Schedule(te.create_prim_func([A, B, D]))
    sch.pad_einsum(sch.get_block("C"), padding=[8, 8, 4])
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(i, factors=[None, 8])  # ceil(m / 8) * 8 rows: whole tiles whatever m is
    assert "(m + 7) // 8 * 8" in str(sch.mod)
    check_schedule(sch, None, lambda a, b: np.maximum(a @ b, 0), sizes={rows: m}, targets=("c", "python"),
                   rtol=1e-5, atol=1e-5)


def test_a_product_its_padding_divides_is_left_as_it_is():
    A, B, C, D = _product(16, 8, 4)
    sch = Schedule(te.create_prim_func([A, B, D]))
    before = str(sch.mod)
    sch.pad_einsum(sch.get_block("C"), padding=[8, 8, 4])
    assert str(sch.mod) == before


def test_what_is_not_a_sum_of_products_is_refused():
    A, B, C, D = _product(5, 6, 7)
    sch = Schedule(te.create_prim_func([A, B, D]))
    with pytest.raises(ScheduleError, match="is not a sum C = C"):
        sch.pad_einsum(sch.get_block("D"), padding=[4, 4])
    with pytest.raises(ScheduleError, match="padding .* must give a positive multiple for each"):
        sch.pad_einsum(sch.get_block("C"), padding=[4, 4])
    x = te.placeholder((5, 7), name="x")
    r = te.reduce_axis((0, 7), name="r")
    total = te.compute((5,), lambda i: te.sum(te.exp(x[i, r]), axis=r), name="total")  # exp(0) is not 0
    sch = Schedule(te.create_prim_func([x, total]))
    with pytest.raises(ScheduleError, match="its update is not a product of loads"):
        sch.pad_einsum(sch.get_block("total"), padding=[1, 4])


def test_a_factor_computed_from_its_load_is_computed_in_its_pad_stage():
    A = te.placeholder((21, 11), name="A")
    B = te.placeholder((11, 13), name="B")
    r = te.reduce_axis((0, 11), name="k")
    C = te.compute((21, 13), lambda i, j: te.sum(te.exp(A[i, r]) * B[r, j], axis=r), name="C")  # exp(0) is 1
    sch = Schedule(te.create_prim_func([A, B, C]))
    sch.pad_einsum(sch.get_block("C"), padding=[8, 8, 4])
    product = next(r for r in sch.all_realizes() if r.block.name == "C").block
    assert "exp" not in str(product.body) and "exp" in str(sch.mod)  # the product reads plain loads
    check_schedule(sch, None, lambda a, b: np.exp(a) @ b, targets=("python",), rtol=1e-5, atol=1e-5)

"""gather_elements, scatter_elements, scatter_nd (ember/ops/scatter.py) and topk (ember/ops/topk.py)
on the C target against their NumPy references and PyTorch: negative indices, indices smaller
than data, every reduction, duplicate targets (the last update wins), a single index for
scatter_nd, ties in topk; and the errors of bad shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.testing import check_op

RNG = np.random.default_rng()
EXACT = {"rtol": 0, "atol": 0}
TOL = {"rtol": 1e-5, "atol": 1e-6}
REDUCTIONS = ["none", "add", "mul", "max", "min"]


def rand(*shape, dtype="float32") -> np.ndarray:
    return RNG.uniform(-2, 2, shape).astype(dtype)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_is_torch_gather(axis):
    x = rand(4, 5, 6)
    n = x.shape[axis]
    indices = RNG.integers(0, n, (3, 4, 5)).astype("int64")  # smaller than data off the axis
    check_op("gather_elements", [x, indices], {"axis": axis}, **EXACT,
             torch_fn=lambda t, i: torch.gather(t, axis, i))
    negative = RNG.integers(-n, n, (4, 5, 6)).astype("int32")
    check_op("gather_elements", [x, negative], {"axis": axis}, **EXACT)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatter_elements_every_reduction(reduction):
    data = rand(4, 5, 6)
    indices = RNG.integers(-5, 5, (3, 4, 6)).astype("int64")  # duplicates along the axis
    updates = rand(3, 4, 6)
    check_op("scatter_elements", [data, indices, updates], {"axis": 1, "reduction": reduction}, **TOL)
    ints = RNG.integers(-50, 50, (6, 3)).astype("int32")
    check_op("scatter_elements", [ints, RNG.integers(0, 6, (2, 3)), RNG.integers(-9, 9, (2, 3)).astype("int32")],
             {"axis": 0, "reduction": reduction}, **EXACT)


def test_scatter_elements_against_torch_scatter():
    data, updates = rand(5, 7), rand(5, 3)
    indices = np.stack([RNG.permutation(7)[:3] for _ in range(5)])  # distinct targets per row
    check_op("scatter_elements", [data, indices, updates], {"axis": 1}, **EXACT,
             torch_fn=lambda d, i, u: d.scatter(1, i, u))
    check_op("scatter_elements", [data, indices, updates], {"axis": 1, "reduction": "add"}, **TOL,
             torch_fn=lambda d, i, u: d.scatter_add(1, i, u))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatter_nd_every_reduction(reduction):
    data = rand(4, 5, 6)
    for indices, updates in [(RNG.integers(-4, 4, (3, 2, 2)), rand(3, 2, 6)),  # slices of rows, duplicates
                             (RNG.integers(0, 4, (1,)), rand(5, 6)),  # one index: a whole slab
                             (RNG.integers(0, 4, (7, 3)), rand(7))]:  # single elements
        check_op("scatter_nd", [data, indices.astype("int64"), updates], {"reduction": reduction}, **TOL)


def test_scatter_nd_writes_kv_cache_slots_like_index_put():
    cache, new = rand(2, 8, 4), rand(2, 3, 4)
    slots = np.array([[[0, 5], [0, 1], [0, 6]], [[1, 2], [1, 0], [1, 7]]], dtype="int64")

    def index_put(c, s, n):
        c = c.clone()
        c[s[..., 0], s[..., 1]] = n
        return c

    check_op("scatter_nd", [cache, slots, new], None, **EXACT, torch_fn=index_put)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("axis", [1, -1])
def test_topk_sorted_with_ties_by_index(largest, axis):
    x = rand(3, 9, 7)
    x[0, :4, 0] = x[0, 6, 0]  # ties along axis 1
    x[1, 2, :5] = x[1, 2, 6]  # and along the last axis
    values, indices = check_op("topk", [x], {"k": 4, "axis": axis, "largest": largest}, **EXACT)
    expected = torch.topk(torch.from_numpy(x), 4, dim=axis, largest=largest, sorted=True).values.numpy()
    np.testing.assert_array_equal(values, expected)
    np.testing.assert_array_equal(np.take_along_axis(x, indices, axis), values)


def test_topk_integers_whole_row_and_extremes():
    x = RNG.integers(-100, 100, (5, 12)).astype("int32")
    x[0, 3] = np.iinfo("int32").min
    check_op("topk", [x], {"k": 12}, **EXACT)
    check_op("topk", [x], {"k": 1, "largest": False}, **EXACT)


def test_errors_name_the_shapes():
    f, i = TensorType((4, 5)), TensorType((4, 5), "int64")
    with pytest.raises(OpTypeError, match="same rank"):
        infer_types("gather_elements", [f, TensorType((4,), "int64")])
    with pytest.raises(OpTypeError, match="updates must have shape"):
        infer_types("scatter_nd", [f, TensorType((3, 1), "int64"), TensorType((3, 4))])
    with pytest.raises(OpTypeError, match="reduction must be one of"):
        infer_types("scatter_elements", [f, i, f], {"reduction": "sum"})
    with pytest.raises(OpTypeError, match="k must be an int from 0 to the size 5"):
        infer_types("topk", [f], {"k": 6})


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd(batch_dims):
    data = rand(3, 4, 5, 6)
    for k in (1, 2, 3):
        shape = (3, 2, k) if batch_dims else (2, 2, k)
        high = np.array(data.shape[batch_dims:batch_dims + k])
        indices = RNG.integers(-high, high, shape).astype("int64")
        check_op("gather_nd", [data, indices], {"batch_dims": batch_dims}, **EXACT)

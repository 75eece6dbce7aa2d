"""Comparisons, logic and where (ember/ops/compare.py) against NumPy and PyTorch, with
broadcasting, several dtypes, symbolic dims, and the errors of bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.testing import check_op, check_op_sizes

RNG = np.random.default_rng()

COMPARISONS = [("equal", torch.eq), ("not_equal", torch.ne), ("less", torch.lt), ("less_equal", torch.le),
               ("greater", torch.gt), ("greater_equal", torch.ge)]


def small_ints(shape, dtype):
    """Values from a small range, so that equal elements are common."""
    return RNG.integers(-3, 4, shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "int32", "float16"])
@pytest.mark.parametrize("name, torch_fn", COMPARISONS, ids=[n for n, _ in COMPARISONS])
def test_comparisons_broadcast(name, torch_fn, dtype):
    a, b = small_ints((4, 1, 48), dtype), small_ints((5, 48), dtype)
    out = check_op(name, [a, b], None, rtol=0, atol=0, torch_fn=torch_fn)[0]
    assert out.dtype == np.bool_ and out.shape == (4, 5, 48)


@pytest.mark.parametrize("name, torch_fn", COMPARISONS, ids=[n for n, _ in COMPARISONS])
def test_comparisons_on_interpreter(name, torch_fn):
    a, b = small_ints((3, 1), "int64"), small_ints((1, 4), "int64")
    check_op(name, [a, b], None, rtol=0, atol=0, torch_fn=torch_fn, targets=("python",))


def test_nan_compares_unequal():
    a = np.array([np.nan, 1.0, np.nan, 2.0] * 4, "float32")
    b = np.array([np.nan, np.nan, 1.0, 2.0] * 4, "float32")
    for name, _ in COMPARISONS:
        check_op(name, [a, b], None, rtol=0, atol=0)


@pytest.mark.parametrize("name, torch_fn", [("logical_and", torch.logical_and), ("logical_or", torch.logical_or)])
def test_logic(name, torch_fn):
    a, b = RNG.random((2, 3, 1)) < 0.5, RNG.random((3, 40)) < 0.5
    check_op(name, [a, b], None, rtol=0, atol=0, torch_fn=torch_fn, targets=("c", "python"))


@pytest.mark.parametrize("shapes", [
    ((4, 48), (4, 48), (4, 48)),
    ((3, 1), (1, 40), (2, 3, 40)),  # all three broadcast
    ((40,), (), (5, 40)),  # a scalar branch
])
def test_where(shapes):
    c_shape, x_shape, y_shape = shapes
    cond = RNG.random(c_shape) < 0.5
    x = RNG.standard_normal(x_shape).astype("float32")
    y = RNG.standard_normal(y_shape).astype("float32")
    check_op("where", [cond, x, y], None, rtol=0, atol=0, torch_fn=torch.where, targets=("c", "python"))


@pytest.mark.parametrize("dtype", ["float16", "int8", "bool"])
def test_where_dtypes(dtype):
    cond = RNG.random((6, 33)) < 0.5
    x, y = (RNG.integers(0, 2, (6, 33)).astype(dtype) for _ in range(2))
    out = check_op("where", [cond, x, y], None, rtol=0, atol=0, torch_fn=torch.where)[0]
    assert out.dtype == np.dtype(dtype)


def test_symbolic_batch_one_build_two_sizes():
    types = [TensorType(("batch", 1), "bool"), TensorType(("batch", 16)), TensorType((16,))]
    sets = [[RNG.random((n, 1)) < 0.5, RNG.standard_normal((n, 16)).astype("float32"),
             RNG.standard_normal(16).astype("float32")] for n in (2, 7)]
    check_op_sizes("where", types, None, sets, rtol=0, atol=0, torch_fn=torch.where)
    less = [TensorType(("batch", 16)), TensorType((16,))]
    check_op_sizes("less", less, None, [s[1:] for s in sets], rtol=0, atol=0, torch_fn=torch.lt)


@pytest.mark.parametrize("name, types, match", [
    ("less", [TensorType((3,), "float32"), TensorType((3,), "int32")],
     r"less: inputs have different dtypes \['float32', 'int32'\]; insert a cast"),
    ("equal", [TensorType((3, 4)), TensorType((5,))], r"equal: shapes \(3, 4\) and \(5,\) do not broadcast"),
    ("logical_and", [TensorType((3,), "float32"), TensorType((3,), "bool")],
     "logical_and: the first input must be bool, got float32"),
    ("logical_or", [TensorType((3,), "bool"), TensorType((3,), "int8")],
     "logical_or: the second input must be bool, got int8"),
    ("where", [TensorType((3,), "float32"), TensorType((3,)), TensorType((3,))],
     "where: the condition must be bool, got float32"),
    ("where", [TensorType((3,), "bool"), TensorType((3,)), TensorType((3,), "float16")],
     "where: inputs have different dtypes"),
    ("where", [TensorType((3,), "bool"), TensorType((2, 1)), TensorType((4, 3))],
     r"where: shapes \(3,\) and \(2, 1\) and \(4, 3\) do not broadcast"),
    ("greater", [TensorType((3,))], "greater takes 2 inputs, got 1"),
])
def test_errors_name_the_op_and_the_problem(name, types, match):
    with pytest.raises(OpTypeError, match=match):
        infer_types(name, types)

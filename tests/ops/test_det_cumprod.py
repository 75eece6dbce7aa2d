"""det (ember/ops/linalg.py) and cumprod (ember/ops/cumsum.py) against NumPy and PyTorch, compiled
to C and on the loop-IR interpreter: batches of matrices, pivoting (a zero leading element),
singular matrices (exactly 0), symbolic sizes; running products across the scan's blocks,
exclusive and reverse, with zeros in the data; and the errors of bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.testing import check_op, check_op_sizes

RNG = np.random.default_rng()


@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (2, 3, 6, 6), (40, 40)])
def test_det_matches_numpy_and_torch(shape):
    x = RNG.uniform(-1, 1, shape).astype("float32")
    # float32 getrf (torch's, numpy's) rounds more than the float64 factorization ember runs
    check_op("det", [x], None, rtol=1e-4, atol=1e-5, torch_fn=torch.linalg.det, torch_atol=1e-4,
             targets=("c", "python") if shape[-1] < 10 else ("c",))
    check_op("det", [x.astype("float64")], None, rtol=1e-10, atol=1e-12)


def test_det_pivots_and_singular_matrices():
    x = RNG.uniform(-1, 1, (4, 5, 5))
    x[0, 0, 0] = 0.0  # needs a row swap
    x[1, 3] = 2.0 * x[1, 1]  # two rows proportional: singular
    x[2, :, 4] = 0.0  # a zero column: no pivot, nothing divided by zero
    x[3] = np.triu(x[3])
    out = check_op("det", [x], None, rtol=1e-9, atol=1e-12)[0]
    assert abs(out[1]) < 1e-12 and out[2] == 0.0 and not np.signbit(out[2])


def test_det_symbolic_sizes():
    sets = [[RNG.uniform(-1, 1, (b, n, n)).astype("float32")] for b, n in ((2, 3), (5, 7))]
    check_op_sizes("det", [TensorType(("b", "n", "n"), "float32")], None, sets, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("shape, axis", [((4, 70), 1), ((33, 3), 0), ((2, 5, 3), -2)])
def test_cumprod_matches_numpy_and_torch(shape, axis, exclusive, reverse):
    """Values near 1 keep 70 factors in range; lengths across the 32-element blocks."""
    x = RNG.uniform(0.8, 1.25, shape) * RNG.choice([-1.0, 1.0], shape)
    x = x.astype("float32")
    attrs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    torch_fn = None
    if not exclusive:
        torch_fn = (lambda t: torch.cumprod(t.flip(axis), axis).flip(axis)) if reverse else (
            lambda t: torch.cumprod(t, axis))
    check_op("cumprod", [x], attrs, rtol=1e-5, atol=1e-6, torch_fn=torch_fn)


def test_cumprod_zeros_integers_interpreter_and_symbolic():
    x = RNG.uniform(-2, 2, (3, 45)).astype("float32")
    x[1, 7] = 0.0  # everything after it is 0, nothing before it
    check_op("cumprod", [x], {"axis": 1}, rtol=1e-5, atol=1e-30, targets=("c", "python"))
    ints = RNG.integers(-3, 4, (5, 38)).astype("int64")  # 3**38 fits: no overflow
    check_op("cumprod", [ints], {"axis": 1, "exclusive": True, "reverse": True}, rtol=0, atol=0)
    sets = [[RNG.uniform(0.5, 1.5, (n, m)).astype("float32")] for n, m in ((2, 5), (3, 77))]
    check_op_sizes("cumprod", [TensorType(("n", "m"))], {"axis": -1, "exclusive": True}, sets, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, shape, dtype, attrs, match", [
    ("det", (3, 4), "float32", None, "det needs square matrices, got 3 x 4"),
    ("det", (3,), "float32", None, r"det needs a float input of rank 2 or more, got float32\[3\]"),
    ("det", (3, 3), "int32", None, "det needs a float input"),
    ("cumprod", (3, 3), "bool", {"axis": 0}, "cumprod needs a numeric input, got bool"),
    ("cumprod", (3, 3), "float32", {"axis": 2}, "cumprod: axis 2 is out of range for rank 2"),
])
def test_errors_name_the_op_and_the_problem(name, shape, dtype, attrs, match):
    with pytest.raises(OpTypeError, match=match):
        infer_types(name, [TensorType(shape, dtype)], attrs)

"""Reductions (ember/ops/reduce.py) and cumsum (ember/ops/cumsum.py) against NumPy and
PyTorch: axes (None, negative, several), keepdims, integer and float16 inputs, argmax's first
occurrence, var's correction, symbolic dims, the schedules, and the errors of bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.schedules.apply import node_kernel
from ember.testing import check_op, check_op_sizes

RNG = np.random.default_rng()
SHAPE = (4, 6, 40)
# (axes, keepdims): all, one, a negative one, two, an int
AXES_KEEPDIMS = [(None, False), ((1,), True), ((-1,), False), ((0, 2), True), (-2, False)]


def dims(axes, ndim):
    if axes is None:
        return tuple(range(ndim))
    return (axes,) if isinstance(axes, int) else axes


def torch_reduce(name, axes, keepdims):
    d = dims(axes, len(SHAPE))
    fns = {
        "sum": lambda t: torch.sum(t, dim=d, keepdim=keepdims),
        "mean": lambda t: torch.mean(t, dim=d, keepdim=keepdims),
        "max": lambda t: torch.amax(t, dim=d, keepdim=keepdims),
        "min": lambda t: torch.amin(t, dim=d, keepdim=keepdims),
        "prod": (lambda t: torch.prod(t, dim=d[0], keepdim=keepdims)) if len(d) == 1 else None,
    }
    return fns[name]


def data(name, shape, dtype="float32"):
    """Near 1 for prod (no overflow), in [-2, 2) otherwise."""
    x = RNG.uniform(0.5, 1.5, shape) if name == "prod" else RNG.uniform(-2, 2, shape)
    return x.astype(dtype)


TOL = {"sum": (1e-5, 1e-4), "mean": (1e-5, 1e-6), "max": (0, 0), "min": (0, 0), "prod": (1e-4, 1e-30)}


@pytest.mark.parametrize("axes, keepdims", AXES_KEEPDIMS, ids=str)
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod"])
def test_float32(name, axes, keepdims):
    rtol, atol = TOL[name]
    out = check_op(name, [data(name, SHAPE)], {"axes": axes, "keepdims": keepdims}, rtol=rtol, atol=atol,
                   torch_fn=torch_reduce(name, axes, keepdims))[0]
    assert out.ndim == (len(SHAPE) if keepdims else len(SHAPE) - len(dims(axes, len(SHAPE))))


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod", "var"])
def test_interpreter(name):
    """Sums of 105 terms in [-2, 2) cancel: their rounding error is absolute, hence sum's atol."""
    x = data(name, (3, 5, 7))
    rtol, atol = TOL.get(name, (1e-5, 1e-6))
    for axes in (None, (0, -1)):
        check_op(name, [x], {"axes": axes, "keepdims": True}, rtol=rtol, atol=atol, targets=("python",))


@pytest.mark.parametrize("name, axes", [("sum", (1,)), ("mean", None), ("max", (2,)), ("prod", (0,)), ("var", (2,))])
def test_float16_accumulates_in_float32(name, axes):
    """A float16 sum of 240 terms rounds once, at the end: a float16 accumulator would not pass."""
    x = data(name, SHAPE, "float16")
    check_op(name, [x], {"axes": axes}, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("dtype", ["int32", "int8"])
@pytest.mark.parametrize("name", ["sum", "max", "min", "prod"])
def test_integers(name, dtype):
    """Integer reductions keep the dtype and wrap like it (int8 sums and products overflow)."""
    x = RNG.integers(-2, 3, SHAPE).astype(dtype)
    torch_fn = torch_reduce(name, (1,), False) if dtype != "int8" and name != "sum" else None
    check_op(name, [x], {"axes": (1,)}, rtol=0, atol=0, torch_fn=torch_fn)
    if dtype == "int32":
        check_op(name, [x.astype("int64")], {"axes": (0, 2), "keepdims": True}, rtol=0, atol=0)


@pytest.mark.parametrize("axis, keepdims", [(0, False), (1, True), (-1, False)])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_first_occurrence(name, axis, keepdims):
    """Values from {0, 1, 2}: the extreme occurs several times, the first index is the answer."""
    x = RNG.integers(0, 3, SHAPE).astype("float32")
    torch_fn = getattr(torch, name)
    out = check_op(name, [x], {"axis": axis, "keepdims": keepdims}, rtol=0, atol=0,
                   torch_fn=lambda t: torch_fn(t, dim=axis, keepdim=keepdims))[0]
    assert out.dtype == np.int64


@pytest.mark.parametrize("dtype", ["int32", "float16"])
def test_arg_other_dtypes(dtype):
    x = RNG.integers(-5, 5, (7, 33)).astype(dtype)
    check_op("argmax", [x], {"axis": 1}, rtol=0, atol=0, targets=("c", "python"))
    check_op("argmin", [x], {"axis": 0, "keepdims": True}, rtol=0, atol=0)


def test_nan_is_the_extreme_as_in_numpy():
    """max and min propagate NaN; argmax and argmin give the first NaN of a row that has one."""
    x = RNG.uniform(-1, 1, (4, 50)).astype("float32")
    x[1, 7] = x[1, 30] = x[2, 0] = x[3, 49] = np.nan
    for name in ("max", "min"):
        check_op(name, [x], {"axes": (1,)}, rtol=0, atol=0, torch_fn=torch_reduce(name, (1,), False),
                 targets=("c", "python"))
    for name in ("argmax", "argmin"):
        out = check_op(name, [x], {"axis": 1}, rtol=0, atol=0, targets=("c", "python"))[0]
        np.testing.assert_array_equal(out[1:], [7, 0, 49])


@pytest.mark.parametrize("correction", [0, 1])
@pytest.mark.parametrize("axes, keepdims", [(None, False), ((1,), True), ((-1,), False), ((0, 2), False)])
def test_var(axes, keepdims, correction):
    x = data("var", SHAPE)
    check_op("var", [x], {"axes": axes, "keepdims": keepdims, "correction": correction}, rtol=1e-5, atol=1e-6,
             torch_fn=lambda t: torch.var(t, dim=dims(axes, 3), correction=correction, keepdim=keepdims))


def test_var_is_stable_for_a_large_mean():
    """Two passes: 1000 + noise in [-1, 1) keeps its variance (one pass, E[x^2] - E[x]^2, would not)."""
    x = (1000 + RNG.uniform(-1, 1, (8, 400))).astype("float32")
    check_op("var", [x], {"axes": (1,)}, rtol=1e-3, atol=0, torch_fn=lambda t: torch.var(t, dim=1, correction=0))


@pytest.mark.parametrize("name, attrs", [("sum", {"axes": (1,)}), ("mean", {"axes": (-1,), "keepdims": True}),
                                         ("argmax", {"axis": 2}), ("var", {"axes": (1, 2)})])
def test_symbolic_batch_one_build_two_sizes(name, attrs):
    sets = [[data(name, (n, 6, 40))] for n in (2, 5)]
    check_op_sizes(name, [TensorType(("batch", 6, 40))], attrs, sets, rtol=1e-5, atol=1e-5)


def test_symbolic_reduced_dim():
    """The count that mean divides by is the symbolic size of the reduced dim."""
    sets = [[data("mean", (3, n))] for n in (7, 50)]
    check_op_sizes("mean", [TensorType((3, "n"))], {"axes": (1,)}, sets, rtol=1e-5, atol=1e-6,
                   targets=("c", "python"))


@pytest.mark.parametrize("name, attrs, vectors", [
    ("sum", {"axes": (2,)}, True), ("max", {"axes": (1, 2), "keepdims": True}, True),
    ("mean", {"axes": (2,)}, True), ("var", {"axes": (2,)}, True), ("argmax", {"axis": 2}, True),
    ("sum", {"axes": (1,)}, False),  # strided: the reduced axis is not the last
])
def test_schedules_parallel_rows_vectorized_reductions(name, attrs, vectors):
    """Output elements in parallel, the stages each needs inside, reductions over contiguous
    elements as vector lanes of partial results (`_rf`)."""
    t = TensorType((8, 5, 64))
    bound, out_types = infer_types(name, [t], attrs)
    text = str(ember.lower(*node_kernel(name, [t], bound, out_types)))
    head, sep, body = text.partition("parallel(")
    assert sep and "alloc" not in head or "_rf" not in head, text
    assert ("_rf = alloc" in body and "ramp(" in body) == vectors, text


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
def test_pools_over_a_blocked_layout_in_vectors_of_channels(name):
    """A reduction over H and W of NCHW{b}c with keepdims (a blocked global pool): the kept last
    axis in vector lanes, the sums of a vector in registers (no scalar row per lane)."""
    x = RNG.uniform(-1, 1, (1, 3, 5, 7, 16)).astype("float32")
    attrs = {"axes": (2, 3), "keepdims": True}
    check_op(name, [x], attrs, rtol=1e-5, atol=1e-6)
    t = TensorType(x.shape)
    bound, out_types = infer_types(name, [t], attrs)
    text = str(ember.lower(*node_kernel(name, [t], bound, out_types)))
    assert "parallel(" in text and "ramp(" in text.partition("parallel(")[2], text


@pytest.mark.parametrize("n, accumulators", [(768, 4), (96, 2), (64, 2), (32, 1), (80, 1)])
def test_independent_accumulators_keep_nan_and_inf(n, accumulators):
    """A row of n = 16 * v elements reduces into 4 independent vectors where 4 divide its v vectors
    (2 where 2 do; one otherwise), whose lanes are then folded in halves. A NaN in any of them (positions in each vector
    and each accumulator) makes the row's sum and extremes NaN; inf and -inf together make the sum
    NaN and the extremes infinite; the rest within float32 rounding of NumPy."""
    t = TensorType((12, n))
    text = str(ember.lower(*node_kernel("sum", [t], {"axes": (1,), "keepdims": False}, [TensorType((12,))])))
    assert ("_rf_rf = alloc" in text) == (accumulators > 1), text
    assert "out_rf3 = alloc" in text, text  # the lanes folded in halves: 16, 8, 4, 2
    x = RNG.standard_normal((12, n)).astype("float32")
    for row, k in enumerate([0, 15, 16, 33, 48, n - 1]):
        x[row, k % n] = np.nan
    x[6, 5], x[6, n - 20] = np.inf, -np.inf
    x[7, 17] = np.inf
    x[8, :] = -np.inf
    x[9, n // 2] = -np.inf
    with np.errstate(invalid="ignore"):
        for name in ("sum", "mean", "max", "min"):
            rtol = 0 if name in ("max", "min") else 1e-5
            check_op(name, [x], {"axes": -1}, rtol=rtol, atol=rtol,
                     torch_fn=lambda t, name=name: getattr(torch, "amax" if name == "max" else
                                                           "amin" if name == "min" else name)(t, -1))


@pytest.mark.parametrize("name, attrs, dtype, match", [
    ("sum", {"axes": (3,)}, "float32", "sum: axis 3 is out of range for rank 3"),
    ("max", {"axes": (-4,)}, "float32", "max: axis -4 is out of range for rank 3"),
    ("sum", {"axes": (1, -2)}, "float32", r"sum: axes \(1, -2\) name an axis twice"),
    ("sum", {"axes": ()}, "float32", "sum: axes is empty; give None to reduce every axis"),
    ("min", {"axes": "1"}, "float32", "min: axes must be None, an int or a tuple of ints"),
    ("mean", None, "int32", "mean needs a floating-point input, got int32"),
    ("var", None, "int8", "var needs a floating-point input"),
    ("sum", None, "bool", "sum needs a numeric input, got bool"),
    ("prod", {"keepdims": 1}, "float32", "prod: keepdims must be a bool"),
    ("var", {"correction": "1"}, "float32", "var: correction must be a number"),
    ("argmax", None, "float32", "argmax: attribute 'axis' is required"),
    ("argmin", {"axis": (1,)}, "float32", "argmin: axis must be an int"),
    ("argmax", {"axis": 3}, "float32", "argmax: axis 3 is out of range for rank 3"),
    ("sum", {"axis": 1}, "float32", r"sum: unknown attribute\(s\) \['axis'\]; it takes \['axes', 'keepdims'\]"),
])
def test_errors_name_the_op_and_the_problem(name, attrs, dtype, match):
    with pytest.raises(OpTypeError, match=match):
        infer_types(name, [TensorType((2, 3, 4), dtype)], attrs)


# -- cumsum --------------------------------------------------------------------------------------


def torch_cumsum(axis, reverse):
    if reverse:
        return lambda t: torch.cumsum(t.flip(axis), axis).flip(axis)
    return lambda t: torch.cumsum(t, axis)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("shape, axis", [((4, 100), 1), ((70, 3), 0), ((2, 33, 5), -2), ((64,), 0), ((3, 1), 1)])
def test_cumsum(shape, axis, exclusive, reverse):
    """Lengths across the 32-element blocks: one partial block, several, exactly two, one element."""
    x = RNG.uniform(-1, 1, shape).astype("float32")
    attrs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    check_op("cumsum", [x], attrs, rtol=1e-5, atol=1e-5, torch_fn=None if exclusive else torch_cumsum(axis, reverse))
    if exclusive == reverse:
        ints = RNG.integers(-50, 50, shape).astype("int32")
        check_op("cumsum", [ints], attrs, rtol=0, atol=0)


def test_cumsum_interpreter_float16_and_symbolic():
    x = RNG.uniform(-1, 1, (3, 45)).astype("float32")
    check_op("cumsum", [x], {"axis": 1, "reverse": True}, rtol=1e-5, atol=1e-5, targets=("c", "python"))
    check_op("cumsum", [x.astype("float16")], {"axis": 1}, rtol=3e-3, atol=3e-3)
    sets = [[RNG.uniform(-1, 1, (n, m)).astype("float32")] for n, m in ((2, 5), (3, 77))]
    check_op_sizes("cumsum", [TensorType(("n", "m"))], {"axis": -1, "exclusive": True}, sets, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs, dtype, match", [
    (None, "float32", "cumsum: attribute 'axis' is required"),
    ({"axis": 2}, "float32", "cumsum: axis 2 is out of range for rank 2"),
    ({"axis": 0}, "bool", "cumsum needs a numeric input, got bool"),
    ({"axis": 0, "reverse": "yes"}, "float32", "cumsum: reverse must be a bool"),
])
def test_cumsum_errors(attrs, dtype, match):
    with pytest.raises(OpTypeError, match=match):
        infer_types("cumsum", [TensorType((2, 3), dtype)], attrs)

"""Norms and standard deviations of inputs of large and small magnitude give the float64 answer
where it is representable: the squares of float32 values near 1e20 are past float32's range, so
that sqrt(sum(x * x)) was inf where the norm is 1e21, and 0 at 1e-20 (the squares underflow).
l2_norm and std (ember operators; ONNX ReduceL2, torch's std, linalg.vector_norm, F.normalize)
and torch's batch norm over the batch's own statistics scale each row by a power of two first.
ReduceSumSquare, ReduceLogSum and ReduceL1 are checked as they are: their results overflow where
the float64 answer does, and ReduceLogSumExp is shifted by the maximum."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper

import ember
from ember.testing import MAGNITUDES, check_op, magnitude_rows

N = 96  # a row: six vectors of 16 lanes
SUBNORMAL = float(np.finfo("float32").smallest_subnormal)




def _close(got, want, rtol=1e-5, atol=0.0, what=""):
    """got (float32) against the float64 answer rounded to float32: inf where that overflows."""
    with np.errstate(over="ignore"):
        want = np.asarray(want, dtype="float64").astype("float32")
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol, err_msg=what)


# -- the operators ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", MAGNITUDES)
def test_l2_norm(kind):
    """1e21 at 1e20 (the squares overflowed), 1e-19 at 1e-20 (they underflowed)."""
    x = magnitude_rows(kind)
    (out,) = check_op("l2_norm", [x], {"axes": -1}, rtol=1e-5, atol=0)
    assert np.isfinite(out).all()
    check_op("l2_norm", [x], {"axes": (0, 1), "keepdims": True}, rtol=1e-5, atol=0)


@pytest.mark.parametrize("kind", MAGNITUDES)
def test_std(kind):
    """A standard deviation of 1e20 (a variance past float32) is finite, and 1e-20 keeps its digits."""
    x = magnitude_rows(kind)
    for correction in (0, 1):
        (out,) = check_op("std", [x], {"axes": -1, "correction": correction}, rtol=1e-5, atol=0)
        assert np.isfinite(out).all()


@pytest.mark.parametrize("k", [-149, -140, -127, -126, -60, 0, 1, 62, 63, 64, 100, 120, 126, 127])
def test_scale_at_powers_of_two(k):
    """Rows whose sum of magnitudes is at, just below and just above 2^(k + 7) (the scale is found
    with float arithmetic, exact at those edges), subnormal rows, and rows whose sum overflows."""
    x = np.full((3, 128), np.float32(2.0**k))
    x[1] = np.nextafter(x[1], np.float32(0))
    x[2] = np.nextafter(x[2], np.float32(np.inf))
    with np.errstate(over="ignore"):
        check_op("l2_norm", [x], {"axes": -1}, rtol=1e-6, atol=2 * SUBNORMAL)
        check_op("rms_norm", [x * np.linspace(-1, 1, 128, dtype="float32")], {"eps": 0.0}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("magnitude", [1e300, 1e200, 1e-200, 1e-310])
def test_float64(magnitude):
    x = np.random.default_rng(9).standard_normal((4, N)) * magnitude
    with np.errstate(over="ignore"):
        check_op("l2_norm", [x], {"axes": -1}, rtol=1e-12, atol=1e-323)
        check_op("std", [x], {"axes": -1, "correction": 1}, rtol=1e-12, atol=1e-323)


def test_equal_rows_have_no_spread():
    x = np.repeat(np.float32([1e20, -3e-20, 2.5e38, 1.0])[:, None], N, axis=1)
    (out,) = check_op("std", [x], {"axes": -1, "correction": 1}, rtol=0, atol=0)
    np.testing.assert_array_equal(out, 0)


def test_nan_and_inf_propagate_as_in_torch():
    """A NaN row is NaN; an infinite row has the norm inf and the standard deviation NaN (inf - inf)."""
    x = magnitude_rows("1")
    x[0, 3], x[1, 5], x[2, 9] = np.nan, np.inf, -np.inf
    with np.errstate(invalid="ignore"):
        (norm,) = check_op("l2_norm", [x], {"axes": -1}, rtol=1e-5, atol=0,
                           torch_fn=lambda t: torch.linalg.vector_norm(t, dim=-1))
        (std,) = check_op("std", [x], {"axes": -1, "correction": 1}, rtol=1e-5, atol=0,
                          torch_fn=lambda t: t.std(-1))
    assert np.isnan(norm[0]) and np.isposinf(norm[1:3]).all() and np.isfinite(norm[3])
    assert np.isnan(std[:3]).all() and np.isfinite(std[3])


# -- ONNX ---------------------------------------------------------------------------------------

ONNX_REDUCTIONS = ["ReduceL2", "ReduceSumSquare", "ReduceL1", "ReduceLogSum", "ReduceLogSumExp"]


def _reduce_model(opset: int):
    """One node per reduction over the last axis (ReduceLogSum of |x|: a log of a positive sum)."""
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [-1])
    nodes = [helper.make_node("Abs", ["x"], ["ax"])]
    for op in ONNX_REDUCTIONS:
        source = "ax" if op == "ReduceLogSum" else "x"
        if opset >= 18:
            nodes.append(helper.make_node(op, [source, "axes"], [op], keepdims=0))
        else:
            nodes.append(helper.make_node(op, [source], [op], axes=[-1], keepdims=0))
    graph = helper.make_graph(nodes, "reductions", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, N])],
                              [helper.make_tensor_value_info(op, TensorProto.FLOAT, [4]) for op in ONNX_REDUCTIONS],
                              initializer=[axes] if opset >= 18 else [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _onnx_expected(x: np.ndarray) -> dict:
    x = x.astype("float64")
    top = x.max(axis=-1)
    return {
        "ReduceL2": np.sqrt((x * x).sum(axis=-1)),
        "ReduceSumSquare": (x * x).sum(axis=-1),
        "ReduceL1": np.abs(x).sum(axis=-1),
        "ReduceLogSum": np.log(np.abs(x).sum(axis=-1)),
        "ReduceLogSumExp": top + np.log(np.exp(x - top[:, None]).sum(axis=-1)),
    }


@pytest.fixture(scope="module", params=[13, 18])
def onnx_reductions(request):
    return ember.compile(_reduce_model(request.param))


@pytest.mark.parametrize("kind", ["1e20", "1e-20", "1e30", "mixed"])
def test_onnx_reductions(onnx_reductions, kind):
    """ReduceL2 is finite where the norm is; ReduceSumSquare is inf where the float64 sum of squares
    is past float32 and, at 1e-20, subnormal (within a few of its steps, one per rounded square)."""
    x = magnitude_rows(kind, seed=5)
    got = dict(zip(ONNX_REDUCTIONS, onnx_reductions(x)))
    for op, want in _onnx_expected(x).items():
        atol = N * SUBNORMAL if op == "ReduceSumSquare" else 0.0
        _close(got[op], want, atol=atol, what=f"{op} at {kind}")
    assert np.isfinite(got["ReduceL2"]).all()


def test_onnx_l2_of_nan_and_inf(onnx_reductions):
    x = magnitude_rows("1", seed=6)
    x[0, 3], x[1, 5] = np.nan, -np.inf
    norm = onnx_reductions(x)[0]
    assert np.isnan(norm[0]) and np.isposinf(norm[1]) and np.isfinite(norm[2:]).all()


# -- torch --------------------------------------------------------------------------------------


class _Stats(torch.nn.Module):
    def forward(self, x):
        std, mean = torch.std_mean(x, dim=-1, correction=0)
        return (x.std(-1), std, mean, torch.linalg.vector_norm(x, dim=-1), torch.norm(x, dim=-1),
                F.normalize(x, dim=-1), torch.linalg.vector_norm(x, ord=float("inf"), dim=-1),
                F.batch_norm(x.reshape(2, 2, N), None, None, training=True).reshape(4, N))


@pytest.fixture(scope="module")
def torch_stats():
    return ember.compile(_Stats(), (torch.from_numpy(magnitude_rows("1")),))


@pytest.mark.parametrize("kind", ["1e20", "1e-20", "1e30", "mixed", "outlier"])
def test_torch_against_float64(torch_stats, kind):
    """std, vector_norm, normalize and batch norm with batch statistics against torch in float64."""
    x = magnitude_rows(kind, seed=7)
    with torch.no_grad():
        expected = _Stats()(torch.from_numpy(x).double())
    for k, (got, want) in enumerate(zip(torch_stats(x), expected)):
        assert np.isfinite(np.asarray(got)).all(), f"output {k} at {kind}"
        _close(got, want.numpy(), rtol=2e-5, atol=1e-6 if k in (5, 7) else 0.0, what=f"output {k} at {kind}")


def test_torch_nan_and_inf_as_torch(torch_stats):
    """As torch, but for std_mean's mean of an infinite row: torch's is NaN (its one-pass
    algorithm), ember's is torch.mean's, inf."""
    x = magnitude_rows("1", seed=8)
    x[0, 3], x[1, 5], x[2, 9] = np.nan, np.inf, -np.inf
    with torch.no_grad():
        expected = list(_Stats()(torch.from_numpy(x)))
        expected[2] = torch.from_numpy(x).mean(-1)
    for k, (got, want) in enumerate(zip(torch_stats(x), expected)):
        np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=2e-5, atol=1e-6, err_msg=f"output {k}")

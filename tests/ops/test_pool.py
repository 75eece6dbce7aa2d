"""Pooling (ember/ops/pool.py) against the NumPy references and PyTorch on the C target: max and
average pooling with strides, padding, dilations, ceil_mode (a last window reaching past the
padding) and count_include_pad, of 1, 2 and 3 spatial dimensions; the indices of the maxima
(torch's, per plane, and ONNX's column-major numbering); global and adaptive average pooling; a
symbolic batch; tiny cases on the interpreter; and the errors of bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch.nn.functional as F

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.testing import check_op, check_op_sizes

RNG = np.random.default_rng()
TOL = {"rtol": 1e-5, "atol": 1e-6}


def rand(*shape) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


# (attributes, the same pooling in PyTorch's terms)
MAX_POOLS = [
    ({"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}, {"kernel_size": 3, "stride": 2, "padding": 1}),
    ({"kernel": (2, 2)}, {"kernel_size": 2}),
    ({"kernel": (3, 2), "strides": (2, 2), "padding": (1, 0, 1, 0), "ceil_mode": True, "dilations": (2, 1)},
     {"kernel_size": (3, 2), "stride": 2, "padding": (1, 0), "dilation": (2, 1), "ceil_mode": True}),
]
AVG_POOLS = [
    ({"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}, {"kernel_size": 3, "stride": 2, "padding": 1}),
    ({"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1), "count_include_pad": False, "ceil_mode": True},
     {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False, "ceil_mode": True}),
    ({"kernel": (2, 2), "strides": (2, 2), "padding": (1, 1, 1, 1), "ceil_mode": True},
     {"kernel_size": 2, "stride": 2, "padding": 1, "ceil_mode": True}),
    ({"kernel": (2, 4), "strides": (1, 2)}, {"kernel_size": (2, 4), "stride": (1, 2)}),
]


@pytest.mark.parametrize("attrs, torch_kwargs", MAX_POOLS)
def test_max_pool2d_against_torch(attrs, torch_kwargs):
    check_op("max_pool2d", [rand(2, 3, 9, 16)], attrs, rtol=0, atol=0,
             torch_fn=lambda x: F.max_pool2d(x, **torch_kwargs))


@pytest.mark.parametrize("shape", [(2, 3, 9, 16), (1, 2, 7, 7)])
@pytest.mark.parametrize("attrs, torch_kwargs", AVG_POOLS)
def test_avg_pool2d_against_torch(shape, attrs, torch_kwargs):
    check_op("avg_pool2d", [rand(*shape)], attrs, **TOL, torch_fn=lambda x: F.avg_pool2d(x, **torch_kwargs))


@pytest.mark.parametrize("n, torch_kwargs", [
    (1, {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    (3, {"kernel_size": (2, 3, 2), "stride": (1, 2, 2), "padding": (1, 1, 0)}),
    (3, {"kernel_size": 2, "stride": 2, "dilation": (1, 2, 1), "ceil_mode": True}),
])
def test_pools_of_other_ranks_against_torch(n, torch_kwargs):
    x = rand(2, 3, *(7, 9, 10)[:n])
    k = torch_kwargs["kernel_size"]
    attrs = {"kernel": k if isinstance(k, tuple) else (k,) * n, "strides": _per_axis(torch_kwargs["stride"], n),
             "padding": _per_axis(torch_kwargs.get("padding", 0), n) * 2,
             "ceil_mode": torch_kwargs.get("ceil_mode", False)}
    max_pool, avg_pool = (getattr(F, f"{kind}_pool{n}d") for kind in ("max", "avg"))
    check_op(f"max_pool{n}d", [x], {**attrs, "dilations": _per_axis(torch_kwargs.get("dilation", 1), n)},
             rtol=0, atol=0, torch_fn=lambda t: max_pool(t, **torch_kwargs))
    if "dilation" not in torch_kwargs:
        check_op(f"avg_pool{n}d", [x], attrs, **TOL, torch_fn=lambda t: avg_pool(t, **torch_kwargs))


def _per_axis(v, n: int) -> tuple[int, ...]:
    return tuple(v) if isinstance(v, tuple) else (v,) * n


@pytest.mark.parametrize("shape, attrs", [
    ((2, 3, 9, 11), {"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}),
    ((1, 2, 5, 7, 6), {"kernel": (2, 3, 2), "strides": (2, 2, 1), "padding": (0, 1, 1, 0, 1, 1)}),
])
def test_max_pool_indices_against_torch(shape, attrs):
    n = len(shape) - 2
    x = rand(*shape)
    pool = getattr(F, f"max_pool{n}d")
    torch_fn = lambda t: pool(t, attrs["kernel"], attrs["strides"], attrs["padding"][:n], return_indices=True)[1]  # noqa: E731
    check_op("max_pool_indices", [x], {**attrs, "per_plane": True}, rtol=0, atol=0, torch_fn=torch_fn)


def test_max_pool_indices_ties_and_storage_order_on_the_interpreter():
    x = RNG.integers(-2, 2, (1, 2, 5, 4)).astype("float32")  # ties: the first maximum of a window wins
    for order in (0, 1):
        check_op("max_pool_indices", [x], {"kernel": (2, 3), "strides": (1, 1), "padding": (1, 0, 0, 1),
                                           "storage_order": order}, rtol=0, atol=0, targets=("c", "python"))


def test_global_and_adaptive_avg_pool_against_torch():
    x = rand(2, 3, 9, 16)
    check_op("global_avg_pool", [x], None, **TOL, torch_fn=lambda x: F.adaptive_avg_pool2d(x, 1))
    check_op("global_avg_pool", [rand(2, 3, 10)], None, **TOL, torch_fn=lambda x: F.adaptive_avg_pool1d(x, 1))
    check_op("adaptive_avg_pool2d", [x], {"output_size": (4, 5)}, **TOL,
             torch_fn=lambda x: F.adaptive_avg_pool2d(x, (4, 5)))
    check_op("adaptive_avg_pool2d", [x], {"output_size": 7}, **TOL, torch_fn=lambda x: F.adaptive_avg_pool2d(x, 7))


def test_max_pool2d_integers():
    x = RNG.integers(-50, 50, (1, 2, 6, 6)).astype("int32")
    check_op("max_pool2d", [x], {"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}, rtol=0, atol=0)


def test_pool_symbolic_batch():
    attrs = {"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}
    check_op_sizes("max_pool2d", [TensorType(("batch", 4, 8, 16))], attrs,
                   [[rand(1, 4, 8, 16)], [rand(3, 4, 8, 16)]], rtol=0, atol=0,
                   torch_fn=lambda x: F.max_pool2d(x, 3, 2, 1))


@pytest.mark.parametrize("op, attrs", [
    ("max_pool2d", {"kernel": (2, 2), "padding": (1, 0, 0, 1), "ceil_mode": True}),
    ("avg_pool2d", {"kernel": (2, 3), "strides": (1, 2), "padding": (0, 1, 1, 0), "count_include_pad": False}),
    ("adaptive_avg_pool2d", {"output_size": (2, 3)}),
])
def test_tiny_pools_on_the_interpreter(op, attrs):
    check_op(op, [rand(1, 2, 5, 4)], attrs, **TOL, targets=("c", "python"))


@pytest.mark.parametrize("op, shape, attrs, message", [
    ("max_pool2d", (1, 3, 8), {"kernel": (2, 2)}, "x must be N, C, H, W"),
    ("avg_pool3d", (1, 3, 8, 8), {"kernel": (2, 2, 2)}, "x must be N, C, D, H, W (3 spatial dimensions)"),
    ("max_pool_indices", (1, 3, 8, 8), {"kernel": (2, 2), "storage_order": 2}, "storage_order 2 must be 0 or 1"),
    ("max_pool2d", (1, 3, 8, 8), {"kernel": (2,)}, "kernel (2,) must be 2 positive integers"),
    ("max_pool2d", (1, 3, 2, 2), {"kernel": (3, 3)}, "larger than the padded input"),
    ("avg_pool2d", (1, 3, 8, 8), {"kernel": (2, 2), "padding": (-1, 0, 0, 0)}, "must not be negative"),
    ("avg_pool2d", (1, 3, 8, 8), {"kernel": (2, 2), "strides": (1,)}, "strides (1,) must be 2 integers"),
    ("adaptive_avg_pool2d", (1, 3, 8, 8), {"output_size": (0, 2)}, "must be 1 or 2 positive integers"),
    ("global_avg_pool", (1, 3), None, "N, C, spatial"),
])
def test_pool_errors(op, shape, attrs, message):
    with pytest.raises(OpTypeError) as e:
        infer_types(op, [TensorType(shape)], attrs)
    assert op in str(e.value) and message in str(e.value)


def test_avg_pool_needs_floats():
    with pytest.raises(OpTypeError, match="avg_pool2d needs a floating-point input"):
        infer_types("avg_pool2d", [TensorType((1, 3, 8, 8), "int32")], {"kernel": (2, 2)})

"""gather, embedding, pad and resize (ember/ops/gather.py, pad.py, resize.py) against their NumPy
references and PyTorch on the C target: numpy.take with negative indices, index_select and
embedding; constant, reflect and edge padding, and cropping by negative pads; nearest resizing
with each rounding and coordinate mode, linear resizing with align_corners and
pytorch_half_pixel (F.interpolate), 1-d linear; tiny cases on the interpreter; and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.testing import check_op, check_op_sizes

RNG = np.random.default_rng()
EXACT = {"rtol": 0, "atol": 0}
TOL = {"rtol": 1e-5, "atol": 1e-6}


def rand(*shape) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


# -- gather, embedding ---------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 2, -1])
def test_gather_is_numpy_take(axis):
    x = rand(4, 3, 5)
    n = x.shape[axis]
    indices = RNG.integers(-n, n, (2, 3)).astype("int64")
    check_op("gather", [x, indices], {"axis": axis}, **EXACT)


def test_gather_against_index_select_and_embedding():
    x = rand(5, 6)
    indices = RNG.integers(0, 6, (4,)).astype("int32")
    check_op("gather", [x, indices], {"axis": 1}, **EXACT,
             torch_fn=lambda t, i: torch.index_select(t, 1, i.long()))
    check_op("gather", [x, np.array(-2, "int64")], {"axis": 0}, **EXACT, torch_fn=lambda t, i: t[-2])
    weight = rand(10, 8)
    tokens = RNG.integers(0, 10, (2, 7)).astype("int64")
    check_op("embedding", [weight, tokens], None, **EXACT, torch_fn=lambda w, i: F.embedding(i, w))
    check_op_sizes("embedding", [TensorType(weight.shape), TensorType(("batch", 7), "int64")], None,
                   [[weight, tokens], [weight, tokens[:1]]], **EXACT, torch_fn=lambda w, i: F.embedding(i, w))


# -- pad -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, torch_mode", [("constant", "constant"), ("reflect", "reflect"),
                                              ("edge", "replicate")])
def test_pad_modes_against_torch(mode, torch_mode):
    x = rand(2, 3, 5, 7)
    pads = (0, 0, 2, 3, 0, 0, 1, 2)  # H: (2, 1), W: (3, 2)
    value = 1.5 if mode == "constant" else 0.0
    kwargs = {"value": value} if mode == "constant" else {}
    check_op("pad", [x], {"pads": pads, "mode": mode, "value": value}, **EXACT,
             torch_fn=lambda t: F.pad(t, (3, 2, 2, 1), mode=torch_mode, **kwargs))


def test_pad_crops_with_negative_pads_and_pads_every_dim():
    x = rand(3, 4, 5)
    check_op("pad", [x], {"pads": (1, -1, 0, -2, 2, 1)}, **EXACT,
             torch_fn=lambda t: F.pad(t, (0, 1, -1, 2, 1, -2)))
    check_op("pad", [RNG.integers(0, 9, (2, 3)).astype("int32")], {"pads": (1, 1, 0, 2), "value": 7.0}, **EXACT)


# -- resize --------------------------------------------------------------------------------------

SIZES = [(10, 14), (3, 4), (7, 7), (12, 9)]


@pytest.mark.parametrize("size", SIZES)
def test_resize_nearest_against_torch(size):
    x = rand(2, 3, 5, 7)
    check_op("resize", [x], {"sizes": size, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
             **EXACT, torch_fn=lambda t: F.interpolate(t, size=size, mode="nearest"))
    check_op("resize", [x], {"sizes": size, "nearest_mode": "round_prefer_ceil"}, **EXACT,
             torch_fn=lambda t: F.interpolate(t, size=size, mode="nearest-exact"))


@pytest.mark.parametrize("size", SIZES)
def test_resize_bilinear_against_torch(size):
    x = rand(2, 3, 5, 7)
    check_op("resize", [x], {"sizes": size, "mode": "linear", "coordinate_transformation_mode": "align_corners"},
             **TOL, torch_fn=lambda t: F.interpolate(t, size=size, mode="bilinear", align_corners=True))
    check_op("resize", [x], {"sizes": (2, 3) + size, "mode": "linear",
                             "coordinate_transformation_mode": "pytorch_half_pixel"},
             **TOL, torch_fn=lambda t: F.interpolate(t, size=size, mode="bilinear", align_corners=False))


def test_resize_rounding_modes_and_1d_linear():
    x = rand(1, 2, 6)
    check_op("resize", [x], {"sizes": (9,), "mode": "linear"}, **TOL,
             torch_fn=lambda t: F.interpolate(t, size=9, mode="linear"))
    # half_pixel 6 -> 4: source coordinates 0.25, 1.75, 3.25, 4.75
    expected = {"round_prefer_floor": [0, 2, 3, 5], "round_prefer_ceil": [0, 2, 3, 5], "floor": [0, 1, 3, 4],
                "ceil": [1, 2, 4, 5]}
    for mode, index in expected.items():
        (out,) = check_op("resize", [x], {"sizes": (4,), "nearest_mode": mode}, **EXACT)
        np.testing.assert_array_equal(out, x[:, :, index])
    # asymmetric 3 -> 2: coordinates 0 and 1.5, where the two round-to-nearest modes part
    y = rand(1, 1, 3)
    for mode, index in (("round_prefer_floor", [0, 1]), ("round_prefer_ceil", [0, 2])):
        (out,) = check_op("resize", [y], {"sizes": (2,), "nearest_mode": mode,
                                          "coordinate_transformation_mode": "asymmetric"}, **EXACT)
        np.testing.assert_array_equal(out, y[:, :, index])


@pytest.mark.parametrize("op, inputs, attrs", [
    ("gather", [(3, 4), np.array([[-1, 0], [2, 1]])], {"axis": 1}),
    ("pad", [(2, 3)], {"pads": (1, 2, 0, 1), "mode": "reflect"}),
    ("resize", [(1, 1, 3, 2)], {"sizes": (5, 3), "mode": "linear", "coordinate_transformation_mode": "half_pixel"}),
    ("resize", [(1, 1, 3, 2)], {"sizes": (4, 4), "coordinate_transformation_mode": "align_corners"}),
    ("pad", [(2, 3)], {"pads": (2, 4, 3, 1), "mode": "wrap"}),
    ("resize", [(1, 2, 7, 5)], {"sizes": (3, 6), "mode": "cubic", "antialias": True}),
    ("resize", [(1, 1, 7, 5)], {"sizes": (2, 3), "mode": "linear", "antialias": True, "exclude_outside": True,
                                "coordinate_transformation_mode": "tf_crop_and_resize", "roi": (0.1, -0.2, 0.8, 0.9),
                                "extrapolation_value": 3.0}),
    ("resize", [(1, 1, 5, 6)], {"sizes": (3, 4), "scales": (0.7, 0.75), "mode": "linear",
                                "coordinate_transformation_mode": "half_pixel_symmetric"}),
])
def test_tiny_cases_on_the_interpreter(op, inputs, attrs):
    arrays = [x if isinstance(x, np.ndarray) else rand(*x) for x in inputs]
    check_op(op, arrays, attrs, **EXACT if op != "resize" else TOL, targets=("c", "python"))


@pytest.mark.parametrize("op, types, attrs, message", [
    ("gather", [TensorType((3, 4)), TensorType((2,), "float32")], {}, "indices must be integers"),
    ("gather", [TensorType((3, 4)), TensorType((2,), "int64")], {"axis": 2}, "axis 2 is out of range"),
    ("embedding", [TensorType(()), TensorType((2,), "int64")], None, "at least one dimension"),
    ("pad", [TensorType((3, 4))], {"pads": (1, 1)}, "must be 4 integers"),
    ("pad", [TensorType((3, 4))], {"pads": (3, 0, 0, 0), "mode": "reflect"}, "smaller than its size 3"),
    ("pad", [TensorType((3, 4))], {"pads": (-1, 0, 0, 0), "mode": "edge"}, "need mode 'constant'"),
    ("pad", [TensorType((3, 4))], {"pads": (0, 0, 0, 0), "mode": "mirror"}, "mode 'mirror' is not one of"),
    ("pad", [TensorType(("n", 4))], {"pads": (1, 0, 0, 0)}, "symbol 'n'"),
    ("resize", [TensorType((1, 3, 4, 4))], {"sizes": (8,)}, "must be 2 positive spatial sizes"),
    ("resize", [TensorType((1, 3, 4, 4))], {"sizes": (2, 4, 8, 8)}, "change N or C"),
    ("resize", [TensorType((3, 4))], {"sizes": (8,)}, "rank 3 or more"),
    ("resize", [TensorType((1, 3, 4, 4))], {"sizes": (8, 8), "mode": "area"}, "mode 'area' is not one of"),
    ("resize", [TensorType((1, 3, 4, 4), "int32")], {"sizes": (8, 8), "mode": "linear"}, "floating-point"),
])
def test_errors(op, types, attrs, message):
    with pytest.raises(OpTypeError) as e:
        infer_types(op, types, attrs)
    assert op in str(e.value) and message in str(e.value)

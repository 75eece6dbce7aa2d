"""grid_sample (ember/ops/grid_sample.py) on the C target against its NumPy reference and
torch.nn.functional.grid_sample: every mode, padding mode and align_corners, 2-D and 3-D, grids
reaching well past the edges (reflection over several widths); and its errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch.nn.functional as F

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.testing import check_op

RNG = np.random.default_rng()
TORCH_MODE = {"nearest": "nearest", "linear": "bilinear", "cubic": "bicubic"}


@pytest.mark.parametrize("mode, padding", list(itertools.product(TORCH_MODE, ("zeros", "border", "reflection"))))
def test_grid_sample_2d_against_torch(mode, padding):
    x = RNG.uniform(-1, 1, (2, 3, 5, 7)).astype("float32")
    grid = RNG.uniform(-2.5, 2.5, (2, 4, 6, 2)).astype("float32")
    # cubic with border padding: ONNX clamps the coordinate, then reads its four neighbours (each
    # clamped); torch clamps each neighbour only. ember is ONNX's (the node suite's cases pass)
    like_torch = (mode, padding) != ("cubic", "border")
    for align in (False, True):
        attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
        check_op("grid_sample", [x, grid], attrs, rtol=1e-4, atol=1e-5,
                 torch_fn=(lambda t, g, a=align: F.grid_sample(t, g, TORCH_MODE[mode], padding, a)) if like_torch
                 else None)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_grid_sample_3d_against_torch(mode):
    x = RNG.uniform(-1, 1, (1, 2, 3, 4, 5)).astype("float32")
    grid = RNG.uniform(-1.5, 1.5, (1, 2, 3, 4, 3)).astype("float32")
    for padding in ("zeros", "border", "reflection"):
        check_op("grid_sample", [x, grid], {"mode": mode, "padding_mode": padding}, rtol=1e-4, atol=1e-5,
                 torch_fn=lambda t, g, p=padding: F.grid_sample(t, g, TORCH_MODE[mode], p, False))


def test_grid_sample_errors():
    x = TensorType((1, 1, 4, 4))
    with pytest.raises(OpTypeError, match="mode 'area'"):
        infer_types("grid_sample", [x, TensorType((1, 2, 2, 2))], {"mode": "area"})
    with pytest.raises(OpTypeError, match="grid N, out dims"):
        infer_types("grid_sample", [x, TensorType((1, 2, 2, 3))])

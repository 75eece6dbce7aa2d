"""Convolution weights packed at compile time (ember.passes.pack_weights, ember.ops.conv's
pack_weights): each packed form (dense, depthwise, a block inside one group, a block spanning
groups) against torch, on the C target and the interpreter, with lengths and channel counts that
leave partial tiles and blocks; unpack_weights inverts the packing; a compiled model's convolutions
read packed constants; a bad packed shape is an OpTypeError."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ember
from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.ops.conv import pack_weights, packed_form, unpack_weights
from ember.testing import check_op

RNG = np.random.default_rng()
TOL = {"rtol": 1e-4, "atol": 1e-4}
BLOCK = 16  # packed in blocks of 16 output channels whatever the target (the kernel reads w_block)


def rand(*shape) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype("float32")


# (op, x shape, w shape, attrs, form): odd lengths, output channels that do not fill a block
CASES = [
    ("conv1d", (1, 8, 67), (40, 8, 3), {"strides": (2,)}, "dense"),  # 67 samples: a tail of columns
    ("conv1d", (1, 1, 101), (20, 1, 10), {"strides": (5,)}, "dense"),  # wav2vec2's first layer, small
    ("conv1d", (1, 32, 21), (32, 16, 9), {"padding": (4, 4), "groups": 2}, "dense"),  # a block inside a group
    ("conv2d", (1, 64, 9, 7), (64, 8, 3, 3), {"padding": (1, 1, 1, 1), "groups": 8}, "spanning"),  # ResNeXt
    ("conv2d", (1, 48, 5, 6), (48, 4, 3, 3), {"padding": (1, 1, 1, 1), "groups": 12, "strides": (2, 1)},
     "spanning"),  # 4 groups a block, 3 blocks
    ("conv2d", (1, 24, 7, 7), (24, 1, 3, 3), {"padding": (1, 1, 1, 1), "groups": 24}, "depthwise"),
    ("conv3d", (1, 4, 3, 5, 6), (20, 4, 2, 3, 3), {"padding": (0, 1, 1, 1, 1, 1)}, "dense"),
]


def _torch_conv(op, attrs):
    n = int(op[-2])
    pads = attrs.get("padding", (0,) * (2 * n))
    width = [p for d in reversed(range(n)) for p in (pads[d], pads[n + d])]
    conv = getattr(F, op)
    return lambda x, w: conv(F.pad(x, width), w, stride=attrs.get("strides", 1), groups=attrs.get("groups", 1))


@pytest.mark.parametrize("op, x_shape, w_shape, attrs, form", CASES)
def test_packed_convolutions_against_torch(op, x_shape, w_shape, attrs, form):
    x, w = rand(*x_shape), rand(*w_shape)
    groups = attrs.get("groups", 1)
    assert packed_form(w_shape[0], w_shape[1], groups, BLOCK) == form
    packed = pack_weights(w, groups, BLOCK)
    np.testing.assert_array_equal(unpack_weights(packed, w.shape, groups), w)
    packed_attrs = {**attrs, "w_block": BLOCK, "w_shape": w.shape}
    torch_fn = _torch_conv(op, attrs)
    check_op(op, [x, packed], packed_attrs, **TOL, targets=("c", "python") if op == "conv1d" else ("c",),
             torch_fn=lambda x, _: torch_fn(x, torch.from_numpy(w)))


def test_the_per_element_form_is_not_packed():
    """6 groups of 4 channels make no whole block of 16: the compute reads w as it is."""
    assert packed_form(24, 4, 6, BLOCK) is None


@pytest.mark.parametrize("w_shape, attrs, message", [
    ((8, 4, 3), {"w_block": 16, "w_shape": (40, 8, 3)}, "have shape (3, 8, 3, 16)"),
    ((3, 8, 3, 16), {"w_block": 16}, "need w_shape"),
    ((3, 8, 3, 16), {"w_block": 16, "w_shape": (40, 8, 3), "groups": 3}, "groups dividing the 40"),
])
def test_bad_packed_weights(w_shape, attrs, message):
    with pytest.raises(OpTypeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        infer_types("conv1d", [TensorType((1, 8, 20)), TensorType(w_shape)], attrs)


class Encoder(nn.Module):
    """wav2vec2's feature encoder, small: strided conv1d layers with GELU, then a grouped conv2d."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(1, 32, 10, 5, bias=False)
        self.b = nn.Conv1d(32, 32, 3, 2)
        self.c = nn.Conv2d(32, 32, 3, padding=1, groups=4)

    def forward(self, x):
        y = F.gelu(self.b(F.gelu(self.a(x))))
        return self.c(y.reshape(1, 32, 3, -1))


def test_compiled_convolutions_read_packed_weights():
    model = Encoder().eval()
    x = torch.randn(1, 1, 940)  # 187 then 93 samples: tails of columns
    cm = ember.compile(model, (x,))
    convs = [n for n in cm.graph.nodes if n.op in ("conv1d", "conv2d")]
    assert [n.attrs["w_block"] > 0 for n in convs] == [True] * 3
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(cm(x.numpy()), expected, **TOL)

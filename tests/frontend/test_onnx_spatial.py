"""ONNX spatial operators in their n-dimensional and less common forms, each a one-node model
compiled with ember.compile and checked against onnx's ReferenceEvaluator on fresh random data,
with sizes the kernels' tiles do not divide: 1-, 2- and 3-D MaxPool, AveragePool and LpPool,
MaxPool's Indices (row- and column-major), MaxUnpool after a MaxPool, 3-D ConvTranspose and
Col2Im, Pad mode=wrap, Resize's tf_crop_and_resize, antialias, scales that give no whole size,
keep_aspect_ratio_policy and half_pixel_symmetric, RoiAlign, DeformConv; and the torch frontend's 3-D pooling,
convolutions, pooling indices and antialiased or fractionally scaled interpolation, against torch."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from test_onnx_added_ops import one_node, rand

import ember
from ember.errors import IndexOutOfRangeError
from ember.frontend.onnx import import_onnx
from ember.frontend.torch import import_module
from ember.target import Target
from ember.testing import assert_close

RNG = np.random.default_rng()


def check_compiled(model: onnx.ModelProto, inputs: list[np.ndarray], rtol: float = 1e-5, atol: float = 1e-6):
    """model compiled by ember against onnx's reference evaluator, every output."""
    expected = ReferenceEvaluator(model).run(None, {f"x{k}": x for k, x in enumerate(inputs)})
    actual = ember.compile(import_onnx(model))(*inputs)
    actual = actual if isinstance(actual, list | tuple) else [actual]
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        a = np.asarray(a)
        assert a.dtype == e.dtype, f"output {k}: {a.dtype} != {e.dtype}"
        assert_close(a, e, rtol, atol, f"output {k} compiled vs onnx's ReferenceEvaluator")


POOLS = [
    ("MaxPool", (2, 3, 7, 9, 11), dict(kernel_shape=[3, 2, 3], strides=[2, 1, 2], pads=[1, 0, 1, 1, 1, 0])),
    ("MaxPool", (1, 2, 6, 7, 9), dict(kernel_shape=[2, 2, 2], dilations=[2, 1, 2], ceil_mode=1)),
    ("AveragePool", (2, 3, 7, 9, 11), dict(kernel_shape=[3, 3, 2], strides=[2, 2, 1], pads=[1, 1, 0, 1, 1, 1])),
    ("AveragePool", (1, 2, 6, 8, 7), dict(kernel_shape=[2, 3, 3], strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1],
                                          count_include_pad=1, ceil_mode=1)),
    ("AveragePool", (2, 3, 13), dict(kernel_shape=[4], strides=[3], pads=[1, 2])),
    ("LpPool", (1, 3, 6, 7, 5), dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2], p=3)),
]


@pytest.mark.parametrize("op, shape, attrs", POOLS, ids=[f"{op}-{len(s) - 2}d" for op, s, _ in POOLS])
def test_pooling_of_any_rank_compiled(op, shape, attrs):
    x = rand(*shape)
    check_compiled(one_node(op, [x], **attrs), [x], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape, attrs", [
    ((2, 3, 9, 11), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 3, 9, 11), dict(kernel_shape=[2, 3], strides=[2, 1], storage_order=1)),
    ((1, 2, 5, 7, 6), dict(kernel_shape=[2, 3, 2], strides=[2, 2, 1], pads=[0, 1, 1, 1, 1, 0])),
    ((1, 2, 5, 7, 6), dict(kernel_shape=[3, 2, 2], strides=[1, 2, 2], storage_order=1)),
])
def test_max_pool_indices_compiled(shape, attrs):
    # integers: ties, where the first maximum of a window in row-major order must win
    x = RNG.integers(-4, 4, shape).astype("float32")
    check_compiled(one_node("MaxPool", [x], n_out=2, **attrs), [x], rtol=0, atol=0)


@pytest.mark.parametrize("shape, kernel, strides, pads, output_shape", [
    ((2, 3, 8, 10), [2, 2], [2, 2], [0, 0, 0, 0], None),
    ((1, 2, 7, 10), [3, 2], [2, 2], [1, 0, 1, 0], [1, 2, 9, 11]),
    ((1, 2, 6, 6, 7), [2, 2, 3], [2, 2, 2], [0, 0, 1, 0, 0, 1], None),
])
def test_max_unpool_of_max_pool_compiled(shape, kernel, strides, pads, output_shape):
    """(MaxUnpool's indices address the unpooled size, which the MaxPool input has here; a larger
    output_shape pads that at the ends, as ONNX's reference does.)"""
    x = rand(*shape)
    attrs = dict(kernel_shape=kernel, strides=strides, pads=pads)
    nodes = [helper.make_node("MaxPool", ["x0"], ["v", "i"], **attrs),
             helper.make_node("MaxUnpool", ["v", "i"] + (["shape"] if output_shape else []), ["y0"], **attrs)]
    inits = [onnx.numpy_helper.from_array(np.asarray(output_shape, "int64"), "shape")] if output_shape else []
    graph = helper.make_graph(nodes, "unpool", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y0", TensorProto.FLOAT, output_shape or shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    check_compiled(onnx.shape_inference.infer_shapes(model), [x], rtol=0, atol=0)


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((1, 4, 3, 5, 4), (4, 3, 3, 2, 3), dict(strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 1], output_padding=[1, 0, 0])),
    ((2, 4, 4, 3, 5), (4, 2, 2, 3, 2), dict(dilations=[2, 1, 1], strides=[1, 2, 1])),
])
def test_conv_transpose_3d_compiled(x_shape, w_shape, attrs):
    x, w, b = rand(*x_shape), rand(*w_shape), rand(w_shape[1] * attrs.get("group", 1))
    check_compiled(one_node("ConvTranspose", [x, w, b], **attrs), [x, w, b], rtol=1e-4, atol=1e-5)


def test_col2im_3d_compiled():
    image, block = np.asarray([5, 7, 6], "int64"), np.asarray([2, 3, 2], "int64")
    attrs = dict(strides=[1, 2, 2], pads=[1, 0, 1, 0, 1, 0], dilations=[2, 1, 1])
    blocks = [(i + p0 + p1 - d * (k - 1) - 1) // s + 1 for i, k, s, p0, p1, d in
              zip(image, block, attrs["strides"], attrs["pads"][:3], attrs["pads"][3:], attrs["dilations"])]
    x = rand(2, 3 * 12, int(np.prod(blocks)))
    check_compiled(one_node("Col2Im", [x], consts={"image": image, "block": block}, **attrs), [x], rtol=1e-5,
                   atol=1e-6)


def test_pad_wrap_compiled():
    x = rand(2, 5, 7)
    pads = np.asarray([0, 3, 9, 1, 4, 2], "int64")  # wider than a dimension: it wraps more than once
    check_compiled(one_node("Pad", [x], consts={"pads": pads}, mode="wrap"), [x], rtol=0, atol=0)


def _resize(x: np.ndarray, roi=None, scales=None, sizes=None, **attrs) -> onnx.ModelProto:
    consts = {name: np.asarray(v, dtype) for name, v, dtype in
              (("roi", roi, "float32"), ("scales", scales, "float32"), ("sizes", sizes, "int64")) if v is not None}
    names = ["x0"] + [name if name in consts else "" for name in ("roi", "scales", "sizes")]
    while not names[-1]:
        names.pop()
    return one_node("Resize", [x], consts=consts, node_inputs=names, **attrs)


RESIZES = [  # (input shape, Resize's inputs and attributes)
    ((2, 3, 9, 11), dict(roi=[0, 0, 0.15, 0.3, 1, 1, 1.1, 0.85], sizes=[2, 3, 7, 5], mode="linear",
                         coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-7.5)),
    ((1, 2, 9, 11), dict(roi=[-0.1, 0.35, 0.6, 1.2], sizes=[8, 6], axes=[2, 3], mode="cubic",
                         coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=2.0)),
    ((1, 2, 9, 11), dict(roi=[0.2, 0.1, 0.9, 0.7], sizes=[5, 13], axes=[2, 3], mode="nearest",
                         coordinate_transformation_mode="tf_crop_and_resize")),
    ((2, 3, 13, 17), dict(sizes=[2, 3, 5, 7], mode="linear", antialias=1)),
    ((2, 3, 13, 17), dict(scales=[1, 1, 0.45, 0.7], mode="cubic", antialias=1)),
    ((1, 2, 11, 7), dict(sizes=[1, 2, 4, 12], mode="cubic", antialias=1, exclude_outside=1, cubic_coeff_a=-0.5)),
    ((2, 3, 9, 11), dict(scales=[1, 1, 0.6, 1.35], mode="linear")),
    ((2, 3, 9, 11), dict(scales=[1, 1, 0.7, 1.7], mode="nearest", nearest_mode="round_prefer_ceil")),
    ((2, 3, 9, 11), dict(scales=[1, 1, 1.45, 0.55], mode="cubic", coordinate_transformation_mode="asymmetric")),
    ((1, 2, 9, 11), dict(scales=[1, 1, 0.8, 1.3], mode="linear", coordinate_transformation_mode="align_corners")),
    ((2, 3, 9, 11), dict(sizes=[6, 10], axes=[2, 3], mode="linear", keep_aspect_ratio_policy="not_larger")),
    ((2, 3, 9, 11), dict(sizes=[6, 10], axes=[3, 2], mode="nearest", keep_aspect_ratio_policy="not_smaller")),
    ((2, 3, 9, 11), dict(scales=[1, 1, 0.6, 1.35], mode="linear",
                         coordinate_transformation_mode="half_pixel_symmetric")),
    ((2, 3, 9, 11), dict(scales=[1, 1, 1.3, 0.45], mode="nearest",
                         coordinate_transformation_mode="half_pixel_symmetric")),
]


@pytest.mark.parametrize("shape, attrs", RESIZES)
def test_resize_forms_compiled(shape, attrs):
    x = rand(*shape)
    check_compiled(_resize(x, **attrs), [x], rtol=1e-4, atol=1e-5)


def _rois(count: int, height: int, width: int) -> np.ndarray:
    """Boxes (x1, y1, x2, y2), some reaching past the image, some smaller than a pixel."""
    corner = RNG.uniform(-2, [width, height], (count, 2))
    size = RNG.uniform(0.3, [width / 1.5, height / 1.5], (count, 2))
    return np.concatenate([corner, corner + size], axis=1).astype("float32")


@pytest.mark.parametrize("attrs", [
    dict(output_height=3, output_width=4, sampling_ratio=2, spatial_scale=0.5),
    dict(output_height=5, output_width=3, sampling_ratio=3, mode="max", spatial_scale=0.7),
    dict(output_height=2, output_width=5, sampling_ratio=2, coordinate_transformation_mode="output_half_pixel"),
])
def test_roi_align_compiled(attrs):
    x, rois = rand(2, 3, 11, 9), _rois(5, 11 / attrs.get("spatial_scale", 1), 9 / attrs.get("spatial_scale", 1))
    indices = RNG.integers(0, 2, 5).astype("int64")
    check_compiled(one_node("RoiAlign", [x, rois, indices], **attrs), [x, rois, indices], rtol=1e-4, atol=1e-5)


def test_roi_align_over_symbolic_counts_compiled():
    """A symbolic number of images and of boxes (a detector's proposals): one compiled model
    called with two of each."""
    node = helper.make_node("RoiAlign", ["x", "rois", "indices"], ["y"], output_height=3, output_width=2,
                            sampling_ratio=2, spatial_scale=0.5, mode="max")
    graph = helper.make_graph([node], "roi_align", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["images", 3, 11, 9]),
        helper.make_tensor_value_info("rois", TensorProto.FLOAT, ["boxes", 4]),
        helper.make_tensor_value_info("indices", TensorProto.INT64, ["boxes"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]))
    compiled = ember.compile(import_onnx(model))
    for images, boxes in ((1, 3), (3, 7)):
        x, rois = rand(images, 3, 11, 9), _rois(boxes, 22, 18)
        indices = RNG.integers(0, images, boxes).astype("int64")
        expected = ReferenceEvaluator(model).run(None, {"x": x, "rois": rois, "indices": indices})[0]
        assert_close(compiled(x, rois, indices), expected, 1e-4, 1e-5, f"{images} images, {boxes} boxes")


@pytest.mark.parametrize("target", ["c", "python", Target("cuda", simulate=True)],
                         ids=["c", "python", "cuda-interpreter"])
def test_roi_align_of_an_image_index_outside_the_batch_raises(target):
    """A box's image index outside the batch (2 of 2 images, or -3) is an IndexOutOfRangeError
    naming it, where the kernel clamped it to the last (or first) image, a silent wrong answer;
    -1 counts from the end, as NumPy and ONNX's reference index. A box whose samples all lie outside
    the image (whose image no sample reads) checks its index too."""
    x, rois = rand(2, 3, 11, 9), _rois(3, 11, 9)
    compiled = ember.compile(one_node("RoiAlign", [x, rois, np.zeros(3, "int64")], output_height=2, output_width=2,
                                      sampling_ratio=2), target=target)
    outside = rois.copy()
    outside[1] = [-9.0, -8.0, -4.0, -3.0]
    for bad in (2, -3, 2**40):
        for boxes in (rois, outside):
            with pytest.raises(IndexOutOfRangeError, match=f"index {bad} is out of range for an axis of size 2"):
                compiled(x, boxes, np.array([0, bad, 1], "int64"))
    last = np.array([0, -1, 1], "int64")
    assert_close(compiled(x, rois, last), compiled(x, rois, np.array([0, 1, 1], "int64")), 0, 0, "index -1")


def test_roi_align_counting_samples_from_constant_rois_compiled():
    x = rand(1, 2, 10, 12)
    rois = np.asarray([[1.0, 2.0, 7.0, 8.0], [0.5, 0.0, 6.0, 5.5]], "float32")  # 3 samples per bin on both axes
    indices = np.zeros(2, "int64")
    check_compiled(one_node("RoiAlign", [x], consts={"rois": rois, "indices": indices}, output_height=2,
                            output_width=2, sampling_ratio=0), [x], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("x_shape, w_shape, attrs, with_bias, with_mask", [
    ((2, 4, 9, 11), (6, 2, 3, 2), dict(group=2, offset_group=2, pads=[1, 0, 1, 1], strides=[2, 1]), True, True),
    ((1, 3, 7, 8), (5, 3, 2, 3), dict(dilations=[2, 1], pads=[0, 1, 1, 0]), False, True),
    ((2, 2, 6, 7), (3, 2, 3, 3), dict(offset_group=2), True, False),
])
def test_deform_conv_compiled(x_shape, w_shape, attrs, with_bias, with_mask):
    x, w = rand(*x_shape), rand(*w_shape)
    model = one_node("DeformConv", [x, w, rand(x_shape[0], 1, 1, 1)], **attrs)  # for the output size
    out = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim][2:]
    taps = attrs.get("offset_group", 1) * w_shape[2] * w_shape[3]
    offset = RNG.uniform(-3, 3, (x_shape[0], taps * 2, *out)).astype("float32")  # some samples leave the image
    inputs = [x, w, offset] + ([rand(w_shape[0])] if with_bias else []) + (
        [RNG.uniform(0, 1, (x_shape[0], taps, *out)).astype("float32")] if with_mask else [])
    names = ["x0", "x1", "x2", "x3" if with_bias else ""] + (["x4" if with_bias else "x3"] if with_mask else [])
    check_compiled(one_node("DeformConv", inputs, node_inputs=names, **attrs), inputs, rtol=1e-4, atol=1e-5)


class _Pool3d(torch.nn.Module):
    def forward(self, x):
        values, indices = F.max_pool3d(x, (2, 3, 2), stride=(2, 2, 1), padding=(1, 1, 0), return_indices=True)
        return values, indices, F.avg_pool3d(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)


class _Pool2d(torch.nn.Module):
    def forward(self, x):
        return F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True)


class _Conv3d(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv3d(3, 5, (3, 2, 3), stride=(1, 2, 2), padding=1)
        self.up = torch.nn.ConvTranspose3d(5, 4, (2, 3, 2), stride=2, padding=(0, 1, 1), output_padding=(1, 0, 1))

    def forward(self, x):
        return self.up(self.conv(x))


class _Interpolate(torch.nn.Module):
    def forward(self, x):
        return (F.interpolate(x, size=(5, 13), mode="bilinear", antialias=True),
                F.interpolate(x, scale_factor=(0.45, 0.7), mode="bicubic", antialias=True),
                F.interpolate(x, scale_factor=(0.6, 1.35), mode="bilinear"))


@pytest.mark.parametrize("module, shape", [(_Pool3d(), (2, 3, 7, 9, 10)), (_Pool2d(), (2, 3, 9, 11)),
                                           (_Conv3d(), (1, 3, 5, 7, 6)), (_Interpolate(), (2, 3, 13, 17))])
def test_torch_3d_and_pooling_indices_compiled(module, shape):
    x = torch.from_numpy(rand(*shape))
    expected = module(x)
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = ember.compile(import_module(module, (x,)))(x.numpy())
    actual = actual if isinstance(actual, list | tuple) else [actual]
    for a, e in zip(actual, expected):
        assert_close(np.asarray(a), e.detach().numpy(), 1e-4, 1e-5, "compiled vs torch")

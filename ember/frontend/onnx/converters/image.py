"""ONNX image operators: GridSample (ember's grid_sample); CenterCropPad (one `pad`, whose
negative pads crop) and Col2Im (a `conv_transpose2d` or `conv_transpose3d` with one-hot
weights: each column entry is added into the pixel its kernel position covers, exactly what a
transposed convolution does); RoiAlign (ember's roi_align)."""

from __future__ import annotations

import math

import numpy as np

from ..node import NodeContext
from ..registry import converts


@converts("CenterCropPad")
def _center_crop_pad(cx: NodeContext):
    """Each axis cropped or padded (with zeros) to its size about the centre; an odd difference
    leaves the extra element at the end."""
    x = cx.input(0)
    shape = cx.static_shape(x, "CenterCropPad")
    sizes = cx.const_ints(1, "shape")
    axes = [a % len(shape) for a in cx.attr("axes", range(len(shape)))]
    begins, ends = [0] * len(shape), [0] * len(shape)
    for a, size in zip(axes, sizes):
        grow = size - shape[a]  # negative: a crop
        begins[a] = -(-grow // 2) if grow < 0 else grow // 2
        ends[a] = grow - begins[a]
    if not any(begins + ends):
        return [x]
    return [cx.op("pad", [x], {"pads": tuple(begins + ends)})]


@converts("Col2Im")
def _col2im(cx: NodeContext):
    """(N, C * prod(block), L) columns summed into an (N, C, spatial...) image of 2 or 3
    spatial dimensions."""
    x = cx.input(0)
    image = cx.const_ints(1, "image_shape")
    block = cx.const_ints(2, "block_shape")
    d = len(image)
    if d not in (2, 3):
        raise cx.unsupported(f"{d} spatial dimensions (ember's col2im takes 2 or 3)")
    n, ck, _ = cx.static_shape(x, "Col2Im")
    dil = tuple(cx.attr("dilations", (1,) * d))
    pads = tuple(cx.attr("pads", (0,) * 2 * d))
    strides = tuple(cx.attr("strides", (1,) * d))
    k = math.prod(block)
    c = ck // k
    blocks = [(image[a] + pads[a] + pads[a + d] - dil[a] * (block[a] - 1) - 1) // strides[a] + 1 for a in range(d)]
    cols = cx.op("reshape", [x], {"shape": (n, ck, *blocks)})
    weight = np.zeros((ck, 1, *block), dtype=cx.type(x).dtype)
    for ch in range(c):
        for pos in range(k):
            weight[(ch * k + pos, 0, *np.unravel_index(pos, block))] = 1
    full = [(blocks[a] - 1) * strides[a] + dil[a] * (block[a] - 1) + 1 - pads[a] - pads[a + d] for a in range(d)]
    out_pad = tuple(image[a] - full[a] for a in range(d))
    attrs = {"strides": strides, "padding": pads, "dilations": dil, "groups": c, "output_padding": out_pad}
    return [cx.op(f"conv_transpose{d}d", [cols, weight], attrs)]


@converts("RoiAlign")
def _roi_align(cx: NodeContext):
    """sampling_ratio 0 takes ceil(roi size / bins) samples per bin, a count the rois' values
    decide: the rois must then be constants."""
    x, rois, indices = cx.input(0), cx.input(1), cx.input(2)
    out_h, out_w = cx.attr("output_height", 1), cx.attr("output_width", 1)
    ratio = cx.attr("sampling_ratio", 0)
    half_pixel = cx.attr("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    scale = cx.attr("spatial_scale", 1.0)
    if ratio == 0:
        values = cx.const(1, "rois (sampling_ratio=0 counts samples by the roi sizes)")
        offset = 0.5 if half_pixel else 0.0
        sizes = values.astype("float64") * scale - offset
        heights, widths = sizes[:, 3] - sizes[:, 1], sizes[:, 2] - sizes[:, 0]
        if not half_pixel:
            heights, widths = np.maximum(heights, 1.0), np.maximum(widths, 1.0)
        counts = {int(np.ceil(v)) for v in np.concatenate([heights / out_h, widths / out_w])}
        if len(counts) != 1:
            raise cx.unsupported(f"sampling_ratio=0 with rois that take {sorted(counts)} samples per bin")
        ratio = max(counts.pop(), 1)
    attrs = {"output_height": out_h, "output_width": out_w, "sampling_ratio": ratio, "spatial_scale": scale,
             "mode": cx.attr("mode", "avg"), "half_pixel": half_pixel}
    return [cx.op("roi_align", [x, rois, indices], attrs)]


@converts("GridSample")
def _grid_sample(cx: NodeContext):
    """Opset 16's bilinear and bicubic are opset 20's linear and cubic."""
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(cx.attr("mode", "linear"), cx.attr("mode", "linear"))
    attrs = {"mode": mode, "padding_mode": cx.attr("padding_mode", "zeros"),
             "align_corners": bool(cx.attr("align_corners", 0))}
    return [cx.op("grid_sample", [cx.input(0), cx.input(1)], attrs)]

"""roi_align(x, rois, batch_indices; output_height, output_width, sampling_ratio, spatial_scale,
mode, half_pixel): ONNX RoiAlign. Each region of interest (x1, y1, x2, y2 in rois, scaled by
spatial_scale, less 0.5 with half_pixel; without it at least 1 x 1) is cut into output_height x
output_width bins; each bin averages ("avg") or takes the maximum ("max") of a sampling_ratio x
sampling_ratio grid of bilinear samples of its batch image. A sample further than one pixel
outside the image counts 0; one up to a pixel outside reads the edge. As ONNX's reference, "max"
takes the largest of the four weighted corners of each sample, not the interpolated value.

The grid is sampling_ratio samples per bin axis: ONNX's sampling_ratio=0 (ceil(roi size / bins),
from the data) is the converter's to refuse. A batch index outside the images (negative ones count
from the end) is an IndexOutOfRangeError at run time. Pattern `opaque`: every output element gathers its
samples from positions read from rois.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import as_int, cast, checked_index, max_, min_
from .common import check_float, checked_indices, te_shape
from .registry import REQUIRED, OpDef, OpTypeError, register

MODES = ("avg", "max")


def _infer(types, attrs):
    x, rois, indices = types
    check_float("roi_align", x)
    if x.rank != 4 or rois.rank != 2 or rois.shape[1] != 4 or indices.rank != 1:
        raise OpTypeError(f"roi_align: x must be N, C, H, W, rois (R, 4) and batch_indices (R,), got {x.shape}, "
                          f"{rois.shape} and {indices.shape}")
    if not dt.is_int(indices.dtype):
        raise OpTypeError(f"roi_align: batch_indices must be integers, got {indices.dtype}")
    if attrs["mode"] not in MODES:
        raise OpTypeError(f"roi_align: mode {attrs['mode']!r} is not one of {MODES}")
    if attrs["sampling_ratio"] < 1:
        raise OpTypeError(f"roi_align: sampling_ratio {attrs['sampling_ratio']} must be at least 1")
    if any(isinstance(d, str) for d in x.shape[2:]):
        raise OpTypeError(f"roi_align: the image size {x.shape[2:]} must be known")
    return [TensorType((rois.shape[0], x.shape[1], attrs["output_height"], attrs["output_width"]), x.dtype)]


def _bins(roi, attrs, to_float, mx):
    """(start_h, start_w, bin_h, bin_w) of a roi (x1, y1, x2, y2)."""
    offset = 0.5 if attrs["half_pixel"] else 0.0
    x1, y1, x2, y2 = (to_float(v) * attrs["spatial_scale"] - offset for v in roi)
    height, width = y2 - y1, x2 - x1
    if not attrs["half_pixel"]:  # malformed rois as 1 x 1
        height, width = mx(height, 1.0), mx(width, 1.0)
    return y1, x1, height / attrs["output_height"], width / attrs["output_width"]


def _corners(coord, size: int, to_int, to_float, lo, select):
    """(low index, high index, weight of the high one) of a sample coordinate already >= 0."""
    low = to_int(coord)
    edge = low >= size - 1
    return lo(low, size - 1), lo(low + 1, size - 1), select(edge, 0.0 * coord, coord - to_float(low))


def _reference(inputs, attrs):
    x, rois, indices = inputs
    indices = checked_indices("roi_align", indices, x.shape[0])
    h, w = x.shape[2:]
    g, oh, ow = attrs["sampling_ratio"], attrs["output_height"], attrs["output_width"]
    out = np.zeros((rois.shape[0], x.shape[1], oh, ow), np.float64)
    for r in range(rois.shape[0]):
        y0, x0, bh, bw = _bins(rois[r].astype(np.float64), attrs, float, max)
        image = x[int(indices[r])].astype(np.float64)
        for ph in range(oh):
            for pw in range(ow):
                samples = []
                for iy in range(g):
                    for ix in range(g):
                        y = y0 + ph * bh + (iy + 0.5) * bh / g
                        xx = x0 + pw * bw + (ix + 0.5) * bw / g
                        if y < -1.0 or y > h or xx < -1.0 or xx > w:
                            samples.append(np.zeros(x.shape[1]))
                            continue
                        yl, yh, ly = _corners(max(y, 0.0), h, int, float, min, lambda c, a, b: a if c else b)
                        xl, xh, lx = _corners(max(xx, 0.0), w, int, float, min, lambda c, a, b: a if c else b)
                        corners = [(1 - ly) * (1 - lx) * image[:, yl, xl], (1 - ly) * lx * image[:, yl, xh],
                                   ly * (1 - lx) * image[:, yh, xl], ly * lx * image[:, yh, xh]]
                        samples.append(sum(corners) if attrs["mode"] == "avg" else np.max(corners, axis=0))
                out[r, :, ph, pw] = np.mean(samples, axis=0) if attrs["mode"] == "avg" else np.max(samples, axis=0)
    return [out.astype(x.dtype)]


def _compute(inputs, attrs, out_types):
    x, rois, indices = inputs
    h, w = as_int(x.shape[2]), as_int(x.shape[3])
    g = attrs["sampling_ratio"]
    acc = dt.compute_dtype(x.dtype)
    iy, ix = te.reduce_axis((0, g), name="iy"), te.reduce_axis((0, g), name="ix")

    def to_float(v):
        return cast(acc, v)

    def to_int(v):
        return cast("int64", v)

    def sample(r, c, ph, pw):
        y0, x0, bh, bw = _bins([rois[r, k] for k in range(4)], attrs, to_float, max_)
        y = y0 + to_float(ph) * bh + (to_float(iy) + 0.5) * bh / float(g)
        xx = x0 + to_float(pw) * bw + (to_float(ix) + 0.5) * bw / float(g)
        b = checked_index(indices[r], x.shape[0])
        # b < 0 never holds (the check raises first), and comes first, where || always evaluates it: a
        # box whose samples all lie outside the image checks its image index too
        outside = te.any(b < 0, y < -1.0, y > float(h), xx < -1.0, xx > float(w))
        yl, yh, ly = _corners(max_(y, 0.0), h, to_int, to_float, min_, te.if_then_else)
        xl, xh, lx = _corners(max_(xx, 0.0), w, to_int, to_float, min_, te.if_then_else)
        corners = [(1.0 - ly) * (1.0 - lx) * to_float(x[b, c, yl, xl]), (1.0 - ly) * lx * to_float(x[b, c, yl, xh]),
                   ly * (1.0 - lx) * to_float(x[b, c, yh, xl]), ly * lx * to_float(x[b, c, yh, xh])]
        value = corners[0] + corners[1] + corners[2] + corners[3] if attrs["mode"] == "avg" else max_(
            max_(corners[0], corners[1]), max_(corners[2], corners[3]))
        return te.if_then_else(outside, te.const(0.0, acc), value)

    shape = te_shape(out_types[0], inputs)
    if attrs["mode"] == "avg":
        total = te.compute(shape, lambda *i: te.sum(sample(*i), axis=[iy, ix]), name="roi_sum")
        return [te.compute(shape, lambda *i: cast(x.dtype, total[i] / float(g * g)), name="roi_align")]
    best = te.compute(shape, lambda *i: te.max(sample(*i), axis=[iy, ix]), name="roi_max")
    return [te.compute(shape, lambda *i: cast(x.dtype, best[i]), name="roi_align")]


register(OpDef(
    name="roi_align",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="opaque",
    attrs={"output_height": 1, "output_width": 1, "sampling_ratio": REQUIRED, "spatial_scale": 1.0, "mode": "avg",
           "half_pixel": True},
    num_inputs=(3, 3),
    doc="ONNX RoiAlign: bilinear samples of each region's bins, averaged or their maximum.",
))

"""non_max_suppression(boxes, scores, max_per_class, iou_threshold, score_threshold?; dim,
center_point_box=False): ONNX NonMaxSuppression, the boxes each class keeps, as int64[dim, 3]
rows (batch, class, box).

For each batch and class, greedily: the boxes whose score is above score_threshold (every box
when it is left out), by descending score (ties: the lower index first), each kept unless its
intersection over union with a box already kept is above iou_threshold, until max_per_class are
kept. Boxes are (y1, x1, y2, x2) corners in either order, or (x center, y center, width, height)
with center_point_box. The thresholds and the limit are inputs, read at run time. A pair of boxes
whose intersection or either area is empty never suppresses; the IoU is computed in the boxes'
dtype, as ONNX's reference does, so a pair exactly at the threshold is decided the same way.

How many rows there are depends on the data, so it is a host operator (ember.ops.dynamic: no
kernel; the compiler runs this reference between compiled segments). Each kept box's IoU with the
candidates after it is one array operation: time kept x candidates, memory one row.
"""

from __future__ import annotations

import numpy as np

from ..graph.core import TensorType
from ..tir import dtype as dt
from .dynamic import _dim, _host_only
from .registry import REQUIRED, OpDef, OpTypeError, register


def _infer(types: list[TensorType], attrs) -> list[TensorType]:
    boxes, scores = types[:2]
    if boxes.rank != 3 or boxes.shape[2] != 4 or scores.rank != 3:
        raise OpTypeError(f"non_max_suppression needs boxes (batch, boxes, 4) and scores (batch, classes, boxes), "
                          f"got {boxes} and {scores}")
    if not dt.is_float(boxes.dtype) or scores.dtype != boxes.dtype:
        raise OpTypeError(f"non_max_suppression needs float boxes and scores of one dtype, got {boxes.dtype} and "
                          f"{scores.dtype}")
    for k, (what, kind) in enumerate([("max_per_class", "int64"), ("iou_threshold", "float"),
                                      ("score_threshold", "float")], start=2):
        if k < len(types) and (types[k].numel != 1 or not (types[k].dtype == kind or dt.is_float(types[k].dtype)
                                                           and kind == "float")):
            raise OpTypeError(f"non_max_suppression: {what} must be one {kind} value, got {types[k]}")
    return [TensorType((_dim("non_max_suppression", attrs), 3), "int64")]


def _corners(boxes: np.ndarray, center: bool) -> tuple[np.ndarray, ...]:
    """(y_min, x_min, y_max, x_max) of (n, 4) boxes."""
    if center:
        x, y, half_w, half_h = boxes[:, 0], boxes[:, 1], boxes[:, 2] / 2, boxes[:, 3] / 2
        return y - half_h, x - half_w, y + half_h, x + half_w
    return (np.minimum(boxes[:, 0], boxes[:, 2]), np.minimum(boxes[:, 1], boxes[:, 3]),
            np.maximum(boxes[:, 0], boxes[:, 2]), np.maximum(boxes[:, 1], boxes[:, 3]))


def _suppressed(i: int, corners: tuple[np.ndarray, ...], area: np.ndarray, iou_threshold) -> np.ndarray:
    """Whether box i, once kept, suppresses each box after it (bool, one per box i + 1 on)."""
    y0, x0, y1, x1 = corners
    rest = slice(i + 1, None)
    w = np.minimum(x1[i], x1[rest]) - np.maximum(x0[i], x0[rest])
    h = np.minimum(y1[i], y1[rest]) - np.maximum(y0[i], y0[rest])
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        inter = w * h
        union = area[i] + area[rest] - inter
        ok = (w > 0) & (h > 0) & (inter > 0) & (area[i] > 0) & (area[rest] > 0) & (union > 0)
        return ok & (inter / np.where(ok, union, 1) > iou_threshold)


def _reference(inputs, attrs):
    boxes, scores = inputs[:2]
    limit = max(int(inputs[2].reshape(-1)[0]), 0) if len(inputs) > 2 else 0
    iou_threshold = inputs[3].reshape(-1)[0].astype(boxes.dtype) if len(inputs) > 3 else boxes.dtype.type(0)
    score_threshold = inputs[4].reshape(-1)[0].astype(scores.dtype) if len(inputs) > 4 else None
    rows = []
    for b in range(boxes.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            candidates = np.arange(s.shape[0]) if score_threshold is None else np.flatnonzero(s > score_threshold)
            if limit == 0 or candidates.size == 0:
                continue
            candidates = candidates[np.argsort(-s[candidates], kind="stable")]
            corners = _corners(boxes[b, candidates], attrs["center_point_box"])
            area = (corners[3] - corners[1]) * (corners[2] - corners[0])
            alive = np.ones(candidates.size, bool)
            kept = 0
            for i in range(candidates.size):
                if not alive[i]:
                    continue
                rows.append((b, c, candidates[i]))
                kept += 1
                if kept == limit:
                    break
                alive[i + 1:] &= ~_suppressed(i, corners, area, iou_threshold)
    return [np.array(rows, dtype=np.int64).reshape(-1, 3)]


register(OpDef(
    name="non_max_suppression",
    infer=_infer,
    reference=_reference,
    compute=_host_only("non_max_suppression"),
    pattern="opaque",
    attrs={"dim": REQUIRED, "center_point_box": False},
    num_inputs=(2, 5),
    doc="ONNX NonMaxSuppression: the (batch, class, box) rows each class keeps; the count depends on the data.",
))

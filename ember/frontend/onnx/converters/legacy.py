"""The older forms of ONNX operators (opsets 7 to 17), read as their newer forms.

Until some version an operator took as attributes what it now takes as inputs (Slice's starts
and ends before 10, Pad's pads and Clip's bounds before 11, Split's sizes, Squeeze's and
Unsqueeze's axes before 13, the axes of the Reduce* operators before 18 (ReduceSum: 13), TopK's
k before 10); each such form is converted here by moving the attributes to constant inputs and
converting the node as the newer form (`NodeContext.convert_as`), so one converter serves every
version. The other old forms: Softmax, LogSoftmax and Hardmax before 13 work on the input
flattened to 2-D at `axis` (default 1); Upsample (7 and 9) and Resize-10 are resizes with
asymmetric coordinates; Dropout before 12 takes its ratio as an attribute, and before 10 gives a
mask of the input's type; BatchNormalization-7 has a `spatial` attribute.
"""

from __future__ import annotations

import numpy as np

from ..node import NodeContext
from ..registry import converts


def _ints(values) -> np.ndarray | None:
    return None if values is None else np.asarray(values, dtype="int64")


def _without(cx: NodeContext, *names: str) -> dict:
    return {k: v for k, v in cx.attrs.items() if k not in names}


@converts("Slice", versions=range(1, 10))
def _slice_1(cx: NodeContext):
    starts, ends, axes = (_ints(cx.attr(name)) for name in ("starts", "ends", "axes"))
    return cx.convert_as(13, [cx.input(0), starts, ends, axes], {})


@converts("Pad", versions=range(1, 11))
def _pad_2(cx: NodeContext):
    x = cx.input(0)
    value = cx.scalar(cx.attr("value", 0.0), x)
    return cx.convert_as(13, [x, _ints(cx.attr("pads")), value], _without(cx, "pads", "value"))


@converts("Clip", versions=range(1, 11))
def _clip_6(cx: NodeContext):
    x = cx.input(0)
    bounds = [None if cx.attr(name) is None else cx.scalar(cx.attr(name), x) for name in ("min", "max")]
    return cx.convert_as(13, [x, *bounds], {})


@converts("Split", versions=range(1, 13))
def _split_2(cx: NodeContext):
    return cx.convert_as(13, [cx.input(0), _ints(cx.attr("split"))], _without(cx, "split"))


@converts("Squeeze", "Unsqueeze", versions=range(1, 13))
def _squeeze_1(cx: NodeContext):
    return cx.convert_as(13, [cx.input(0), _ints(cx.attr("axes"))], {})


@converts("ReduceSum", versions=range(1, 13))
@converts("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
          "ReduceLogSum", "ReduceLogSumExp", versions=range(1, 18))
def _reduce_1(cx: NodeContext):
    return cx.convert_as(18, [cx.input(0), _ints(cx.attr("axes"))], _without(cx, "axes"))


@converts("TopK", versions=range(1, 10))
def _topk_1(cx: NodeContext):
    return cx.convert_as(11, [cx.input(0), _ints([cx.attr("k")])], _without(cx, "k"))


@converts("Softmax", "LogSoftmax", "Hardmax", versions=range(1, 13))
def _softmax_1(cx: NodeContext):
    """Over the dimensions from `axis` on together: flattened there, the op over the last axis,
    reshaped back."""
    x = cx.input(0)
    shape = cx.type(x).shape
    axis = cx.attr("axis", 1) % max(len(shape), 1)
    if axis >= len(shape) - 1:
        return cx.convert_as(13, [x], {"axis": -1})
    flat = cx.op("flatten", [x], {"start_dim": axis})
    (y,) = cx.convert_as(13, [flat], {"axis": -1})
    return [cx.op("reshape", [y], {"shape": shape})]


@converts("Upsample", versions=range(7, 10))
@converts("Resize", versions=range(10, 11))
def _upsample(cx: NodeContext):
    """Output size floor(input * scale), source coordinate output / scale (asymmetric), the
    nearest pixel below it."""
    x = cx.input(0)
    if cx.node.op_type == "Upsample" and cx.version < 9:
        scales = np.asarray(cx.attr("scales"), dtype="float32")
    else:
        scales = cx.input(1)
    mode = cx.attr("mode", "nearest")
    attrs = {"mode": "linear" if mode == "bilinear" else mode, "coordinate_transformation_mode": "asymmetric",
             "nearest_mode": "floor"}
    return cx.convert_as(13, [x, None, scales], attrs, op_type="Resize")


@converts("Dropout", versions=range(1, 12))
def _dropout_7(cx: NodeContext):
    x = cx.input(0)
    outs = cx.convert_as(12, [x], {})
    if cx.version < 10 and cx.wants_output(1):  # the mask in the input's type
        outs = [outs[0], outs[1].astype(cx.type(x).dtype)]
    return outs


@converts("BatchNormalization", versions=range(1, 9))
def _batch_norm_7(cx: NodeContext):
    if not cx.attr("spatial", 1) and cx.type(cx.input(1)).rank > 1:
        raise cx.unsupported("spatial=0")
    return cx.convert_as(9, cx.inputs, _without(cx, "spatial", "momentum"))

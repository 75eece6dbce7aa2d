"""max_pool2d_nhwc and avg_pool2d_nhwc: max_pool2d's and avg_pool2d's windows over channels-last
activations, x (N, H, W, C) to (N, OH, OW, C), their attributes the same (kernel, strides,
padding, dilations, ceil_mode, count_include_pad): what ember.passes.channels_last makes of
ResNet's max pool between its channels-last stem and first block, which would otherwise be
transposed to NCHW and back. Taps in the padding are skipped (the lowest value for a maximum, 0
for a sum, which avg_pool2d's count divides as it does NCHW's: ember.ops.pool.window_mean); sums
in float32 for half inputs. An output a thread on a GPU (the default schedule of a reduction),
consecutive threads on consecutive channels.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import as_int, cast
from .conv import window_attrs
from .pool import pool_attrs, window_mean
from .registry import OpDef, OpTypeError, get, infer_types, register


def _nchw_op(op: str) -> str:
    return op.removesuffix("_nhwc")


def _infer(op: str):
    def infer(types, attrs):
        (x,) = types
        if x.rank != 4:
            raise OpTypeError(f"{op}: x (N, H, W, C), got {x.shape}")
        n, h, w, c = x.shape
        _, (out,) = infer_types(_nchw_op(op), [TensorType((n, c, h, w), x.dtype)], attrs)
        return [TensorType((n, *out.shape[2:], c), out.dtype)]

    return infer


def _reference(op: str):
    def reference(inputs, attrs):
        (out,) = get(_nchw_op(op)).reference([inputs[0].transpose(0, 3, 1, 2)], attrs)
        return [np.ascontiguousarray(out.transpose(0, 2, 3, 1))]

    return reference


def _compute(op: str):
    def compute(inputs, attrs, out_types):
        (x,) = inputs
        kernel = tuple(attrs["kernel"])
        (sh, sw), (pt, pl), _, (dh, dw) = window_attrs(op, attrs, 2, kernel)
        h, w = (as_int(d) for d in x.shape[1:3])
        ky, kx = te.reduce_axis((0, kernel[0]), name="ky"), te.reduce_axis((0, kernel[1]), name="kx")
        is_max = op.startswith("max")
        acc_dtype = x.dtype if is_max else dt.compute_dtype(x.dtype)
        skipped = te.max.identity(x.dtype) if is_max else te.const(0, acc_dtype)

        def window(n, y, z, c):
            i, j = y * sh - pt + ky * dh, z * sw - pl + kx * dw
            value = te.if_then_else(te.all(i >= 0, i < h, j >= 0, j < w), cast(acc_dtype, x[n, i, j, c]), skipped)
            return te.max(value, axis=[ky, kx]) if is_max else te.sum(value, axis=[ky, kx])

        acc = te.compute(out_types[0].shape, window, name="pool")
        if is_max:
            return [acc]
        return [window_mean(acc, x.dtype, attrs, [h, w], slice(1, 3), "avg_pool")]

    return compute


for _kind in ("max", "avg"):
    _op = f"{_kind}_pool2d_nhwc"
    register(OpDef(
        name=_op, infer=_infer(_op), reference=_reference(_op), compute=_compute(_op),
        pattern="reduction", attrs=pool_attrs(2),
        doc=f"2-D {_kind} pooling over channels-last x (N, H, W, C), {_kind}_pool2d's attributes.",
    ))

"""ONNX neural-network operators as ember operators: convolution, matmul, normalization,
pooling, reductions (their forms before opset 13 or 18: legacy.py), running sums and products,
determinants.

Padding comes from `pads` or `auto_pad` (spatial_pads); convolutions of 1, 2 or 3 spatial
dimensions are ember's of that rank, but 1-D transposed ones, which run as their 2-D form on an
inserted unit height; pooling of 1, 2 or 3 spatial dimensions is ember's pooling
of that rank, MaxPool's Indices output max_pool_indices; ReduceL2 is ember's l2_norm (scaled: no
overflow of the squares); the other Reduce* variants ember lacks (L1, SumSquare, LogSum,
LogSumExp) and LRN are decomposed. BatchNormalization in training mode normalizes by the batch's
statistics and moves the running ones (its outputs 1 and 2) toward them.
"""

from __future__ import annotations

import math

import numpy as np

from .... import dims
from ....tir import dtype as dt
from ..node import NodeContext, Tensor, to_dtype
from ..registry import converts

# -- convolution, matmul ----------------------------------------------------------------------


def spatial_pads(cx: NodeContext, x: Tensor, kernel, strides, dilations) -> tuple[int, ...]:
    """ONNX `pads` (begins then ends) from `pads` or `auto_pad` (SAME_*: the output size is
    ceil(input / stride); SAME_UPPER puts the odd padding at the end, SAME_LOWER at the start)."""
    n = len(kernel)
    auto_pad = cx.attr("auto_pad", "NOTSET")
    if auto_pad == "NOTSET":
        return tuple(cx.attr("pads", [0] * 2 * n))
    if auto_pad == "VALID":
        return (0,) * 2 * n
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise cx.error(f"auto_pad {auto_pad!r} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    sizes = cx.static_shape(x, f"auto_pad={auto_pad}")[2:]
    begins, ends = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begins.append(small if auto_pad == "SAME_UPPER" else large)
        ends.append(large if auto_pad == "SAME_UPPER" else small)
    return tuple(begins + ends)


def _window(cx: NodeContext, x: Tensor, kernel) -> tuple[tuple, tuple, tuple]:
    """Strides, dilations and pads of a convolution or pooling window."""
    n = len(kernel)
    strides = tuple(cx.attr("strides", [1] * n))
    dilations = tuple(cx.attr("dilations", [1] * n))
    return strides, dilations, spatial_pads(cx, x, kernel, strides, dilations)


def _spatial_rank(cx: NodeContext, t: Tensor, supported: tuple[int, ...]) -> int:
    n = cx.type(t).rank - 2
    if n not in supported:
        raise cx.unsupported(f"{n}-D")
    return n


@converts("Conv")
def _conv(cx: NodeContext):
    x, w, b = cx.input(0), cx.input(1), cx.optional(2)
    n = _spatial_rank(cx, w, (1, 2, 3))
    kernel = cx.static_shape(w, "the kernel size")[2:]
    strides, dilations, pads = _window(cx, x, kernel)
    attrs = {"strides": strides, "padding": pads, "dilations": dilations, "groups": cx.attr("group", 1)}
    return [cx.op(f"conv{n}d", [x, w, b], attrs)]


@converts("ConvTranspose")
def _conv_transpose(cx: NodeContext):
    x, w, b = cx.input(0), cx.input(1), cx.optional(2)
    n = _spatial_rank(cx, w, (1, 2, 3))
    kernel = cx.static_shape(w, "the kernel size")[2:]
    strides = tuple(cx.attr("strides", [1] * n))
    dilations = tuple(cx.attr("dilations", [1] * n))
    out_pad = tuple(cx.attr("output_padding", [0] * n))
    auto_pad = cx.attr("auto_pad", "NOTSET")
    out_shape = cx.attr("output_shape")
    if out_shape is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = [size * s for size, s in zip(cx.static_shape(x, "auto_pad")[2:], strides)]
    if out_shape is not None:  # pads such that the output has this size
        sizes = cx.static_shape(x, "output_shape")[2:]
        begins, ends, extra = [], [], []
        for size, k, s, d, op, out in zip(sizes, kernel, strides, dilations, out_pad, out_shape[-n:]):
            total = s * (size - 1) + op + (k - 1) * d + 1 - out
            small, large = total // 2, total - total // 2
            begin, end = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
            if begin < 0:
                raise cx.unsupported(f"output_shape={tuple(out_shape)} that pads the output at the start")
            begins.append(begin)
            ends.append(max(end, 0))
            extra.append(op - min(end, 0))  # an output larger than the full one: the bias alone at the end
        pads, out_pad = tuple(begins + ends), tuple(extra)
    else:
        pads = tuple((0,) * 2 * n if auto_pad == "VALID" else cx.attr("pads", [0] * 2 * n))
    if n == 1:  # as a 2-D transpose of unit height
        x, w = cx.op("unsqueeze", [x], {"axes": (2,)}), cx.op("unsqueeze", [w], {"axes": (2,)})
        strides, dilations, out_pad = (1, *strides), (1, *dilations), (0, *out_pad)
        pads = (0, pads[0], 0, pads[1])
    attrs = {"strides": strides, "padding": pads, "output_padding": out_pad, "dilations": dilations,
             "groups": cx.attr("group", 1)}
    y = cx.op(f"conv_transpose{max(n, 2)}d", [x, w, b], attrs)
    return [cx.op("squeeze", [y], {"axes": (2,)}) if n == 1 else y]


@converts("DeformConv")
def _deform_conv(cx: NodeContext):
    x, w, offset, b, mask = (cx.optional(k) for k in range(5))
    _spatial_rank(cx, w, (2,))
    kernel = cx.static_shape(w, "the kernel size")[2:]
    strides, dilations, pads = _window(cx, x, kernel)
    attrs = {"strides": strides, "padding": pads, "dilations": dilations, "groups": cx.attr("group", 1),
             "offset_groups": cx.attr("offset_group", 1)}
    if mask is not None and b is None:  # the mask comes after a bias
        b = np.zeros(cx.static_shape(w, "DeformConv")[0], dtype=cx.type(x).dtype)
    return [cx.op("deform_conv2d", [t for t in (x, w, offset, b, mask) if t is not None], attrs)]


@converts("Gemm")
def _gemm(cx: NodeContext):
    attrs = {"alpha": cx.attr("alpha", 1.0), "beta": cx.attr("beta", 1.0),
             "trans_a": bool(cx.attr("transA", 0)), "trans_b": bool(cx.attr("transB", 0))}
    return [cx.op("gemm", [cx.input(0), cx.input(1), cx.optional(2)], attrs)]


@converts("MatMul")
def _matmul(cx: NodeContext):
    return [cx.op("matmul", [cx.input(0), cx.input(1)])]


# -- normalization --------------------------------------------------------------------------


@converts("BatchNormalization")
def _batch_norm(cx: NodeContext):
    x, scale, bias, mean, var = (cx.input(k) for k in range(5))
    eps = cx.attr("epsilon", 1e-5)
    if not cx.attr("training_mode", 0) and not any(cx.wants_output(k) for k in (1, 2)):
        return [cx.op("batch_norm", [x, mean, var, scale, bias], {"eps": eps})]
    # training: normalized by the batch's own statistics (the variance of the population, as
    # ONNX's reference), and the running statistics moved toward them by 1 - momentum
    if any(cx.wants_output(k) for k in (3, 4)):
        raise cx.unsupported("training_mode, saved_mean and saved_var")
    axes = tuple(k for k in range(cx.type(x).rank) if k != 1)
    batch_mean = cx.op("mean", [x], {"axes": axes})
    batch_var = cx.op("var", [x], {"axes": axes})
    y = cx.op("batch_norm", [x, batch_mean, batch_var, scale, bias], {"eps": eps})
    momentum = cx.attr("momentum", 0.9)

    def running(old, batch):
        if cx.type(batch).dtype != cx.type(old).dtype:
            batch = cx.op("cast", [batch], {"dtype": cx.type(old).dtype})
        return cx.op("add", [cx.op("mul", [old, cx.scalar(momentum, old)]),
                             cx.op("mul", [batch, cx.scalar(1 - momentum, old)])])

    return [y, running(mean, batch_mean), running(var, batch_var)]


@converts("LayerNormalization")
def _layer_norm(cx: NodeContext):
    x, scale, bias = cx.input(0), cx.input(1), cx.optional(2)
    t = cx.type(x)
    axis = cx.attr("axis", -1) % t.rank
    eps = cx.attr("epsilon", 1e-5)
    normalized = t.shape[axis:]
    if all(p is None or cx.type(p).shape == normalized for p in (scale, bias)):
        y = cx.op("layer_norm", [x, scale, bias], {"normalized_ndim": t.rank - axis, "eps": eps})
    else:  # scale or bias broadcast to the normalized shape
        y = cx.op("mul", [cx.op("layer_norm", [x], {"normalized_ndim": t.rank - axis, "eps": eps}), scale])
        y = y if bias is None else cx.op("add", [y, bias])
    outs = [y]
    if cx.wants_output(1) or cx.wants_output(2):  # Mean and InvStdDev, in the stash type
        stash = to_dtype(cx.attr("stash_type", 1), cx.where)
        xs = x if t.dtype == stash else cx.op("cast", [x], {"dtype": stash})
        axes = tuple(range(axis, t.rank))
        mean = cx.op("mean", [xs], {"axes": axes, "keepdims": True})
        var = cx.op("var", [xs], {"axes": axes, "keepdims": True})
        outs += [mean, cx.op("rsqrt", [cx.op("add", [var, cx.scalar(eps, var)])])]
    return outs


@converts("InstanceNormalization")
def _instance_norm(cx: NodeContext):
    inputs = [cx.input(0), cx.input(1), cx.input(2)]
    return [cx.op("instance_norm", inputs, {"eps": cx.attr("epsilon", 1e-5)})]


@converts("GroupNormalization")
def _group_norm(cx: NodeContext):
    x, scale, bias = cx.input(0), cx.input(1), cx.input(2)
    groups = cx.attr("num_groups")
    if cx.version < 21:  # GroupNormalization-18: scale and bias per group; ember's are per channel
        channels = cx.static_shape(x, "GroupNormalization-18")[1]
        index = np.repeat(np.arange(groups, dtype="int64"), channels // groups)
        scale, bias = (cx.op("gather", [p, index], {"axis": 0}) for p in (scale, bias))
    return [cx.op("group_norm", [x, scale, bias], {"num_groups": groups, "eps": cx.attr("epsilon", 1e-5)})]


@converts("MeanVarianceNormalization")
def _mean_variance_normalization(cx: NodeContext):  # (x - mean) / sqrt(var + 1e-9) over the axes
    x = cx.input(0)
    attrs = {"axes": tuple(cx.attr("axes", [0, 2, 3])), "keepdims": True}
    centered = cx.op("sub", [x, cx.op("mean", [x], attrs)])
    std = cx.op("sqrt", [cx.op("add", [cx.op("var", [x], attrs), cx.scalar(1e-9, x)])])
    return [cx.op("div", [centered, std])]


@converts("LRN")
def _lrn(cx: NodeContext):
    """x / (bias + alpha / size * (sum of x^2 over `size` neighbouring channels))^beta; the
    window sum as an average pooling over channels of x^2 reshaped to (N, 1, C, spatial)."""
    x = cx.input(0)
    n, c, *spatial = cx.type(x).shape
    size = cx.attr("size")
    before = (size - 1) // 2
    squares = cx.op("reshape", [cx.op("mul", [x, x])], {"shape": (n, 1, c, math.prod(spatial))})
    mean = cx.op("avg_pool2d", [squares], {"kernel": (size, 1), "strides": (1, 1),
                                           "padding": (before, 0, size - 1 - before, 0), "count_include_pad": True})
    mean = cx.op("reshape", [mean], {"shape": (n, c, *spatial)})
    alpha, bias = cx.scalar(cx.attr("alpha", 1e-4), x), cx.scalar(cx.attr("bias", 1.0), x)
    scale = cx.op("add", [cx.op("mul", [mean, alpha]), bias])
    return [cx.op("div", [x, cx.op("pow", [scale, cx.scalar(cx.attr("beta", 0.75), x)])])]


# -- pooling --------------------------------------------------------------------------------


@converts("MaxPool", "AveragePool")
def _pool(cx: NodeContext):
    x = cx.input(0)
    n = _spatial_rank(cx, x, (1, 2, 3))
    kernel = tuple(cx.attr("kernel_shape"))
    strides, dilations, pads = _window(cx, x, kernel)
    attrs = {"kernel": kernel, "strides": strides, "padding": pads, "ceil_mode": bool(cx.attr("ceil_mode", 0))}
    if cx.node.op_type != "MaxPool":  # AveragePool, and LpPool's average of |x|^p
        attrs["count_include_pad"] = bool(cx.attr("count_include_pad", 0))
        return [cx.op(f"avg_pool{n}d", [x], {**attrs, "dilations": dilations})]
    if n == 2 and not cx.wants_output(1) and _quantized_nchw(cx, x):
        return [_quantized_max_pool(cx, x, {**attrs, "dilations": dilations})]
    outs = [cx.op(f"max_pool{n}d", [x], {**attrs, "dilations": dilations})]
    if cx.wants_output(1):  # flat indices into x, row-major (storage_order 0) or column-major spatially
        outs.append(cx.op("max_pool_indices", [x], {**attrs, "dilations": dilations,
                                                     "storage_order": cx.attr("storage_order", 0)}))
    return outs


def _quantized_nchw(cx: NodeContext, x: Tensor) -> bool:
    t = cx.type(x)
    return t.dtype in ("uint8", "int8") and t.rank == 4 and all(isinstance(d, int) for d in t.shape)


def _quantized_max_pool(cx: NodeContext, x: Tensor, attrs: dict) -> Tensor:
    """A 2-D max pool of a quantized model's uint8 or int8 (N, C, H, W) in NHWC (max_pool2d_nchwc
    with one block of all C channels), between transposes that cancel against those around the
    int8 convolutions, whose rows are NHWC (converters/int8.py)."""
    n, c, h, w = cx.type(x).shape
    nhwc = cx.op("reshape", [cx.op("transpose", [x], {"perm": (0, 2, 3, 1)})], {"shape": (n, 1, h, w, c)})
    pooled = cx.op("max_pool2d_nchwc", [nhwc], attrs)
    _, _, oh, ow, _ = cx.type(pooled).shape
    return cx.op("transpose", [cx.op("reshape", [pooled], {"shape": (n, oh, ow, c)})], {"perm": (0, 3, 1, 2)})


@converts("MaxUnpool")
def _max_unpool(cx: NodeContext):
    """x written at its indices into zeros of the size MaxPool reads ((in - 1) * stride - pads +
    kernel), then padded at the ends to `output_shape`, as ONNX's reference does: a
    scatter_elements along each channel's flattened plane (the indices, counted over the whole
    tensor, less the plane's offset; MaxPool's indices stay in their channel's plane)."""
    x, indices = cx.input(0), cx.input(1)
    n, c, *size = cx.static_shape(x, "MaxUnpool")
    kernel = cx.attr("kernel_shape")
    strides = cx.attr("strides", [1] * len(kernel))
    pads = cx.attr("pads", [0] * 2 * len(kernel))
    full = [(m - 1) * s - pads[k] - pads[k + len(kernel)] + kk
            for k, (m, s, kk) in enumerate(zip(size, strides, kernel))]
    plane = math.prod(full)
    offsets = (np.arange(n * c, dtype="int64") * plane).reshape(n, c, 1)
    flat = cx.op("sub", [cx.op("reshape", [cx.op("cast", [indices], {"dtype": "int64"})],
                               {"shape": (n, c, math.prod(size))}), offsets])
    zeros = cx.op("expand", [cx.scalar(0, x)], {"shape": (n, c, plane)})
    y = cx.op("scatter_elements", [zeros, flat, cx.op("reshape", [x], {"shape": (n, c, math.prod(size))})],
              {"axis": 2})
    y = cx.op("reshape", [y], {"shape": (n, c, *full)})
    shape = cx.const_ints(2, "output_shape")
    if shape is None or list(shape[2:]) == full:
        return [y]
    grow = [want - have for want, have in zip(shape[2:], full)]
    if min(grow) < 0:
        raise cx.error(f"output_shape {shape} is smaller than the unpooled size {full}")
    return [cx.op("pad", [y], {"pads": (0,) * (len(full) + 2) + (0, 0, *grow)})]


@converts("GlobalAveragePool")
def _global_avg_pool(cx: NodeContext):
    return [cx.op("global_avg_pool", [cx.input(0)])]


@converts("GlobalMaxPool")
def _global_max_pool(cx: NodeContext):
    x = cx.input(0)
    return [cx.op("max", [x], {"axes": tuple(range(2, cx.type(x).rank)), "keepdims": True})]


# -- reductions -----------------------------------------------------------------------------

REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min", "ReduceProd": "prod"}
REDUCE_COMPOSITE = ("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")


@converts(*REDUCE, *REDUCE_COMPOSITE)
def _reduce(cx: NodeContext):
    op_type, x = cx.node.op_type, cx.input(0)
    axes = cx.const_ints(1, "axes")  # (an attribute before ReduceSum-13 and the others' 18: legacy.py)
    if not axes:
        if cx.attr("noop_with_empty_axes", 0):
            return [x]
        axes = None
    attrs = {"axes": None if axes is None else tuple(axes), "keepdims": bool(cx.attr("keepdims", 1))}
    match op_type:
        case "ReduceL1":
            return [cx.op("sum", [cx.op("abs", [x])], attrs)]
        case "ReduceL2":  # scaled before squaring: finite where the norm is (1e20 values), exact at 1e-20
            return [cx.op("l2_norm", [x], attrs)]
        case "ReduceSumSquare":  # as it is: its partial sums overflow only where the result does
            return [cx.op("sum", [cx.op("mul", [x, x])], attrs)]
        case "ReduceLogSum":  # the sum overflows only past FLT_MAX / n, as ReduceSum's
            return [cx.op("log", [cx.op("sum", [x], attrs)])]
        case "ReduceLogSumExp":  # shifted by the maximum, which keeps exp from overflowing
            top = cx.op("max", [x], {**attrs, "keepdims": True})
            total = cx.op("sum", [cx.op("exp", [cx.op("sub", [x, top])])], attrs)
            top = top if attrs["keepdims"] else cx.op("max", [x], attrs)
            return [cx.op("add", [cx.op("log", [total]), top])]
    shape = cx.type(x).shape
    if op_type == "ReduceMean" and dt.is_int(cx.type(x).dtype) and all(isinstance(d, int) for d in shape):
        # ONNX's reference: the sum in the integer type, divided rounding toward zero
        count = math.prod(shape[a % len(shape)] for a in axes) if axes is not None else math.prod(shape)
        total = cx.op("sum", [x], attrs)
        return [cx.op("trunc_divide", [total, np.asarray(count, cx.type(x).dtype)])]
    if cx.type(x).dtype == "bool" and op_type in ("ReduceMax", "ReduceMin"):  # any and all, on 0 and 1
        y = cx.op(REDUCE[op_type], [cx.op("cast", [x], {"dtype": "uint8"})], attrs)
        return [cx.op("cast", [y], {"dtype": "bool"})]
    return [cx.op(REDUCE[op_type], [x], attrs)]


@converts("ArgMax", "ArgMin")
def _arg_reduce(cx: NodeContext):
    x = cx.input(0)
    op = cx.node.op_type.lower()
    axis = cx.attr("axis", 0) % cx.type(x).rank
    attrs = {"axis": axis, "keepdims": bool(cx.attr("keepdims", 1))}
    size = cx.type(x).shape[axis]
    if dims.is_symbol(size):  # an empty axis has no extremum: a call that binds it to 0 is refused
        ranges = cx.importer.graph.ranges
        lo, hi = ranges.get(size, (0, None))
        ranges[size] = (max(lo, 1), hi)
    if not cx.attr("select_last_index", 0):
        return [cx.op(op, [x], attrs)]
    # the last extremum is the first one of the reversed axis
    size = cx.static_shape(x, "select_last_index")[axis]
    flipped = cx.op("slice", [x], {"starts": (-1,), "ends": (-(2**63),), "axes": (axis,), "steps": (-1,)})
    return [cx.op("sub", [np.asarray(size - 1, "int64"), cx.op(op, [flipped], attrs)])]


@converts("CumSum", "CumProd")
def _cumsum(cx: NodeContext):
    (axis,) = cx.const_ints(1, "axis")
    attrs = {"axis": axis, "exclusive": bool(cx.attr("exclusive", 0)), "reverse": bool(cx.attr("reverse", 0))}
    return [cx.op(cx.node.op_type.lower(), [cx.input(0)], attrs)]


@converts("Det")
def _det(cx: NodeContext):
    return [cx.op("det", [cx.input(0)])]

"""Convolution, matrix products, pooling, resizing, attention and embedding.

Torch gives symmetric padding per spatial dimension ([ph, pw]); ember takes ONNX's (begins...,
ends...). `linear` on 2-D input is one `gemm` with the weight transposed (once, at import, when it is
a constant; else trans_b); on higher
ranks the leading dimensions are folded into one (reshape, gemm, reshape), or, when they are
symbolic, it is a broadcasting `matmul` with the transposed weight.
"""

from __future__ import annotations

import math

from ..node import Const, Unsupported
from ..registry import handles


def _pads(padding) -> tuple[int, ...]:
    return tuple(padding) * 2


def _spatial(v, n: int) -> tuple[int, ...]:
    """A pooling size per spatial dimension: ATen allows one int or a one-element list for all."""
    v = tuple(v) if isinstance(v, list | tuple) else (v,)
    return v * n if len(v) == 1 else v


@handles("convolution.default")
def convolution(b, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    y = b.v(x)
    inputs = [y, b.v(weight)] + ([b.v(bias)] if bias is not None else [])
    rank = b.type_of(y).rank
    attrs = dict(strides=tuple(stride), padding=_pads(padding), dilations=tuple(dilation), groups=groups)
    if transposed:
        if rank not in (4, 5):
            raise Unsupported(f"transposed convolution of rank-{rank} input (only conv_transpose2d and 3d)")
        return b.op(f"conv_transpose{rank - 2}d", inputs, output_padding=tuple(output_padding), **attrs)
    if rank not in (3, 4, 5):
        raise Unsupported(f"convolution of rank-{rank} input (only conv1d, conv2d and conv3d)")
    return b.op(f"conv{rank - 2}d", inputs, **attrs)


def _transposed_weight(b, weight) -> tuple[object, bool]:
    """The (out, in) weight of a linear layer as gemm's b: a constant is transposed now, once,
    so the kernel reads it in the order it multiplies (trans_b=False); otherwise trans_b. The
    transposed copy is the graph's (not copied again: BERT-base's 340 MB of linear weights)."""
    if isinstance(weight, Const):
        return b.transposed(weight), False
    return b.v(weight), True


@handles("linear.default")
def linear(b, x, weight, bias=None):
    y = b.v(x)
    t = b.type_of(y)
    c = [b.v(bias)] if bias is not None else []
    lead = t.shape[:-1]
    if t.rank == 2 or all(isinstance(d, int) for d in lead):
        w, trans_b = _transposed_weight(b, weight)
        flat = y if t.rank == 2 else b.op("reshape", [y], shape=(math.prod(lead), t.shape[-1]))
        out = b.op("gemm", [flat, w, *c], trans_b=trans_b)
        return out if t.rank == 2 else b.op("reshape", [out], shape=b.out.shape)
    if isinstance(weight, Const):  # transposed now, with torch
        wt = b.transposed(weight)
    else:
        wt = b.op("transpose", [b.v(weight)], perm=(1, 0))
    out = b.op("matmul", [y, wt])
    return b.op("add", [out, *c]) if c else out


@handles("addmm.default")
def addmm(b, bias, mat1, mat2, *, beta=1, alpha=1):
    return b.op("gemm", [b.v(mat1), b.v(mat2), b.v(bias)], alpha=float(alpha), beta=float(beta))


@handles("mm.default", "bmm.default", "matmul.default")
def matmul(b, x, other):
    return b.op("matmul", [b.v(x), b.v(other)])


def _pool_attrs(kernel_size, stride, padding, n: int, **rest) -> dict:
    return dict(kernel=_spatial(kernel_size, n), strides=_spatial(stride or kernel_size, n),
                padding=_pads(_spatial(padding, n)), **rest)


@handles("max_pool2d_with_indices.default", "max_pool3d_with_indices.default")
def max_pool_with_indices(b, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """The values, and the indices (each channel's plane numbered row-major, as torch does)."""
    y = b.v(x)
    n = b.type_of(y).rank - 2
    attrs = _pool_attrs(kernel_size, stride, padding, n, dilations=_spatial(dilation, n), ceil_mode=ceil_mode)
    return b.op(f"max_pool{n}d", [y], **attrs), b.op("max_pool_indices", [y], per_plane=True, **attrs)


@handles("avg_pool2d.default", "avg_pool3d.default")
def avg_pool(b, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None):
    if divisor_override is not None:
        raise Unsupported(f"average pooling with divisor_override={divisor_override}")
    y = b.v(x)
    n = b.type_of(y).rank - 2
    return b.op(f"avg_pool{n}d", [y], **_pool_attrs(kernel_size, stride, padding, n, ceil_mode=ceil_mode,
                                                     count_include_pad=count_include_pad))


@handles("_adaptive_avg_pool2d.default")
def adaptive_avg_pool2d(b, x, output_size):
    if tuple(output_size) == (1, 1):
        return b.op("global_avg_pool", [b.v(x)])
    return b.op("adaptive_avg_pool2d", [b.v(x)], output_size=tuple(output_size))


def _check_scales(b, x, scale_factors):
    """torch maps output to input coordinates by 1 / scale_factor when one is given; that is
    in / out (what resize uses) when the scale gives the output size exactly."""
    if scale_factors is None:
        return
    sizes_in, sizes_out = b.type_of(x).shape[2:], b.out.shape[2:]
    if any(not isinstance(n, int) or n * s != m for n, m, s in zip(sizes_in, sizes_out, scale_factors)):
        raise Unsupported(f"scale factors {tuple(scale_factors)} that do not give the output size "
                          f"{tuple(sizes_out)} from {tuple(sizes_in)} exactly")


@handles("upsample_nearest2d.vec")
def upsample_nearest2d(b, x, output_size, scale_factors):
    _check_scales(b, x, scale_factors)  # then torch's source index is floor(dst * in / out)
    return b.op("resize", [b.v(x)], sizes=tuple(b.out.shape[2:]), mode="nearest",
                coordinate_transformation_mode="asymmetric", nearest_mode="floor")


@handles("upsample_bilinear2d.vec")
def upsample_bilinear2d(b, x, output_size, align_corners, scale_factors):
    # torch's half-pixel mapping clamps at the edges, as resize does; with scale factors it maps
    # by 1 / scale_factor, as resize's scales do (align_corners ignores them, so they must be exact)
    if align_corners:
        _check_scales(b, x, scale_factors)
    scales = {} if align_corners or scale_factors is None else {"scales": tuple(float(f) for f in scale_factors)}
    return b.op("resize", [b.v(x)], sizes=tuple(b.out.shape[2:]), mode="linear",
                coordinate_transformation_mode="align_corners" if align_corners else "half_pixel", **scales)


def _antialiased(b, x, mode: str, align_corners, scales_h, scales_w):
    """torch's antialias is ONNX's with the taps past an edge left out (exclude_outside), and
    PIL's bicubic coefficient -0.5; scale factors map by 1 / scale_factor, as resize's scales."""
    if align_corners:
        raise Unsupported("antialiased interpolation with align_corners=True")
    scales = {} if scales_h is None or scales_w is None else {"scales": (float(scales_h), float(scales_w))}
    return b.op("resize", [b.v(x)], sizes=tuple(b.out.shape[2:]), mode=mode,
                coordinate_transformation_mode="half_pixel", antialias=True, exclude_outside=True,
                cubic_coeff_a=-0.5, **scales)


@handles("_upsample_bilinear2d_aa.default")
def upsample_bilinear2d_aa(b, x, output_size, align_corners, scales_h=None, scales_w=None):
    return _antialiased(b, x, "linear", align_corners, scales_h, scales_w)


@handles("_upsample_bicubic2d_aa.default")
def upsample_bicubic2d_aa(b, x, output_size, align_corners, scales_h=None, scales_w=None):
    return _antialiased(b, x, "cubic", align_corners, scales_h, scales_w)


@handles("scaled_dot_product_attention.default")
def scaled_dot_product_attention(b, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
                                 scale=None, enable_gqa=False):
    if dropout_p:
        raise Unsupported(f"attention dropout p={dropout_p} (inference only)")
    q = b.v(query)
    mask = []
    if attn_mask is not None:
        m = b.v(attn_mask)
        mask = [m if m.dtype == "bool" else b.cast(m, q.dtype)]
    return b.op("scaled_dot_product_attention", [q, b.v(key), b.v(value), *mask], causal=bool(is_causal),
                scale=None if scale is None else float(scale), gqa=bool(enable_gqa))


@handles("embedding.default")
def embedding(b, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return b.op("embedding", [b.v(weight), b.v(indices)])


"""End-to-end kernels, convolutions and pooling (NCHW): padding as a te.if_then_else stage
(inlined, computed at the output, or left at the root), stride, dilation, groups, depthwise;
max and average pooling with and without padding. References are NumPy loops over windows."""

from __future__ import annotations

import numpy as np
import pytest

from ember import te
from ember.testing import check_schedule

BOTH = ("c", "python")


def out_size(size: int, k: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1


def pad_nchw(data, pad: int, value, name: str = "pad"):
    n, c, h, w = (int(d.value) for d in data.shape)
    if pad == 0:
        return data
    return te.compute(
        (n, c, h + 2 * pad, w + 2 * pad),
        lambda nn, cc, y, x: te.if_then_else(
            te.all(y >= pad, y < h + pad, x >= pad, x < w + pad), data[nn, cc, y - pad, x - pad], value
        ),
        name=name,
    )


def conv2d_nchw(n, c, h, w, k, r, s, *, stride=1, pad=0, dilation=1, groups=1):
    data = te.placeholder((n, c, h, w), name="data")
    weight = te.placeholder((k, c // groups, r, s), name="weight")
    padded = pad_nchw(data, pad, 0.0)
    oh, ow = out_size(h, r, stride, pad, dilation), out_size(w, s, stride, pad, dilation)
    cpg, kpg = c // groups, k // groups
    rc = te.reduce_axis((0, cpg), name="rc")
    ry = te.reduce_axis((0, r), name="ry")
    rx = te.reduce_axis((0, s), name="rx")
    out = te.compute(
        (n, k, oh, ow),
        lambda nn, kk, y, x: te.sum(
            padded[nn, kk // kpg * cpg + rc, y * stride + ry * dilation, x * stride + rx * dilation]
            * weight[kk, rc, ry, rx],
            axis=[rc, ry, rx],
        ),
        name="conv",
    )
    return data, weight, padded, out


def conv2d_ref(x, wt, stride=1, pad=0, dilation=1, groups=1):
    n, c, h, w = x.shape
    k, cpg, r, s = wt.shape
    kpg = k // groups
    oh, ow = out_size(h, r, stride, pad, dilation), out_size(w, s, stride, pad, dilation)
    xp = np.pad(x.astype("float64"), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, k, oh, ow))
    for g in range(groups):
        xs, ws = xp[:, g * cpg:(g + 1) * cpg], wt[g * kpg:(g + 1) * kpg].astype("float64")
        for dy in range(r):
            for dx in range(s):
                y0, x0 = dy * dilation, dx * dilation
                window = xs[:, :, y0:y0 + stride * (oh - 1) + 1:stride, x0:x0 + stride * (ow - 1) + 1:stride]
                out[:, g * kpg:(g + 1) * kpg] += np.einsum("nchw,kc->nkhw", window, ws[:, :, dy, dx])
    return out


CONV_CASES = {
    "stride1_pad1": dict(stride=1, pad=1),
    "stride2_pad0": dict(stride=2, pad=0),
    "stride2_pad1": dict(stride=2, pad=1),
    "dilation2": dict(dilation=2, pad=2),
    "dilation2_pad0": dict(dilation=2),
    "groups2": dict(groups=2, pad=1),
    "groups4_stride2": dict(groups=4, stride=2, pad=1),
}


@pytest.mark.parametrize("case", list(CONV_CASES))
@pytest.mark.parametrize("pad_at", ["inline", "root", "compute_at"])
def test_conv2d(case, pad_at):
    attrs = CONV_CASES[case]
    data, weight, padded, out = conv2d_nchw(1, 4, 8, 8, 8, 3, 3, **attrs)
    s = te.create_schedule(out.op)
    nn, kk, y, x = s[out].op.axis
    rc, ry, rx = s[out].op.reduce_axis
    s[out].reorder(nn, kk, y, rc, ry, rx, x)
    s[out].parallel(kk)
    if padded is not data:
        if pad_at == "inline":
            s[padded].compute_inline()
        elif pad_at == "compute_at":
            s[padded].compute_at(s[out], kk)
    ref = lambda a, b: conv2d_ref(a, b, **attrs)  # noqa: E731
    check_schedule(s, [data, weight, out], ref, targets=BOTH, rtol=1e-5, atol=1e-5)


def test_conv2d_padding_stage_vectorized():
    """The padding stage at the root, its row split (with a tail) and vectorized: the select's
    out-of-bounds load must not be performed where the condition is false."""
    data, weight, padded, out = conv2d_nchw(1, 4, 8, 8, 8, 3, 3, stride=1, pad=1)
    s = te.create_schedule(out.op)
    xo, xi = s[padded].split(s[padded].op.axis[3], factor=8)
    s[padded].vectorize(xi)
    check_schedule(s, [data, weight, out], lambda a, b: conv2d_ref(a, b, pad=1), targets=BOTH,
                   rtol=1e-5, atol=1e-5)


def test_conv2d_vectorized_larger():
    """A larger conv on C: the output row split and vectorized, the padding inlined."""
    attrs = dict(stride=1, pad=1)
    data, weight, padded, out = conv2d_nchw(2, 16, 30, 30, 32, 3, 3, **attrs)
    s = te.create_schedule(out.op)
    nn, kk, y, x = s[out].op.axis
    rc, ry, rx = s[out].op.reduce_axis
    xo, xi = s[out].split(x, factor=8)
    s[out].reorder(nn, kk, y, xo, rc, ry, rx, xi)
    s[out].vectorize(xi)
    s[out].parallel(s[out].fuse(nn, kk))
    s[padded].compute_inline()
    check_schedule(s, [data, weight, out], lambda a, b: conv2d_ref(a, b, **attrs), targets=("c",),
                   rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("multiplier", [1, 2])
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_conv2d(multiplier, stride):
    c = 6
    data, weight, padded, out = conv2d_nchw(1, c, 9, 9, c * multiplier, 3, 3, stride=stride, pad=1, groups=c)
    assert tuple(int(d.value) for d in weight.shape) == (c * multiplier, 1, 3, 3)
    s = te.create_schedule(out.op)
    nn, kk, y, x = s[out].op.axis
    s[out].parallel(kk)
    xo, xi = s[out].split(x, factor=4)
    rc, ry, rx = s[out].op.reduce_axis
    s[out].reorder(nn, kk, y, xo, rc, ry, rx, xi)
    s[out].vectorize(xi)
    s[padded].compute_inline()
    ref = lambda a, b: conv2d_ref(a, b, stride=stride, pad=1, groups=c)  # noqa: E731
    check_schedule(s, [data, weight, out], ref, targets=BOTH, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Pooling


def window_ref(x, k, stride, pad, fill, combine):
    """(windows, valid count) per output element: combine over the k x k windows of x padded with fill."""
    n, c, h, w = x.shape
    oh, ow = out_size(h, k, stride, pad, 1), out_size(w, k, stride, pad, 1)
    xp = np.pad(x.astype("float64"), ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    valid = np.pad(np.ones((h, w)), pad)
    acc, count = None, np.zeros((oh, ow))
    for dy in range(k):
        for dx in range(k):
            sl = (slice(dy, dy + stride * (oh - 1) + 1, stride),
                  slice(dx, dx + stride * (ow - 1) + 1, stride))
            win = xp[(slice(None), slice(None)) + sl]
            acc = win if acc is None else combine(acc, win)
            count += valid[sl]
    return acc, count


POOL_CASES = [(2, 2, 0), (3, 2, 1), (3, 1, 1)]  # (window, stride, pad)


@pytest.mark.parametrize("k, stride, pad", POOL_CASES)
def test_max_pool(k, stride, pad):
    n, c, h, w = 2, 3, 10, 9
    data = te.placeholder((n, c, h, w), name="data")
    padded = pad_nchw(data, pad, -np.inf)
    oh, ow = out_size(h, k, stride, pad, 1), out_size(w, k, stride, pad, 1)
    ry = te.reduce_axis((0, k), name="ry")
    rx = te.reduce_axis((0, k), name="rx")
    out = te.compute((n, c, oh, ow), lambda nn, cc, y, x: te.max(
        padded[nn, cc, y * stride + ry, x * stride + rx], axis=[ry, rx]), name="pool")
    s = te.create_schedule(out.op)
    s[out].parallel(s[out].fuse(*s[out].op.axis[:2]))
    if padded is not data:
        s[padded].compute_inline()
    check_schedule(s, [data, out], lambda a: window_ref(a, k, stride, pad, -np.inf, np.maximum)[0],
                   targets=BOTH)


def test_max_pool_padding_stage_at_row():
    """3x3/2 max pool, the -inf padding stage computed at the output row (a stencil region)."""
    n, c, h, w, k, stride, pad = 1, 4, 11, 12, 3, 2, 1
    data = te.placeholder((n, c, h, w), name="data")
    padded = pad_nchw(data, pad, -np.inf)
    oh, ow = out_size(h, k, stride, pad, 1), out_size(w, k, stride, pad, 1)
    ry = te.reduce_axis((0, k), name="ry")
    rx = te.reduce_axis((0, k), name="rx")
    out = te.compute((n, c, oh, ow), lambda nn, cc, y, x: te.max(
        padded[nn, cc, y * stride + ry, x * stride + rx], axis=[ry, rx]), name="pool")
    s = te.create_schedule(out.op)
    s[padded].compute_at(s[out], s[out].op.axis[2])
    check_schedule(s, [data, out], lambda a: window_ref(a, k, stride, pad, -np.inf, np.maximum)[0],
                   targets=BOTH)


@pytest.mark.parametrize("k, stride, pad", POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [False, True])
def test_avg_pool(k, stride, pad, count_include_pad):
    """Average pooling: a sum over the window's in-bounds elements (a reduction with where=),
    divided by the window size or by the number of in-bounds elements."""
    n, c, h, w = 2, 3, 10, 9
    data = te.placeholder((n, c, h, w), name="data")
    oh, ow = out_size(h, k, stride, pad, 1), out_size(w, k, stride, pad, 1)
    ry = te.reduce_axis((0, k), name="ry")
    rx = te.reduce_axis((0, k), name="rx")

    def in_bounds(y, x):
        yy, xx = y * stride + ry - pad, x * stride + rx - pad
        return te.all(yy >= 0, yy < h, xx >= 0, xx < w)

    total = te.compute((n, c, oh, ow), lambda nn, cc, y, x: te.sum(
        data[nn, cc, y * stride + ry - pad, x * stride + rx - pad], axis=[ry, rx], where=in_bounds(y, x)),
        name="total")

    def count(y, x):
        if count_include_pad:
            return te.const(k * k, "float32")
        y0, x0 = y * stride - pad, x * stride - pad
        rows = te.min(y0 + k, h) - te.max(y0, 0)
        cols = te.min(x0 + k, w) - te.max(x0, 0)
        return (rows * cols).astype("float32")

    out = te.compute((n, c, oh, ow), lambda nn, cc, y, x: total[nn, cc, y, x] / count(y, x), name="avg")
    s = te.create_schedule(out.op)
    nn, cc, y, x = s[out].op.axis
    s[out].parallel(s[out].fuse(nn, cc))
    s[total].compute_at(s[out], y)

    def ref(a):
        acc, cnt = window_ref(a, k, stride, pad, 0.0, np.add)
        return acc / (k * k if count_include_pad else cnt)

    check_schedule(s, [data, out], ref, targets=BOTH, rtol=1e-5, atol=1e-6)

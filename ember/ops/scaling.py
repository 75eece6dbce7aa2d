"""Row statistics in a scaled frame: sums of squares that neither overflow nor underflow.

A float32 row of values near 1e20 has squares near 1e40, past float32's largest value (3.4e38):
its sum of squares is inf, 1 / sqrt(inf) is 0, and a layer norm of it comes out 0 where the
float64 answer is of order 1. At 1e-20 the squares (1e-40) are subnormal and lose their digits.
The cure is LAPACK's (nrm2) and hypot's: divide by the row's largest magnitude before squaring.

`row_scale` gives each row the power of two 2^-e with 2^e <= sum |x| < 2^(e+1) (e clamped to the
normal exponents of the dtype, so that the scale and its reciprocal are finite; 2^e is the sum's
bits with the mantissa masked off, exact whatever the C compiler contracts: a float split such as
Veltkamp's, t - (t - z) with t = z * c, becomes a fused multiply-add under GCC's default
-ffp-contract=fast, and a scale that is not a power of two makes the deviations of a row of equal
values nonzero, a layer norm of it +-1 where PyTorch gives 0): scaled values
lie in (-2, 2), the largest of them above 1 / (2n), so that their squares and sums of squares
stay far from both ends of the range (a sum |x| that overflows clamps e at its highest, where
the scaled values are below 4 all the same), and
since a power of two scales exactly, the arithmetic on scaled values rounds exactly as the same
arithmetic on the unscaled ones would where those do not overflow. The costs: one more pass over
the row (a sum of magnitudes rather than their maximum: a vector max that propagates NaN is a
compare-and-blend on the accumulator's chain, three times the latency of an add), and a multiply
per element that folds into the subtraction after it.

`scaled_rstd` is 1 / sqrt(variance + eps) in that frame, without forming eps * scale^2 where it
would overflow, and finite for a row of equal values when eps > 0 (its deviations are then exactly
0, so the value does not matter, but inf would make 0 * inf = NaN where PyTorch gives 0).

A NaN in a row makes the scale, and so the row's result, NaN; an infinity makes it NaN as well
(inf - inf), as in PyTorch. Statistics are computed in `acc`'s dtype (float32 for float16).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .. import te
from ..tir.expr import binary, const, reinterpret
from .reduction import acc, acc_dtype, input_index, reduce_over

# The exponents e that the scale 2^-e may take: its reciprocal, and the square of the largest
# eps * scale^2 `scaled_rstd` forms, stay finite.
EXPONENTS = {"float32": 126, "float64": 1022}


def row_scale(x, axes: Sequence[int], keepdims: bool = False):
    """The stage scale[row] = 2^-e, 2^e <= sum |x| over the row < 2^(e+1) (see the module's docstring);
    indexed like `reduce_over(x, axes, keepdims, ...)`."""
    def magnitude(i, idx):
        v = acc(x[idx])
        return te.max(v, -v)  # |v| in two vector instructions, where a vector fabs is a loop over lanes

    size = reduce_over(x, axes, keepdims, te.sum, "size", magnitude)
    dtype = acc_dtype(x.dtype)
    limit = EXPONENTS[dtype]
    bits = f"int{np.finfo(dtype).bits}"
    exponent = const(int(np.array(np.inf, dtype).view(bits)), bits)  # the exponent field's mask

    def scale(*i):
        y = size[i]
        p = reinterpret(dtype, binary("&", reinterpret(bits, y), exponent))  # 2^floor(log2 y), y normal
        # 0 and subnormal sums: the lowest scale; inf (and values past 2^limit): the highest
        p = te.if_then_else(y >= 2.0 ** limit, 2.0 ** limit, te.max(p, 2.0 ** -limit))
        return 1.0 / p

    return te.compute(size.shape, scale, name="scale")


def scaled(x, scale, i, index):
    """Element `index` of x in the frame of its row (the stage index i)."""
    return acc(x[index]) * scale[i]


def shifted(x, first, scale, i, index):
    """Element `index` of x less the first element of its row (`first`, the stage of
    `scaled_center`), in the frame of its row. Both are exact multiples of the scale, so the
    difference of two close values is exact."""
    return scaled(x, scale, i, index) - acc(first[i]) * scale[i]


def scaled_center(x, axes: Sequence[int], scale, n, keepdims: bool = False):
    """The stages (first[row], center[row]): the row's first element, and the row's mean less it
    in the scaled frame. Kept apart from the first element, the deviations `shifted(...) - center`
    keep their digits when the mean is large against the spread (a mean of 1e20 has float32 steps
    of 1e13); and a row of equal values has deviations of exactly 0, as in PyTorch. The first
    element is a stage of its own, read once per row (a GPU row kept in registers, each thread
    its own columns, holds it in one thread only)."""
    first = te.compute(scale.shape, lambda *i: x[input_index(i, x.ndim, {a: 0 for a in axes}, keepdims)],
                       name="first")
    total = reduce_over(x, axes, keepdims, te.sum, "total", lambda i, idx: shifted(x, first, scale, i, idx))
    return first, te.compute(total.shape, lambda *i: total[i] / n, name="center")


def deviation(x, scale, center, i, index):
    """Element `index`'s deviation from its row's mean in the scaled frame (from 0 when center is
    None; else `scaled_center`'s stages)."""
    if center is None:
        return scaled(x, scale, i, index)
    first, mean = center
    return shifted(x, first, scale, i, index) - mean[i]


def scaled_squares(x, axes: Sequence[int], scale, center=None, keepdims: bool = False):
    """The stage sq[row]: the sum of squared `deviation`s in the scaled frame."""
    def deviation2(i, idx):
        d = deviation(x, scale, center, i, idx)
        return d * d

    return reduce_over(x, axes, keepdims, te.sum, "sq", deviation2)


def scaled_rstd(sq, n, scale, eps: float):
    """1 / sqrt(variance / scale^2 + eps) * (1 / scale) for the variance sq / n in the scaled frame:
    what the scaled deviations are multiplied by. The eps term is (sqrt(eps) * scale)^2; where that square
    would overflow, the variance (below 16) is negligible against it and the result is 1 / (sqrt(eps) *
    scale). With eps > 0 the result is clamped to the largest finite value (see the module's docstring)."""
    dtype = sq.dtype
    big = 2.0 ** (EXPONENTS[dtype] // 2 - 4)
    root_eps = math.sqrt(eps)

    def rstd(*i):
        b = scale[i] * root_eps
        r = te.if_then_else(b > big, 1.0 / b, te.rsqrt(sq[i] / n + b * b))
        return te.min(r, float(np.finfo(dtype).max)) if eps > 0 else r

    return te.compute(sq.shape, rstd, name="rstd")

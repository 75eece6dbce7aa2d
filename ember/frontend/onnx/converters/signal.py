"""ONNX DFT as one matmul with a constant matrix of cosines and sines.

The signal axis is moved next to the trailing (real, imaginary) axis, cropped or padded with
zeros to the length the transform reads, and flattened with it, real parts then imaginary
parts; one matmul with W gives the real parts then the imaginary parts of the output bins.
The rows of W for a real part x_r and an imaginary part x_i, with theta = 2 pi k t / L, are
forward: x_r (cos, -sin), x_i (sin, cos); inverse: x_r (cos, sin) / L, x_i (-sin, cos) / L;
inverse one-sided (irfft): x_r w cos / L, x_i -w sin / L, real output only, w = 2 for the bins
whose mirror image is left out and 1 for bin 0 and the Nyquist bin. Work is L x bins per
signal: what a small-window STFT wants; long signals want an FFT.
"""

from __future__ import annotations

import numpy as np

from ..node import NodeContext
from ..registry import converts


def _matrix(length: int, rows: int, bins: int, inverse: bool, onesided: bool, complex_in: bool) -> np.ndarray:
    """W: (2 or 1) * rows by (2 or 1) * bins, real parts first."""
    k = np.arange(rows)[:, None]
    t = np.arange(bins)[None, :]
    theta = 2 * np.pi * k * t / length
    cos, sin = np.cos(theta), np.sin(theta)
    if not inverse:
        real, imag = np.hstack([cos, -sin]), np.hstack([sin, cos])
    elif not onesided:
        real, imag = np.hstack([cos, sin]) / length, np.hstack([-sin, cos]) / length
    else:
        weight = np.where((k == 0) | (2 * k == length), 1.0, 2.0)
        real, imag = weight * cos / length, -weight * sin / length
    return np.vstack([real, imag]) if complex_in else real


@converts("DFT")
def _dft(cx: NodeContext):
    x = cx.input(0)
    shape = cx.static_shape(x, "DFT")
    rank = len(shape)
    if cx.opset >= 20:
        given = cx.const_ints(2, "axis")
        axis = given[0] if given else -2
    else:
        axis = cx.attr("axis", 1)
    axis %= rank
    if axis == rank - 1:
        raise cx.error("the signal axis cannot be the last, (real, imaginary) axis")
    inverse, onesided = bool(cx.attr("inverse", 0)), bool(cx.attr("onesided", 0))
    parts = shape[-1]
    given = cx.const_ints(1, "dft_length")
    irfft = inverse and onesided
    length = given[0] if given else (2 * (shape[axis] - 1) if irfft else shape[axis])
    rows = length // 2 + 1 if irfft else length  # what the transform reads along the axis
    bins = length // 2 + 1 if onesided and not inverse else length
    perm = [d for d in range(rank - 1) if d != axis] + [axis, rank - 1]
    y = x if perm == list(range(rank)) else cx.op("transpose", [x], {"perm": tuple(perm)})
    if rows != shape[axis]:
        pads = [0] * (2 * rank)
        pads[rank + rank - 2] = rows - shape[axis]
        y = cx.op("pad", [y], {"pads": tuple(pads)})
    batch = tuple(shape[d] for d in perm[:-2])
    y = cx.op("reshape", [cx.op("transpose", [y], {"perm": (*range(rank - 2), rank - 1, rank - 2)})],
              {"shape": (*batch, parts * rows)})
    w = _matrix(length, rows, bins, inverse, onesided, parts == 2).astype(cx.type(x).dtype)
    y = cx.op("matmul", [y, w])
    out_parts = 1 if irfft else 2
    y = cx.op("transpose", [cx.op("reshape", [y], {"shape": (*batch, out_parts, bins)})],
              {"perm": (*range(rank - 2), rank - 1, rank - 2)})
    back = tuple(int(p) for p in np.argsort(perm))
    return [y if back == tuple(range(rank)) else cx.op("transpose", [y], {"perm": back})]

"""ONNX DFT (and STFT, frames of a signal transformed) as one matmul with a constant matrix of
cosines and sines.

The signal axis is moved next to the trailing (real, imaginary) axis, cropped or padded with
zeros to the length the transform reads, and flattened with it, real parts then imaginary
parts; one matmul with W gives the real parts then the imaginary parts of the output bins.
The rows of W for a real part x_r and an imaginary part x_i, with theta = 2 pi k t / L, are
forward: x_r (cos, -sin), x_i (sin, cos); inverse: x_r (cos, sin) / L, x_i (-sin, cos) / L;
inverse one-sided (irfft): x_r w cos / L, x_i -w sin / L, real output only, w = 2 for the bins
whose mirror image is left out and 1 for bin 0 and the Nyquist bin. Work is L x bins per
signal: what a small-window STFT wants; long signals want an FFT.

The window functions (Hann, Hamming, Blackman) and MelWeightMatrix take constant sizes and are
constants themselves, computed at import.
"""

from __future__ import annotations

import numpy as np
import onnx

from ..node import NodeContext, Tensor, to_dtype
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
    given = cx.const_ints(1, "dft_length")
    length = given[0] if given else (2 * (shape[axis] - 1) if inverse and onesided else shape[axis])
    return [_transform(cx, x, axis, length, inverse, onesided)]


def _transform(cx: NodeContext, x: Tensor, axis: int, length: int, inverse: bool, onesided: bool) -> Tensor:
    """The DFT of x (..., 1 or 2) along `axis` of `length` points (see the module's docstring)."""
    shape = cx.static_shape(x, "DFT")
    rank = len(shape)
    parts = shape[-1]
    irfft = inverse and onesided
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
    return y if back == tuple(range(rank)) else cx.op("transpose", [y], {"perm": back})


@converts("STFT")
def _stft(cx: NodeContext):
    """Frames of the signal (batch, length, 1 or 2) every frame_step (a constant gather),
    weighted by the window, each transformed by _transform: (batch, frames, bins, 2)."""
    x, window = cx.input(0), cx.optional(2)
    (step,) = cx.const_ints(1, "frame_step")
    given = cx.const_ints(3, "frame_length")
    shape = cx.static_shape(x, "STFT")
    size = given[0] if given else cx.static_shape(window, "STFT's window")[0]
    frames = (shape[1] - size) // step + 1
    starts = np.arange(frames, dtype="int64")[:, None] * step + np.arange(size, dtype="int64")
    y = cx.op("gather", [x, starts], {"axis": 1})  # (batch, frames, size, parts)
    if window is not None:
        y = cx.op("mul", [y, cx.op("reshape", [window], {"shape": (size, 1)})])
    return [_transform(cx, y, 2, size, False, bool(cx.attr("onesided", 1)))]


# -- constant signal tables: windows and mel filter banks ---------------------------------------

COSINE_WINDOWS = {  # w[n] = sum_k (-1)^k a_k cos(2 pi k n / N)
    "HannWindow": (0.5, 0.5),
    "HammingWindow": (25 / 46, 21 / 46),
    "BlackmanWindow": (0.42, 0.5, 0.08),
}


@converts(*COSINE_WINDOWS)
def _window(cx: NodeContext):
    """A cosine-sum window of `size` points (a constant): N = size when periodic, size - 1 when
    symmetric."""
    (size,) = cx.const_ints(0, "size")
    period = size if cx.attr("periodic", 1) else size - 1
    phase = 2 * np.pi * np.arange(size) / period
    w = sum((-1) ** k * a * np.cos(k * phase) for k, a in enumerate(COSINE_WINDOWS[cx.node.op_type]))
    return [np.asarray(w).astype(to_dtype(cx.attr("output_datatype", onnx.TensorProto.FLOAT), cx.where))]


def _hertz_to_mel(f):
    return 2595 * np.log10(1 + f / 700)


def _mel_to_hertz(m):
    return 700 * (10 ** (m / 2595) - 1)


@converts("MelWeightMatrix")
def _mel_weight_matrix(cx: NodeContext):
    """(dft_length // 2 + 1, num_mel_bins) triangles (a constant): mel bin i rises from spectrum
    bin edge[i] to edge[i + 1] and falls to edge[i + 2], the edges evenly spaced in mel between
    the given frequencies (num_mel_bins + 2 steps) and rounded down to spectrum bins."""
    bins, length = (cx.const_ints(k, what)[0] for k, what in ((0, "num_mel_bins"), (1, "dft_length")))
    rate = cx.const_ints(2, "sample_rate")[0]
    low, high = (float(cx.const(k, what).reshape(-1)[0]) for k, what in ((3, "lower_edge_hertz"),
                                                                         (4, "upper_edge_hertz")))
    step = (_hertz_to_mel(high) - _hertz_to_mel(low)) / (bins + 2)
    edges = ((length + 1) * _mel_to_hertz(_hertz_to_mel(low) + step * np.arange(bins + 2)) // rate).astype(int)
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        left, centre, right = edges[i:i + 3]
        if centre == left:
            out[centre, i] = 1
        else:
            out[left:centre + 1, i] = (np.arange(left, centre + 1) - left) / (centre - left)
        if right > centre:
            out[centre:right, i] = (right - np.arange(centre, right)) / (right - centre)
    return [out.astype(to_dtype(cx.attr("output_datatype", onnx.TensorProto.FLOAT), cx.where))]

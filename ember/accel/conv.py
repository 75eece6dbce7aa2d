"""A quantized int8 convolution on an int8 accelerator, as VTA runs one: the host lays the input
out as its im2col matrix (one row per output pixel, one column per (r, s, c) of the window), the
device multiplies it by the weights (K rows of R*S*C: the (K, R, S, C) weight reshaped) in int32
and requantizes each accumulator tile with its ALU: add the bias, shift right, clip to int8's
range (to [0, 127] with relu). The output is int8 NHWC rows (the DMA narrows the accumulator's
int32 on the store, as VTA's does; out_dtype="int32" keeps them). The GEMM's rows (output pixels) and window columns
are padded to the core's multiples with zeros: the output has `padded_rows` rows, of which the
first n*oh*ow are the convolution's; the weights are padded by `weight_matrix`.

    conv = Conv2d(1, 64, 56, 56, 64, 3, 3, 1, 1)
    s, args = conv2d(vta, conv, shift=8)
    f = ember.build(s, args, target=vta)
    f(x_nhwc, weight_matrix(vta, conv, w), bias, y)   # y[:3136] == reference(x_nhwc, w, bias, conv, 8)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import te as t
from ..errors import ScheduleError
from .schedules import Tiles, gemm_tensors, intrinsic_shape, schedule
from .spec import Accelerator


@dataclass(frozen=True)
class Conv2d:
    """A convolution: batch n, input channels c, height h, width w, output channels k, an r x s
    window, stride and zero padding."""

    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride: int = 1
    pad: int = 0

    @property
    def out_hw(self) -> tuple[int, int]:
        span_h, span_w = self.h + 2 * self.pad - self.r, self.w + 2 * self.pad - self.s
        return span_h // self.stride + 1, span_w // self.stride + 1

    @property
    def gemm(self) -> tuple[int, int, int]:
        """(m, n, k) of its GEMM: output pixels, output channels, window elements."""
        oh, ow = self.out_hw
        return self.n * oh * ow, self.k, self.r * self.s * self.c

    @property
    def macs(self) -> int:
        m, n, k = self.gemm
        return m * n * k


def padded_gemm(accel: Accelerator, conv: Conv2d) -> tuple[int, int, int]:
    """The GEMM the device runs: rows and window columns padded to the core intrinsic's
    multiples (the output channels must be one already)."""
    m, n, k = conv.gemm
    im, in_, ik = intrinsic_shape(accel)
    if n % in_:
        raise ScheduleError(f"{conv.k} output channels are not a multiple of {accel.name}'s {in_}")
    return -(-m // im) * im, n, -(-k // ik) * ik


def weight_matrix(accel: Accelerator, conv: Conv2d, w: np.ndarray) -> np.ndarray:
    """The (k, r, s, c) weights as the device's (k, padded r*s*c) int8 matrix."""
    _, _, kp = padded_gemm(accel, conv)
    flat = w.reshape(conv.k, -1)
    return np.pad(flat, ((0, 0), (0, kp - flat.shape[1])))


def conv2d(accel: Accelerator, conv: Conv2d, shift: int, *, relu: bool = False, tiles: Tiles | None = None,
           buffering: str = "single", out_dtype: str = "int8"):
    """(schedule, [X, W, bias, Y]) of the quantized convolution (see the module doc): X (n, h, w,
    c) int8, W (k, padded r*s*c) int8 (weight_matrix), bias (k,) int32, Y (padded n*oh*ow, k) of
    out_dtype."""
    core = accel.core
    if (core.inp_dtype, core.acc_dtype) != ("int8", "int32") or core.inp_layout != "ik":
        raise ScheduleError(f"{accel.name} is not an int8 core with int32 accumulators and row-major inputs")
    m, n, k = padded_gemm(accel, conv)
    rows, window_size = conv.gemm[0], conv.gemm[2]
    oh, ow = conv.out_hw
    X = t.placeholder((conv.n, conv.h, conv.w, conv.c), "int8", name="X")

    def window(p, q):
        b, pix = p // (oh * ow), p % (oh * ow)
        r, rest = t.min(q // (conv.s * conv.c), conv.r - 1), q % (conv.s * conv.c)
        y = pix // ow * conv.stride + r - conv.pad
        x = pix % ow * conv.stride + rest // conv.c - conv.pad
        inside = t.all(p < rows, q < window_size, y >= 0, y < conv.h, x >= 0, x < conv.w)
        clamp_y, clamp_x = t.max(t.min(y, conv.h - 1), 0), t.max(t.min(x, conv.w - 1), 0)
        clamp_b = t.min(b, conv.n - 1)
        return t.if_then_else(inside, X[clamp_b, clamp_y, clamp_x, rest % conv.c], t.const(0, "int8"))

    cols = t.compute((m, k), window, name="im2col")
    A, W, C = gemm_tensors(accel, m, n, k, a=cols)
    bias = t.placeholder((n,), "int32", name="bias")
    lo = 0 if relu else -128
    Y = t.compute((m, n), lambda i, j: t.min(t.max((C[i, j] + bias[j]) // (1 << shift), lo), 127).astype(out_dtype),
                  name="Y")
    s = schedule(accel, A, W, C, Y, [bias], tiles=tiles, buffering=buffering)
    return s, [X, W, bias, Y]


def reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray, conv: Conv2d, shift: int, relu: bool = False):
    """The same convolution in integer NumPy: x (n, h, w, c), w (k, r, s, c) int8 -> (n*oh*ow, k) int8."""
    oh, ow = conv.out_hw
    xp = np.pad(x.astype(np.int64), ((0, 0), (conv.pad,) * 2, (conv.pad,) * 2, (0, 0)))
    rows = np.empty((conv.n, oh, ow, conv.r, conv.s, conv.c), np.int64)
    for r in range(conv.r):
        for s in range(conv.s):
            rows[:, :, :, r, s] = xp[:, r:r + conv.stride * oh:conv.stride, s:s + conv.stride * ow:conv.stride]
    acc = rows.reshape(-1, conv.r * conv.s * conv.c) @ w.reshape(conv.k, -1).astype(np.int64).T + bias
    return np.clip(acc >> shift, 0 if relu else -128, 127).astype(np.int8)

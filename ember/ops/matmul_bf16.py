"""`gemm_bf16(a, w, c?; beta)`: a @ W + beta * c with W held in bf16, packed in the bf16 units'
layout, and a rounded to bf16 on the way in: the products of bf16, exact in fp32, summed in fp32.
What `ember.compile(..., precision="bf16")` makes of linear layers (ember.passes.bf16_weights;
its convolutions: ember.ops.conv_bf16).

    a  (M, K) float32 or bfloat16
    w  (N / 16, K / 2, 16, 2) bfloat16: W (K, N) in pairs along k, column after column
       ([N / 16][K / 2][16][2], ember.intrinsics.tiles.pack: AVX512-BF16's and AMX's B operand)
    c  broadcast to (M, N), added in fp32 (times beta)
    -> (M, N) of a's dtype

The te stages: the activations in bf16 (a's rows in pairs), a stage of its own tagged CAST (the
units read it from memory), the tile product (tagged ANCHOR: ember.intrinsics.tiles.product,
(M, N / 16, 16) fp32, what a unit's intrinsic describes) and the result (the columns back in a
row with c). ember.schedules.cpu.matmul_bf16 maps the product onto the best unit the target has.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..intrinsics.tiles import LANES, product
from ..tir import dtype as dt
from ..tir.expr import as_int, cast
from .common import broadcast_index
from .registry import OpDef, OpTypeError, register

ANCHOR = "gemm_bf16"
CAST = "gemm_bf16_cast"
GROUP = 2  # bf16 values of k per lane of the units


def _infer(types, attrs):
    a, w = types[:2]
    if a.rank != 2 or not dt.is_float(a.dtype) or w.rank != 4 or w.dtype != "bfloat16" or w.shape[2:] != (LANES, GROUP):
        raise OpTypeError(f"gemm_bf16: a must be 2-D floating point and w (N / {LANES}, K / {GROUP}, {LANES}, {GROUP}) "
                          f"bfloat16, got {a.dtype}{list(a.shape)} and {w.dtype}{list(w.shape)}")
    m, k = a.shape
    if k != w.shape[1] * GROUP:
        raise OpTypeError(f"gemm_bf16: a has {k} columns, w {w.shape[1]} pairs of rows")
    n = w.shape[0] * LANES
    if len(types) == 3:
        c = types[2]
        if c.rank > 2 or any(d not in (1, want) for d, want in zip(c.shape[::-1], (n, m))):
            raise OpTypeError(f"gemm_bf16: c of shape {c.shape} does not broadcast to the result {(m, n)}")
    return [TensorType((m, n), a.dtype)]


def unpack(w: np.ndarray) -> np.ndarray:
    """The (K, N) matrix of weights packed (N / 16, K / 2, 16, 2)."""
    blocks, pairs = w.shape[:2]
    return w.transpose(1, 3, 0, 2).reshape(pairs * GROUP, blocks * LANES)


def _reference(inputs, attrs):
    a, w = inputs[:2]
    a16 = a.astype(dt.to_numpy("bfloat16")).astype(np.float64)
    out = a16 @ unpack(w).astype(np.float64)
    if len(inputs) == 3:
        out = out + attrs["beta"] * inputs[2].astype(np.float64)
    return [out.astype(np.float32).astype(a.dtype)]


def _compute(inputs, attrs, out_types):
    a, w = inputs[:2]
    c = inputs[2] if len(inputs) == 3 else None
    m, k = a.shape[0], as_int(a.shape[1])
    pairs = te.compute((m, k // GROUP, GROUP), lambda i, p, g: a[i, p * GROUP + g].astype("bfloat16"),
                       name="a_bf16", tag=CAST)
    acc = product(pairs, w, "float32", name="gemm_bf16", tag=ANCHOR)
    beta = attrs["beta"]

    def element(i, j):
        v = acc[i, j // LANES, j % LANES]
        if c is not None:
            cv = cast("float32", c[broadcast_index((i, j), c.shape)])
            v = v + (cv if beta == 1 else cv * beta)
        return cast(a.dtype, v)

    return [te.compute(out_types[0].shape, element, name="gemm_bf16_out")]


register(OpDef(
    name="gemm_bf16",
    infer=_infer,
    reference=_reference,
    compute=_compute,
    pattern="out_elementwise_fusable",
    attrs={"beta": 1.0},
    num_inputs=(2, 3),
    doc="a @ W + beta * c with W in bf16 (packed (N / 16, K / 2, 16, 2)) and a rounded to bf16, summed in fp32.",
))

"""com.microsoft MatMulNBits (ONNX Runtime's 4-bit weight-only matmul, what its GenAI builder and
Olive export): Y = A dequantize(B)^T + bias onto ember's gemm_nbits (int4 per group), its
constant codes repacked once into gemm_nbits' panels (ember.tir.nbits).

ONNX Runtime's layout: B (N, K / block_size, block_size / 2) uint8, element k of a column's
block at byte k / 2, the low nibble first; scales (N, K / block_size) (or flat); zero_points
absent (8), packed uint8 nibbles (N, ceil(blocks / 2)), or floats of the scales' type;
w[k, n] = (q - zero) * scale. Only bits=4, block sizes gemm_nbits has (32, 64, 128), constant
B, scales and zero points, and no g_idx (act-order) are taken; anything else is an
UnsupportedOpError naming the node and what ember takes. accuracy_level 4 (int8 activations
allowed, as ONNX Runtime's own kernels then quantize them) lets a prefill's rows be quantized to
int8 (gemm_nbits' act "auto": ember.passes.quantize_rows); any other level keeps float32 rows.
"""

from __future__ import annotations

import numpy as np

from .... import dims
from ....tir.nbits import GROUPS, pack_int4, pad_columns
from ..node import NodeContext
from ..registry import converts


@converts("MatMulNBits", domain="com.microsoft")
def _matmul_nbits(cx: NodeContext):
    k, n, bits, block = (int(cx.attr(a, d)) for a, d in (("K", 0), ("N", 0), ("bits", 4), ("block_size", 0)))
    if k <= 0 or n <= 0:
        raise cx.error(f"K={k}, N={n}: MatMulNBits needs both attributes, positive")
    if bits != 4 or block not in GROUPS or k % block:
        raise cx.unsupported(f"bits={bits}, block_size={block}, K={k}: ember takes bits=4 with block_size in "
                             f"{GROUPS} dividing K")
    if cx.optional(4) is not None:
        raise cx.unsupported("g_idx: ember takes blocks in order (no act-order)")
    blocks = k // block
    codes = _sized(cx, 1, "B", n * k // 2).reshape(n, k // 2)
    if codes.dtype != np.uint8:  # (int8's >> 4 keeps the sign: its high nibbles came out -8..-1)
        raise cx.error(f"B is {codes.dtype}: MatMulNBits takes uint8 bytes of two 4-bit codes each")
    q = np.stack([codes & 15, codes >> 4], axis=-1).reshape(n, k).T  # (K, N) codes 0..15
    scales = _sized(cx, 2, "scales", n * blocks).astype(np.float32).reshape(n, blocks).T
    zeros = cx.const(3, "zero_points")
    inputs = [pack_int4(q), pad_columns(scales)]
    if zeros is not None:
        if zeros.dtype == np.uint8:
            z = _sized(cx, 3, "zero_points", n * -(-blocks // 2)).reshape(n, -1)
            z = np.stack([z & 15, z >> 4], axis=-1).reshape(n, -1)[:, :blocks].T.astype(np.float32)
        elif zeros.dtype == scales.dtype or zeros.dtype.kind == "f":
            z = _sized(cx, 3, "zero_points", n * blocks).astype(np.float32).reshape(n, blocks).T
        else:
            raise cx.error(f"zero_points of dtype {zeros.dtype}: MatMulNBits takes packed uint8 or the scales' "
                           "float type")
        inputs.append(pad_columns((-scales * z).astype(np.float32)))
    bias = cx.const(5, "bias")
    if bias is not None:
        inputs.append(pad_columns(_sized(cx, 5, "bias", n).astype(np.float32).reshape(n)))
    a = cx.input(0)
    shape = cx.type(a).shape
    if cx.type(a).dtype != "float32" or shape[-1] != k:
        raise cx.unsupported(f"A {cx.type(a).dtype} {shape}: ember takes float32 A with K = {k} columns")
    rows = cx.op("reshape", [a], {"shape": (dims.mul(*shape[:-1]), k)}) if len(shape) != 2 else a
    act = "auto" if int(cx.attr("accuracy_level", 0)) == 4 else "float32"
    y = cx.op("gemm_nbits", [rows, *inputs], {"bits": 4, "group": block, "n": n, "offsets": zeros is not None,
                                              "act": act})
    return [cx.op("reshape", [y], {"shape": (*shape[:-1], n)}) if len(shape) != 2 else y]



def _sized(cx: NodeContext, k: int, what: str, size: int) -> np.ndarray:
    """Constant input k, refused unless it holds the `size` elements that K, N and block_size
    give it (a file whose attributes and data disagree: ONNX Runtime refuses it too)."""
    data = cx.const(k, what)
    if data.size != size:
        raise cx.error(f"input {k} ({what}) {data.dtype} {tuple(data.shape)} has {data.size} elements; K, N and "
                       f"block_size give it {size}")
    return data

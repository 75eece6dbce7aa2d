"""The packed layout of a weight-only quantized matrix, as the gemm_nbits routine reads it
(ember.tir.routines): packing from integer codes, and the NumPy dequantization that the
operator's reference and the interpreter's twin of the routine both use.

A (K, N) weight is stored in panels of PANEL = 32 columns, N rounded up to N' = whole panels
(zero columns past N), each panel's rows contiguous, so that a GEMV streams one panel row after
row and a thread reads whole panels:

    int8   codes  (N' / 32, K, 32) int8, column c of a panel at byte c of its row;
           scales (N',) float32: w[k, n] = scales[n] * q[k, n]  (per output channel), or
           (K / G, N') per group of G rows: w = scales[g, n] * q (llama.cpp's Q8_0, G = 32)
    int4   codes  (N' / 32, K, 16) uint8, codes 0..15: byte j of a panel's row holds column j in
           its low nibble and column j + 16 in its high nibble;
           scales (K / G, N') float32 per group of G rows; without offsets (symmetric, llama.cpp's
           Q4_0) w = scales[g, n] * (q - 8); with offsets (GPTQ/AWQ's zero points z, stored as
           offsets = -scales * z) w = scales[g, n] * q + offsets[g, n]

A prefill's int8 products (gemm_nbits' act "int8", packed: ember.passes.quantize_rows) read the
codes packed once more, at compile time, as vpdpbusd reads them, and each group's column sums:

    int8   codes  (N' / 32, K + 4 K / G, 32) int8 (G = K for group 0): a panel's (K, 32) codes in
           vpdpbusd's order, byte (k / 4) * 128 + c * 4 + k % 4 = q[k, c] (four consecutive k of a
           column in one 32-bit lane), then per group of G rows the int32 128 x sum_k q[k, c] of
           each column (xq's offset, taken off the products' sums: ember.codegen.c_gemm_nbits_vnni)
    int4   codes  (N' / 32, K + 8 K / G, 16) uint8: byte (k / 4) * 64 + j holds q[k, j / 4] in its
           low nibble and q[k, 16 + j / 4] in its high one, k = 4 (k / 4) + j % 4 (the nibbles are
           then the int8 layout's two halves of 64 bytes, a mask and a shift apart), then per group
           the int32 128 x sum_k q'[k, c] of each column, q' = q - 8 (symmetric) or q (offsets)

The dequantization is float32 arithmetic in this order, which the kernels fold into their sums
(ember.codegen.c_gemm_nbits) and which GGUF's Q8_0 and Q4_0 blocks define.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from .gelu import gelu

PANEL = 32  # columns of a panel: two AVX-512 vectors of float32
BITS = (4, 8)
GROUPS = (32, 64, 128)  # the group sizes of int4 scales
QUANTIZE_BLOCK = 32  # quantize_rows' meta sums x over blocks of this many columns
# the activations a product's epilogue applies (ember.passes.nbits_epilogues), as the gelu op's `approximate`
ACTIVATIONS = {"gelu": "none", "gelu_tanh": "tanh"}


def activate(y: np.ndarray, activation: str | None) -> np.ndarray:
    """y through an epilogue's activation (ACTIVATIONS; None: y), of y rounded to float32 first,
    as the kernels apply it to the products they computed."""
    if activation is None:
        return y
    return gelu(y.astype(np.float32).astype(np.float64), ACTIVATIONS[activation])


def row_group(group: int, k: int) -> int:
    """The columns per scale of a decode step's row quantized to int8 for gemm_nbits' act
    "int8_groups" (quantize_groups): the weights' group, each group's integer sum scaled once;
    for int8 weights per output channel (group 0) 32, as llama.cpp's Q8_0 blocks (against 128:
    LLaMA's int8 step's logits 0.062 from float32 weights' where 128 gave 0.071 and float32 rows
    0.048, for 12% more of the GEMV's instructions); 0 where 32 does not divide K (float32 rows)."""
    return group or (GROUPS[0] if k % GROUPS[0] == 0 else 0)


def panels(n: int) -> int:
    return -(-n // PANEL)


def pad_columns(a: np.ndarray) -> np.ndarray:
    """Per-column data (scales, offsets, a bias) with zero columns up to whole panels."""
    pad = panels(a.shape[-1]) * PANEL - a.shape[-1]
    return np.ascontiguousarray(np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, pad)]))


def pack_int8(q: np.ndarray) -> np.ndarray:
    """(K, N) int8 codes as (N' / 32, K, 32) panels."""
    k, n = q.shape
    padded = np.zeros((k, panels(n) * PANEL), np.int8)
    padded[:, :n] = q
    return np.ascontiguousarray(padded.reshape(k, -1, PANEL).transpose(1, 0, 2))


def pack_int4(q: np.ndarray) -> np.ndarray:
    """(K, N) codes 0..15 as (N' / 32, K, 16) uint8 panels, two columns a byte."""
    k, n = q.shape
    padded = np.zeros((k, panels(n) * PANEL), np.uint8)
    padded[:, :n] = q
    p = padded.reshape(k, -1, PANEL).transpose(1, 0, 2)
    return np.ascontiguousarray(p[..., :PANEL // 2] | (p[..., PANEL // 2:] << 4))


def pack_vnni(codes: np.ndarray, bits: int, group: int, offsets: bool = False) -> np.ndarray:
    """Panels (int8: (N' / 32, K, 32); int4: (N' / 32, K, 16)) as the int8 products read them (the
    module doc's packed layout; int4's sums of q - 8 unless `offsets`)."""
    p, k, width = codes.shape
    q = (unpack_panels(codes, 4).astype(np.int16) - (0 if offsets else 8)) if bits == 4 else codes
    rows = group or k
    sums = 128 * q.reshape(p, k // rows, rows, PANEL).sum(axis=2, dtype=np.int32)
    if bits == 8:
        order = codes.reshape(p, k // 4, 4, width).transpose(0, 1, 3, 2).reshape(p, k, width)
    else:  # int8's order of 4 rows of 32 columns as two halves of 64 bytes: the low nibbles, the high ones
        quads = unpack_panels(codes, 4).reshape(p, k // 4, 4, PANEL).transpose(0, 1, 3, 2).reshape(p, k // 4, 2, 64)
        order = (quads[:, :, 0] | (quads[:, :, 1] << 4)).astype(np.uint8).reshape(p, k, width)
    return np.ascontiguousarray(np.concatenate([order, sums.view(codes.dtype).reshape(p, -1, width)], axis=1))


def unpack_vnni(packed: np.ndarray, bits: int, k: int) -> np.ndarray:
    """The panels (ember.tir.nbits' layout) of packed ones (pack_vnni's codes, without the sums)."""
    p, _, width = packed.shape
    quads = packed[:, :k].reshape(p, k // 4, 1, 4 * width)
    if bits == 4:
        quads = np.concatenate([quads & 15, quads >> 4], axis=2)
    q = quads.reshape(p, k // 4, PANEL, 4).transpose(0, 1, 3, 2).reshape(p, k, PANEL)
    return np.ascontiguousarray(q if bits == 8 else q[..., :width] | (q[..., width:] << 4))


def vnni_rows(k: int, group: int, bits: int) -> int:
    """Rows of a packed panel: the codes' K and those of each group's 32 int32 column sums."""
    return k + (4 if bits == 8 else 8) * (k // (group or k))


def unpack_panels(codes: np.ndarray, bits: int) -> np.ndarray:
    """(N' / 32, K, 32) codes of packed panels, int4's 0..15 as uint8 (int8's as they are)."""
    return np.concatenate([codes & 15, codes >> 4], axis=-1) if bits == 4 else codes


def unpack(codes: np.ndarray, bits: int) -> np.ndarray:
    """The (K, N') codes of packed panels (int8, or int4's 0..15 as uint8)."""
    codes = unpack_panels(codes, bits)
    return codes.transpose(1, 0, 2).reshape(codes.shape[1], -1)


def dequantize(codes: np.ndarray, scales: np.ndarray, offsets: np.ndarray | None, bits: int) -> np.ndarray:
    """The (K, N') float32 weight of packed codes (the module doc's formulas)."""
    q = unpack(codes, bits).astype(np.float32)
    s = scales.astype(np.float32)
    if s.ndim == 2:
        s = np.repeat(s, q.shape[0] // s.shape[0], axis=0)
    if bits == 8:
        return q * s
    if offsets is None:
        return s * (q - np.float32(8))
    return s * q + np.repeat(offsets.astype(np.float32), q.shape[0] // offsets.shape[0], axis=0)


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(xq, meta) of float32 rows x (ember.tir.routines.QUANTIZE_ROWS: the formulas), in float32
    arithmetic as the C does it."""
    top = np.abs(x).max(axis=1, keepdims=True)
    inv, scale = _inverse_and_scale(top)
    xq = (_codes(x, inv, top) + 128).astype(np.uint8)
    sums = x.reshape(len(x), -1, QUANTIZE_BLOCK).sum(axis=2, dtype=np.float32)
    return xq, np.concatenate([scale, sums], axis=1).astype(np.float32)


def int8_products(xq: np.ndarray, meta: np.ndarray, codes: np.ndarray, scales: np.ndarray,
                  offsets: np.ndarray | None, bits: int) -> np.ndarray:
    """What gemm_nbits' int8 products compute of rows quantized by quantize_rows (xq, meta) and
    codes in panels, (M, N') in float64: x as s (xq - 128) times the weight, of which with zero
    points the offsets multiply meta's float32 sums of x instead (exactly as the C takes them off)."""
    xd = meta[:, :1].astype(np.float64) * (xq.astype(np.float64) - 128)
    if offsets is None:
        return xd @ dequantize(codes, scales, None, bits).astype(np.float64)
    y = xd @ dequantize(codes, scales, np.zeros_like(offsets), bits).astype(np.float64)
    sums = meta[:, 1:].astype(np.float64).reshape(len(xq), len(offsets), -1).sum(axis=2)
    return y + sums @ offsets.astype(np.float64)


def quantize_groups(x: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """(xq, meta) of float32 rows x quantized per group of `group` columns
    (ember.tir.routines.QUANTIZE_GROUPS: the formulas), in float32 arithmetic as the C does it."""
    m, k = x.shape
    xg = x.reshape(m, k // group, group)
    top = np.abs(xg).max(axis=2, keepdims=True)
    inv, scale = _inverse_and_scale(top)
    q = _codes(xg, inv, top)
    meta = np.concatenate([scale, q.sum(axis=2, keepdims=True).astype(np.float32)], axis=2)
    return q.astype(np.int8).reshape(m, k), meta.reshape(m, 2 * (k // group))


def _inverse_and_scale(top: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """127 / top and top / 127 of the rows' or groups' max |x| (0 and 1 for a zero one); a NaN or
    an infinity among the values: 0 and NaN, so that the product's output row is NaN (float32's
    for a NaN; for an infinity, NaN where float32 gives +-inf), not a finite value made of codes
    that lost it."""
    finite = top <= np.finfo(np.float32).max
    with np.errstate(divide="ignore"):
        inv = np.where((top > 0) & finite, np.float32(127) / top, np.float32(0)).astype(np.float32)
    scale = np.where(finite, np.where(top > 0, top / np.float32(127), np.float32(1)), np.float32(np.nan))
    return inv, scale.astype(np.float32)


def _codes(x: np.ndarray, inv: np.ndarray, top: np.ndarray) -> np.ndarray:
    """rint(x * inv) as int32 (0 where top, and so the scale, is not finite: their values are lost)."""
    with np.errstate(invalid="ignore"):
        return np.where(top <= np.finfo(np.float32).max, np.rint(x * inv), 0).astype(np.int32)


def dequantize_groups(xq: np.ndarray, meta: np.ndarray) -> np.ndarray:
    """The float64 rows that quantize_groups' (xq, meta) stand for: each group's scale times its codes."""
    m, k = xq.shape
    scales = meta.reshape(m, -1, 2)[:, :, 0].astype(np.float64)
    return np.repeat(scales, k // scales.shape[1], axis=1) * xq.astype(np.float64)


@dataclass(frozen=True)
class QuantizedWeight:
    """A weight already quantized (read from a GGUF file): its codes, scales and offsets in the
    layout above; `group` 0 for int8 per column."""

    bits: int
    group: int
    codes: np.ndarray
    scales: np.ndarray
    offsets: np.ndarray | None = None

    def dense(self, n: int) -> np.ndarray:
        """The (K, n) float32 weight it stands for."""
        return dequantize(self.codes, self.scales, self.offsets, self.bits)[:, :n]


def digest(dense: np.ndarray) -> str:
    """A key of a (K, N) float32 weight by its shape and bytes: how a pass finds the quantized
    form of a weight that reached the graph dequantized (ember.passes.quantize_weights)."""
    dense = np.ascontiguousarray(dense, dtype=np.float32)
    return f"{dense.shape}:{hashlib.sha1(dense.view(np.uint8)).hexdigest()}"

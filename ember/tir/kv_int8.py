"""The int8 row format of a decode step's key/value cache (ember.compile(..., kv_cache="int8")):
each row (one position of one head, E values) is E int8 codes followed by the 4 bytes of its
float32 scale (little-endian), so that a cache stays one array, (..., E + 4) int8, whose
positions' prefix the step reads in place, as the float32 and bfloat16 caches are read.

    value[e] = codes[e] * scale,   scale = max |row| / 127 (symmetric; an all-zero row: 0)

Per row rather than per tensor or per head, because a cache grows a row at a time (each row is
quantized once, when it is written, and never again) and rows' magnitudes differ by position
(llama.cpp's q8_0 cache blocks 32 values; a row of 64 to 128 is about the same bytes). The
decode attention folds the scales into its sums (ember.codegen.c_attention_decode): a key's
scale multiplies its score once, a value's its softmax weight once.
"""

from __future__ import annotations

import numpy as np

SCALE_BYTES = 4  # a row's float32 scale, after its codes


def quantize_rows(x: np.ndarray) -> np.ndarray:
    """float rows (..., E) as int8 rows (..., E + 4): codes round(x / scale), then the scale."""
    x = np.asarray(x, np.float32)
    scale = (np.abs(x).max(axis=-1, keepdims=True) / np.float32(127)).astype(np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        codes = np.where(scale > 0, np.rint(x / scale), 0)
    out = np.empty(x.shape[:-1] + (x.shape[-1] + SCALE_BYTES,), np.int8)
    out[..., :-SCALE_BYTES] = np.clip(codes, -127, 127)
    out[..., -SCALE_BYTES:] = scale.astype("<f4").view(np.int8)
    return out


def dequantize_rows(rows: np.ndarray) -> np.ndarray:
    """int8 rows (..., E + 4) as float32 rows (..., E): codes * scale."""
    scale = np.ascontiguousarray(rows[..., -SCALE_BYTES:]).view("<f4")
    return rows[..., :-SCALE_BYTES].astype(np.float32) * scale

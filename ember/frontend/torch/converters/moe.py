"""Mixture-of-experts routing: histc (transformers counts the tokens of each expert with it) and
the grouped matmul of the experts (torch's _grouped_mm, transformers' grouped_mm_fallback), onto
ember's histc and grouped_matmul (ember.ops.moe)."""

from __future__ import annotations

from ..node import Unsupported
from ..registry import handles


@handles("histc.default")
def histc(b, x, bins=100, min=0, max=0):  # noqa: A002  (ATen's names)
    if not min < max:
        raise Unsupported(f"histc with min={min}, max={max}: ember takes a range min < max, not the data's own")
    return b.op("histc", [b.v(x, "float32")], bins=bins, min=float(min), max=float(max))


def _grouped(b, x, w, offs):
    if len(b.type_of(x).shape) != 2 or len(b.type_of(w).shape) != 3:
        raise Unsupported(f"grouped mm of {b.type_of(x)} and {b.type_of(w)}: ember groups the rows of a 2-d input "
                          "over a 3-d stack of weights (one per expert)")
    return b.op("grouped_matmul", [b.v(x), b.v(w, b.type_of(x).dtype), b.v(offs)])


@handles("grouped_mm_fallback.default", namespace="transformers")
def grouped_mm_fallback(b, x, w, offs):
    return _grouped(b, x, w, offs)


@handles("_grouped_mm.default")
def grouped_mm(b, x, w, offs=None, bias=None, out_dtype=None):
    if offs is None or bias is not None:
        raise Unsupported("_grouped_mm without offsets or with a bias: ember takes the offsets form of "
                          "mixture-of-experts layers")
    return _grouped(b, x, w, offs)

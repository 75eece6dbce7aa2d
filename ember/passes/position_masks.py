"""Attention masks computed from positions, as exporters write them when the sequence length is
symbolic (torch.onnx's dynamo exporter on transformers' masks): which keys such a mask keeps,
read from how it is made, so that fold_attention drops it as it drops a constant mask.

    less_equal(arange(n), size(past))   n - 1 <= past: every key (a decode step's mask over the
                                        cache and its own position)
    less_equal(cols, rows)              cols and rows one arange(n) on the last axis and the one
                                        before it: key j for query i when j <= i (a prefill's;
                                        also as less_equal(sub(cols, rows), 0), onnxscript's
                                        causal attention)

each of its operands under unsqueezes and reshapes that only add unit axes. A mask read this way
needs no constant: the kernel knows it from the indices (causal) or it says nothing at all.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .. import dims
from ..graph.core import Value

ALL, CAUSAL = "all", "causal"


def kept_keys(cond: Value, constants: Mapping[str, np.ndarray]) -> str | None:
    """ALL when the bool `cond` is True everywhere, CAUSAL when it keeps key j (its last axis)
    for query i (the axis before) exactly when j <= i; None when its making says neither.
    `constants`: the graph's (less_equal(sub(cols, rows), 0) is less_equal(cols, rows))."""
    n = cond.node
    if n is None or n.op != "less_equal" or cond.type.rank < 2:
        return None
    a, b = n.inputs
    zero = constants.get(b.name) if b.node is None else None
    if a.node is not None and a.node.op == "sub" and zero is not None and zero.size == 1 and not zero.any():
        a, b = a.node.inputs
    cols, rows = _unit_axes_of(a), _unit_axes_of(b)
    if cols is None or rows is None or not _counts(cols):
        return None
    length = cols.node.attrs["length"]
    if rows.node.op == "size" and _at_most(dims.add(length, -1), rows.node.attrs["dim"]):
        return ALL
    if _counts(rows) and rows.node.attrs["length"] == length and _from_right(a, length) == 1 \
            and _from_right(b, length) == 2:
        return CAUSAL
    return None


def _unit_axes_of(x: Value) -> Value | None:
    """The arange or size that x is, under unsqueezes and reshapes that add or drop unit axes."""
    while x.node is not None and x.node.op in ("unsqueeze", "reshape"):
        source = x.node.inputs[0]
        if [d for d in x.type.shape if d != 1] != [d for d in source.type.shape if d != 1]:
            return None
        x = source
    return x if x.node is not None and x.node.op in ("arange", "size") else None


def _counts(x: Value) -> bool:
    """Whether x is arange(0, n, 1): the positions 0 .. n - 1."""
    return x.node.op == "arange" and x.node.attrs["start"] == 0 and x.node.attrs["step"] == 1


def _at_most(a, b) -> bool:
    """Whether dimension a <= dimension b: two sizes, or one expression of the symbols."""
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a <= b
    return dims.canonical(a) == dims.canonical(b)


def _from_right(x: Value, length) -> int | None:
    """Which axis of x, counted from the last (1), is its one axis not 1 (of `length`), or None."""
    shape = x.type.shape
    axes = [i for i, d in enumerate(shape) if d != 1]
    return len(shape) - axes[0] if len(axes) == 1 and shape[axes[0]] == length else None

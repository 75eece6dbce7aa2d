"""Attention masks computed from positions, as exporters write them when the sequence length is
symbolic (torch.onnx's dynamo exporter on transformers' masks): which keys such a mask keeps,
read from how it is made, so that fold_attention drops it as it drops a constant mask.

    less_equal(arange(n), size(past))   n - 1 <= past: every key (a decode step's mask over the
                                        cache and its own position; also past + c for constant
                                        c >= 0, the positions as torch's trace of transformers
                                        writes them: cache_position = past + arange(1))
    less_equal(cols, rows)              cols and rows one arange(n) on the last axis and the one
                                        before it: key j for query i when j <= i (a prefill's;
                                        also as less_equal(sub(cols, rows), 0), onnxscript's
                                        causal attention; also with one constant c added to
                                        both, as torch's trace of transformers' GPT-2 prefill
                                        writes them: cache_position = 0 + arange(seq))

each of its operands under unsqueezes and reshapes that only add unit axes, the mask itself under
an expand that leaves its last two axes (torch's attention mask broadcast to the batch). A mask
read this way needs no constant: the kernel knows it from the indices (causal) or it says nothing
at all. The positions are int64 or int32, a constant added to them far from their overflow
(MAX_SHIFT): the reading is of integers that never wrap, which a narrower or unsigned type breaks
(int8's arange wraps at 128, uint64's cols - rows is large where a key comes after its query, an
int32 position plus 2**31 - 4 wraps; float16's positions round from 2048 on).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .. import dims
from ..graph.core import Value

ALL, CAUSAL = "all", "causal"
MAX_SHIFT = {"int64": 2**62, "int32": 2**30}  # a constant added to positions of the type: far from its overflow


def kept_keys(cond: Value, constants: Mapping[str, np.ndarray]) -> str | None:
    """ALL when the bool `cond` is True everywhere, CAUSAL when it keeps key j (its last axis)
    for query i (the axis before) exactly when j <= i; None when its making says neither.
    `constants`: the graph's (less_equal(sub(cols, rows), 0) is less_equal(cols, rows))."""
    while cond.node is not None and cond.node.op == "expand" and \
            cond.type.shape[-2:] == cond.node.inputs[0].type.shape[-2:]:
        cond = cond.node.inputs[0]
    n = cond.node
    if n is None or n.op != "less_equal" or cond.type.rank < 2:
        return None
    a, b = n.inputs
    bound = MAX_SHIFT.get(a.type.dtype)
    if bound is None:
        return None
    zero = constants.get(b.name) if b.node is None else None
    if a.node is not None and a.node.op == "sub" and zero is not None and zero.size == 1 and not zero.any():
        a, b = a.node.inputs
    (cols, col_shift), (rows, row_shift) = _shifted(a, constants), _shifted(b, constants)
    if cols is None or rows is None or not _counts(cols) or max(map(abs, col_shift + row_shift)) > bound:
        return None
    length = cols.node.attrs["length"]
    if rows.node.op == "size" and _at_most(dims.add(length, col_shift[1] - 1 - row_shift[0]), rows.node.attrs["dim"]):
        return ALL
    if col_shift != row_shift or col_shift[0] != col_shift[1]:
        return None  # (one constant added to both sides shifts nothing)
    if _counts(rows) and rows.node.attrs["length"] == length and _from_right(a, length) == 1 \
            and _from_right(b, length) == 2:
        return CAUSAL
    return None


def _unit_axes_of(x: Value) -> Value | None:
    """The arange, size or add that x is, under unsqueezes and reshapes that add or drop unit axes."""
    while x.node is not None and x.node.op in ("unsqueeze", "reshape"):
        source = x.node.inputs[0]
        if [d for d in x.type.shape if d != 1] != [d for d in source.type.shape if d != 1]:
            return None
        x = source
    return x if x.node is not None and x.node.op in ("arange", "size", "add") else None


def _shifted(x: Value, constants: Mapping[str, np.ndarray]) -> tuple[Value | None, tuple[int, int]]:
    """(y, (least, most)): x is the arange or size y (under unit axes) plus an integer constant
    whose elements lie in [least, most] ((0, 0): none added), as torch's trace of transformers
    writes positions (cache_position = past + arange(1), the keys' arange(n) + 0); y None where
    x is neither."""
    x = _unit_axes_of(x)
    if x is None or x.node.op != "add":
        return x, (0, 0)
    for y, c in (x.node.inputs, x.node.inputs[::-1]):
        data = constants.get(c.name) if c.node is None else None
        y = _unit_axes_of(y)
        if data is not None and data.size and data.dtype.kind in "iu" and y is not None and y.node.op != "add":
            return y, (int(data.min()), int(data.max()))
    return None, (0, 0)


def _counts(x: Value) -> bool:
    """Whether x is arange(0, n, 1): the positions 0 .. n - 1."""
    return x.node.op == "arange" and x.node.attrs["start"] == 0 and x.node.attrs["step"] == 1


def _at_most(a, b) -> bool:
    """Whether dimension a <= dimension b: b - a a constant at least 0 (two sizes, or two
    expressions of the symbols that differ by a constant)."""
    difference = dims.add(b, dims.mul(-1, a))
    return isinstance(difference, int) and difference >= 0


def _from_right(x: Value, length) -> int | None:
    """Which axis of x, counted from the last (1), is its one axis not 1 (of `length`), or None."""
    shape = x.type.shape
    axes = [i for i, d in enumerate(shape) if d != 1]
    return len(shape) - axes[0] if len(axes) == 1 and shape[axes[0]] == length else None

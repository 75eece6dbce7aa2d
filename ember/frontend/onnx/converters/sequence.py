"""Sequences and optionals (ONNX's Sequence*, SplitToSequence, ConcatFromSequence, SequenceMap,
Optional*), resolved at import into tensor operators (ember/frontend/onnx/structured.py).

A sequence is a tuple of tensors whose length is known at import, an optional its value or
ABSENT, so these converters move Python structures: SequenceAt of a constant position is that
element, SequenceInsert and SequenceErase build a new tuple, SequenceLength is a constant,
SplitToSequence is one split, ConcatFromSequence one concat (with new_axis, of the elements
unsqueezed), SequenceMap its body converted in place once per element. A position given by a
graph input is a runtime-valued input (a ConstantInputError: the model is specialized for it).
"""

from __future__ import annotations

import numpy as np

from ..node import NodeContext, Tensor
from ..registry import converts
from ..structured import ABSENT, Absent, TensorSequence, describe
from .control import inline


def _sequence(cx: NodeContext, k: int) -> TensorSequence:
    t = cx.input(k)
    if not isinstance(t, TensorSequence):
        raise cx.error(f"input {k} must be a sequence, got {'a tensor' if not isinstance(t, Absent) else describe(t)}")
    return t


def _position(cx: NodeContext, k: int, length: int, default: int, what: str) -> int:
    """Input k, a position in a sequence of `length` (negative counts from the end), or `default`
    when left out; `length` itself is valid where `what` is an insertion."""
    given = cx.const_ints(k, "position")
    if given is None:
        return default
    (p,) = given
    last = length if what == "insert at" else length - 1
    if not -length <= p <= last:
        raise cx.error(f"position {p} is out of range to {what} a sequence of {length}")
    return p + length if p < 0 else p


@converts("SequenceEmpty")
def _sequence_empty(cx: NodeContext):
    return [TensorSequence(())]


@converts("SequenceConstruct")
def _sequence_construct(cx: NodeContext):
    return [TensorSequence(tuple(cx.input(k) for k in range(len(cx.inputs))))]


@converts("SequenceLength")
def _sequence_length(cx: NodeContext):
    return [np.array(len(_sequence(cx, 0)), "int64")]


@converts("SequenceAt")
def _sequence_at(cx: NodeContext):
    seq = _sequence(cx, 0)
    return [seq.items[_position(cx, 1, len(seq), 0, "read")]]


@converts("SequenceInsert")
def _sequence_insert(cx: NodeContext):
    seq, t = _sequence(cx, 0), cx.input(1)
    p = _position(cx, 2, len(seq), len(seq), "insert at")
    return [TensorSequence((*seq.items[:p], t, *seq.items[p:]))]


@converts("SequenceErase")
def _sequence_erase(cx: NodeContext):
    seq = _sequence(cx, 0)
    p = _position(cx, 1, len(seq), len(seq) - 1, "erase from")
    return [TensorSequence((*seq.items[:p], *seq.items[p + 1:]))]


@converts("SplitToSequence")
def _split_to_sequence(cx: NodeContext):
    """Split (left out: parts of 1 along `axis`, squeezed unless keepdims), a scalar (parts of that
    size, the last smaller) or one size per part."""
    x = cx.input(0)
    t = cx.type(x)
    axis = cx.attr("axis", 0) % t.rank
    size = cx.static_shape(x, "SplitToSequence")[axis]
    split = cx.const(1, "split")
    if split is None or split.ndim == 0:
        chunk = 1 if split is None else int(split)
        sizes = [min(chunk, size - s) for s in range(0, size, chunk)]
    else:
        sizes = [int(s) for s in split]
    parts = cx.ops("split", [x], {"axis": axis, "sizes": tuple(sizes)}) if len(sizes) > 1 else [x]
    if split is None and not cx.attr("keepdims", 1):
        parts = [cx.op("squeeze", [p], {"axes": (axis,)}) for p in parts]
    return [TensorSequence(tuple(parts))]


@converts("ConcatFromSequence")
def _concat_from_sequence(cx: NodeContext):
    seq = _sequence(cx, 0)
    if not len(seq):
        raise cx.error("ConcatFromSequence of an empty sequence (its output shape is not defined)")
    axis = cx.attr("axis")
    items = list(seq.items)
    if cx.attr("new_axis", 0):
        axis %= cx.type(items[0]).rank + 1
        items = [cx.op("unsqueeze", [t], {"axes": (axis,)}) for t in items]
    return [items[0] if len(items) == 1 else cx.op("concat", items, {"axis": axis})]


@converts("SequenceMap")
def _sequence_map(cx: NodeContext):
    """The body applied to each element (the tensor inputs passed whole), converted in place."""
    lengths = {len(t) for t in cx.inputs if isinstance(t, TensorSequence)}
    if len(lengths) != 1:
        raise cx.error(f"the input sequences have different lengths {sorted(lengths)}")
    (length,) = lengths
    body = cx.attr("body")
    outs: list[list[Tensor]] = [[] for _ in body.output]
    for k in range(length):
        args = [t.items[k] if isinstance(t, TensorSequence) else t for t in cx.inputs]
        for out, t in zip(outs, inline(cx, body, args)):
            out.append(t)
    return [TensorSequence(tuple(out)) for out in outs]


@converts("Optional")
def _optional(cx: NodeContext):
    return [cx.optional(0) if cx.optional(0) is not None else ABSENT]


@converts("OptionalHasElement")
def _optional_has_element(cx: NodeContext):
    return [np.array(not isinstance(cx.optional(0), Absent | None))]


@converts("OptionalGetElement")
def _optional_get_element(cx: NodeContext):
    t = cx.input(0)
    if isinstance(t, Absent):
        raise cx.error("the optional input holds no value (OptionalGetElement of an absent optional)")
    return [t]

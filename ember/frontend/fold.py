"""Constant folding at import, one helper for both frontends: an ember operator whose inputs are
all known at import time (weights, initializers, what was folded before them) runs now, on
NumPy arrays, with its reference (ember.ops.get(op).reference, the definition every kernel is
checked against); its outputs are arrays, not nodes.

- ONNX: `NodeContext.op` folds every operator a converter applies to constants alone; that is
  how shape arithmetic (Shape -> Gather -> Concat -> Reshape) reaches the attributes ember
  takes as numbers.
- PyTorch: an ATen call whose tensor inputs are all constants is converted by its handler into
  a scratch graph whose operators fold (`Builder(folding=True)`); torch itself computes only what
  ember has no operator for (tensor creation such as arange, or a handler that refuses).

Two rules for both: a result larger than this machine's memory is a CompileError before
anything is allocated (ember.checks.check_fits); and a fold that would grow the constants is not
done (outputs of more than GROWTH_LIMIT elements beyond their inputs': an expand of a scalar to
a large tensor is cheaper to compute at run time than to store), the caller adds a node instead.

A *symbolic shape* (the ONNX frontend's shape of a tensor with symbolic dimensions: an int64
shape as an array of dtype object, holding ints, symbol names and expressions of them) folds
through the operators that only move data, SHAPE_OPS; its arithmetic is ember.frontend.symbolic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..checks import check_fits
from ..errors import IndexOutOfRangeError
from ..graph.core import TensorType
from ..ops import get, infer_types

GROWTH_LIMIT = 1 << 16  # elements a folded result may have beyond the size of its constant inputs

# ember operators that only move data: they fold on symbolic shapes too
SHAPE_OPS = frozenset({"gather", "concat", "unsqueeze", "squeeze", "slice", "reshape", "flatten", "split",
                       "identity", "transpose", "expand"})


def is_symbolic(data) -> bool:
    """Whether `data` is a symbolic shape (an array of dtype object)."""
    return isinstance(data, np.ndarray) and data.dtype == object


def array_type(data: np.ndarray) -> TensorType:
    return TensorType(data.shape, "int64" if is_symbolic(data) else data.dtype.name)


def fold(op: str, inputs: Sequence[np.ndarray], attrs: Mapping | None, where: str) -> list[np.ndarray] | None:
    """The outputs of ember operator `op` on the constants `inputs`, computed now with its
    reference, in the dtypes and shapes its type inference gives; None when folding would grow
    the constants (see the module's docstring). `where` names the node, for errors."""
    bound, out_types = infer_types(op, [array_type(a) for a in inputs], attrs)
    for t in out_types:
        check_fits(t, f"{where}: {op} folded to a constant")
    if not all(t.is_static for t in out_types) or sum(t.numel for t in out_types) > sum(
            a.size for a in inputs) + GROWTH_LIMIT:
        return None  # (a result sized by a symbol is not a constant)
    symbolic = any(is_symbolic(a) for a in inputs)
    try:
        results = get(op).reference(list(inputs), bound)
    except IndexOutOfRangeError as e:  # an index among the constants outside its axis
        raise IndexOutOfRangeError(f"{where}: {e}", e.index, e.size) from None
    outs = [np.asarray(o, dtype=object if symbolic else None).reshape(t.shape)
            for o, t in zip(results, out_types, strict=True)]
    return [o if is_symbolic(o) and not all(isinstance(d, int | np.integer) for d in o.flat)
            else o.astype(t.dtype, copy=False) for o, t in zip(outs, out_types)]  # (a static part: numbers again)

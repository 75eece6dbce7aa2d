"""ONNX function operators that ember converts to one operator of its own rather than expanding
their function bodies (functions.py), where that is faster: one kernel for the whole operator
instead of the body's reductions, matmuls and softmax.

- RMSNormalization (23): `rms_norm` over the axes from `axis` on (in the stash type when the input
  has another: cast, normalize, cast back), times the scale.
- Attention (23+): `scaled_dot_product_attention` for the common form (4-D Q, K, V of as many heads,
  an additive mask, or a constant bool one that keeps a key for every query, is_causal with as
  many queries as keys (then the diagonal is kept), no past state, no softcap or sliding window,
  only the output Y); any other form expands from its function body (`cx.expand_instead()`).
"""

from __future__ import annotations

import numpy as np

from ..node import NodeContext, to_dtype
from ..registry import converts


@converts("RMSNormalization")
def _rms_normalization(cx: NodeContext):
    x, scale = cx.input(0), cx.input(1)
    t = cx.type(x)
    axis = cx.attr("axis", -1) % t.rank
    attrs = {"normalized_ndim": t.rank - axis, "eps": cx.attr("epsilon", 1e-5)}
    stash = to_dtype(cx.attr("stash_type", 1), cx.where)
    if t.dtype == stash and cx.type(scale).shape == t.shape[axis:]:
        return [cx.op("rms_norm", [x, scale], attrs)]
    y = x if t.dtype == stash else cx.op("cast", [x], {"dtype": stash})
    y = cx.op("rms_norm", [y], attrs)
    y = y if t.dtype == stash else cx.op("cast", [y], {"dtype": t.dtype})
    return [cx.op("mul", [y, scale])]


@converts("Attention")
def _attention(cx: NodeContext):
    q, k, v, mask = cx.input(0), cx.input(1), cx.input(2), cx.optional(3)
    tq, tk, tv = cx.type(q), cx.type(k), cx.type(v)
    plain = (
        tq.rank == tk.rank == tv.rank == 4 and tq.shape[1] == tk.shape[1] == tv.shape[1]
        and all(cx.optional(i) is None for i in (4, 5, 6)) and not any(cx.wants_output(i) for i in (1, 2, 3))
        and not cx.attr("softcap", 0.0) and cx.attr("left_window_size", -1) == cx.attr("right_window_size", -1) == -1
        and (mask is None or cx.type(mask).dtype == tq.dtype
             or _keeps_a_key_per_query(mask, tq.shape[2], tk.shape[2], cx.attr("is_causal", 0)))
        and (not cx.attr("is_causal", 0) or tq.shape[2] == tk.shape[2]))
    if not plain:
        raise cx.expand_instead()
    attrs = {"causal": bool(cx.attr("is_causal", 0)), "scale": cx.attr("scale") or None}
    return [cx.op("scaled_dot_product_attention", [q, k, v, mask], attrs)]


def _keeps_a_key_per_query(mask, queries, keys, causal: bool) -> bool:
    """Whether a bool mask is a constant that keeps at least one key for every query (with the
    causal mask, if any): ONNX gives zeros for a query whose keys are all masked,
    scaled_dot_product_attention NaN (as PyTorch)."""
    if not (isinstance(mask, np.ndarray) and mask.dtype == bool and isinstance(queries, int) and isinstance(keys, int)):
        return False
    keep = mask.reshape((1,) * max(2 - mask.ndim, 0) + mask.shape)
    keep = np.broadcast_to(keep, (*keep.shape[:-2], queries, keys))
    if causal:
        keep = keep & np.tril(np.ones((queries, keys), bool))
    return bool(keep.any(axis=-1).all())

"""The routing of mixture-of-experts layers: histc (tokens counted per expert) and grouped_matmul
(each token's rows multiplied by its own expert's weight).

- histc(x; bins, min, max): float32[bins], the count of the elements of x in each of `bins`
  equal bins over [min, max] (torch.histc with min < max): an element's bin is
  floor((x - min) * bins / (max - min)), computed in float64, the last bin taking x == max too;
  elements outside [min, max] and NaNs are not counted. torch finds the bin by a search among
  the edges it made with linspace, which may put a value within an ulp of an edge in the
  neighbouring bin; the counts of integer values (expert ids) are the same.
- grouped_matmul(x, w, offsets): out[s] = x[s] @ w[g(s)], x (S, K), w (E, K, N), offsets (E,)
  integer cumulative row counts (rows offsets[e-1]..offsets[e] belong to expert e: the tokens
  sorted by expert, as transformers' grouped_mm takes them), out (S, N); rows from offsets[-1]
  on belong to no expert and are zero. Each row is multiplied by one expert's weight only, so
  the work is that of the routed tokens (S x K x N), never every expert for every token.
  With w_panels = P > 0 (set by ember.passes.pack_experts on constant weights), w comes as each
  expert's panels (E, N / P, K, P), the layout matmul's packed weights have (ember.ops.matmul,
  b_panels): a register tile one panel wide reads its expert's weights as one contiguous stream,
  not K rows N floats apart.

Both are pattern `opaque` (histc: a reduction over every element per bin, bins x numel work,
small for a router's top-k ids; grouped_matmul: each row's expert found by a search over the E
offsets, then the row's product, the stage tagged ANCHOR that the CPU schedule tiles in registers
as a matmul's: ember.schedules.cpu.moe).
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from ..tir.expr import cast, const
from .common import check_float
from .registry import REQUIRED, OpDef, OpTypeError, register

ANCHOR = "grouped_matmul"  # the te tag of the accumulating stage

# -- histc -------------------------------------------------------------------------------------


def _check_histc(attrs) -> tuple[int, float, float]:
    bins, lo, hi = attrs["bins"], attrs["min"], attrs["max"]
    if not isinstance(bins, int) or bins < 1:
        raise OpTypeError(f"histc: bins must be a positive integer, got {bins!r}")
    if not float(lo) < float(hi):
        raise OpTypeError(f"histc: min ({lo}) must be below max ({hi})")
    return bins, float(lo), float(hi)


def _infer_histc(types, attrs):
    (x,) = types
    check_float("histc", x)
    bins, _, _ = _check_histc(attrs)
    return [TensorType((bins,), "float32")]


def _reference_histc(inputs, attrs):
    bins, lo, hi = _check_histc(attrs)
    x = inputs[0].astype(np.float64).reshape(-1)
    x = x[(x >= lo) & (x <= hi)]  # (NaNs fail both)
    pos = np.minimum(np.floor((x - lo) * bins / (hi - lo)).astype(np.int64), bins - 1)
    return [np.bincount(pos, minlength=bins).astype(np.float32)]


def _compute_histc(inputs, attrs, out_types):
    (x,) = inputs
    bins, lo, hi = _check_histc(attrs)
    axes = [te.reduce_axis((0, n), name=f"r{d}") for d, n in enumerate(x.shape)]

    def count(b):
        v = cast("float64", x[tuple(a.var for a in axes)])
        pos = cast("int64", te.floor((v - const(lo, "float64")) * const(float(bins), "float64")
                                     / const(hi - lo, "float64")))
        at = te.if_then_else(pos >= bins, const(bins - 1, "int64"), pos)
        hit = te.all(v >= const(lo, "float64"), v <= const(hi, "float64"), at == cast("int64", b))
        return te.sum(te.if_then_else(hit, const(1.0, "float32"), const(0.0, "float32")), axis=axes)

    return [te.compute((bins,), count, name="histc")]


register(OpDef(
    name="histc",
    infer=_infer_histc,
    reference=_reference_histc,
    compute=_compute_histc,
    pattern="opaque",
    attrs={"bins": 100, "min": REQUIRED, "max": REQUIRED},
    doc="torch.histc with min < max: float32 counts of the elements in equal bins over [min, max].",
))


# -- grouped_matmul ----------------------------------------------------------------------------


def _infer_grouped_matmul(types, attrs):
    x, w, offsets = types
    panels = attrs["w_panels"]
    if x.rank != 2 or w.rank != (4 if panels else 3) or offsets.rank != 1 or (panels and w.shape[3] != panels):
        what = f"w in panels (E, N / {panels}, K, {panels})" if panels else "w (E, K, N)"
        raise OpTypeError(f"grouped_matmul takes x (S, K), {what} and offsets (E,), got {x.shape}, {w.shape} "
                          f"and {offsets.shape}")
    k, n = (w.shape[2], w.shape[1] * panels) if panels else w.shape[1:]
    if not dt.is_int(offsets.dtype):
        raise OpTypeError(f"grouped_matmul: offsets must be integers, got {offsets.dtype}")
    if x.dtype != w.dtype:
        raise OpTypeError(f"grouped_matmul: x and w must have one dtype, got {x.dtype} and {w.dtype}")
    if x.shape[1] != k or offsets.shape[0] != w.shape[0]:
        raise OpTypeError(f"grouped_matmul: x {x.shape}, w {w.shape} and offsets {offsets.shape} disagree (x's K must "
                          f"be w's K, one offset per expert)")
    return [TensorType((x.shape[0], n), x.dtype)]


def expert_panels(w: np.ndarray, width: int) -> np.ndarray:
    """Each expert's (K, N) weights as panels (N / width, K, width): a view of w (E, K, N)."""
    experts, k, n = w.shape
    return w.reshape(experts, k, n // width, width).transpose(0, 2, 1, 3)


def _reference_grouped_matmul(inputs, attrs):
    x, w, offsets = inputs
    if attrs["w_panels"]:  # back to (E, K, N)
        w = w.transpose(0, 2, 1, 3).reshape(w.shape[0], w.shape[2], -1)
    out = np.zeros((x.shape[0], w.shape[2]), x.dtype)
    start = 0
    for e, end in enumerate(offsets.tolist()):
        end = min(max(end, start), x.shape[0])
        out[start:end] = x[start:end] @ w[e]
        start = end
    return [out]


def _compute_grouped_matmul(inputs, attrs, out_types):
    x, w, offsets = inputs
    experts, panels = w.shape[0], attrs["w_panels"]
    n_cols = out_types[0].shape[1]
    e = te.reduce_axis((0, experts), name="e")
    # a row's expert: how many experts end at or before it (experts, past the last offset: none)
    group = te.compute((x.shape[0],), lambda s: te.sum(
        te.if_then_else(cast("int64", offsets[e.var]) <= cast("int64", s), const(1, "int64"), const(0, "int64")),
        axis=e), name="group")
    k = te.reduce_axis((0, x.shape[1]), name="k")
    # each row's product with its expert's weight (the last expert's for a row of none, zeroed
    # after: no guard inside the reduction, whose register tile reads rows of w along n)
    def weight(s, n):
        g = te.min(group[s], experts - 1)
        return w[g, n // panels, k.var, n % panels] if panels else w[g, k.var, n]

    acc = te.compute((x.shape[0], n_cols), lambda s, n: te.sum(x[s, k.var] * weight(s, n), axis=k),
                     name="grouped_matmul", tag=ANCHOR, attrs={"panels": panels})
    zero = const(0.0, x.dtype)
    return [te.compute(acc.shape, lambda s, n: te.if_then_else(group[s] < experts, acc[s, n], zero),
                       name="grouped_rows")]


register(OpDef(
    name="grouped_matmul",
    infer=_infer_grouped_matmul,
    reference=_reference_grouped_matmul,
    compute=_compute_grouped_matmul,
    pattern="opaque",
    num_inputs=(3, 3),
    attrs={"w_panels": 0},
    doc="Rows of x grouped by cumulative offsets, each group multiplied by its expert's weight (MoE); "
        "w_panels > 0: w in panels (E, N / P, K, P).",
))

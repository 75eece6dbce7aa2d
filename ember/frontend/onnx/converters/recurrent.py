"""ONNX LSTM, GRU and RNN as ember's lstm, gru and rnn (ember.ops.recurrent).

The input projection of every time step and direction is one matmul, X (T*B, I) @ W' (I, D*G*H),
plus the biases that can be added outside the recurrence (Wb + Rb; for a GRU with
linear_before_reset all but Rb of the h gate, which the gru takes as rbh). W', the recurrence
weights packed (ember.ops.recurrent.pack) and the summed biases are folded at import when the
weights are constants.
Activation alphas and betas are consumed in the order of the activations that take them, with
ONNX Runtime's defaults where the list runs out; one direction's activations given for a
bidirectional layer serve both.
"""

from __future__ import annotations

import math

import numpy as np

from ....ops.recurrent import CELLS, PACK_PERM, packed_split
from ....ops.recurrent_kernel import ACTIVATIONS, DEFAULT_PARAMS
from ..node import NodeContext
from ..registry import converts

DEFAULT_ACTIVATIONS = {"lstm": ("Sigmoid", "Tanh", "Tanh"), "gru": ("Sigmoid", "Tanh"), "rnn": ("Tanh",)}
_CANONICAL = {name.lower(): name for name in ACTIVATIONS}


def activations(cx: NodeContext, op: str, dirs: int) -> tuple:
    """The node's activation functions as (name, alpha, beta) triples, one set per direction."""
    per_dir = CELLS[op][1]
    names = list(cx.attr("activations") or DEFAULT_ACTIVATIONS[op])
    if len(names) == per_dir and dirs == 2:
        names = names * 2
    if len(names) != per_dir * dirs:
        raise cx.error(f"activations {names} must name {per_dir * dirs} functions ({per_dir} per direction)")
    alphas, betas = list(cx.attr("activation_alpha") or []), list(cx.attr("activation_beta") or [])
    out = []
    for name in names:
        canonical = _CANONICAL.get(name.lower())
        if canonical is None:
            raise cx.unsupported(f"activation {name}")
        alpha, beta = DEFAULT_PARAMS.get(canonical, (0.0, 0.0))
        if canonical in DEFAULT_PARAMS:
            alpha = float(alphas.pop(0)) if alphas else alpha
            if canonical in ("Affine", "ScaledTanh", "HardSigmoid"):
                beta = float(betas.pop(0)) if betas else beta
        out.append((canonical, alpha, beta))
    return tuple(out)


def project(cx: NodeContext, x, w, layout: int):
    """X @ W^T for every time step and direction: (T, B, D*G*H), or (B, T, D*G*H) for layout 1."""
    dirs, rows, inputs = cx.static_shape(w, "the weights")
    w_t = cx.op("transpose", [cx.op("reshape", [w], {"shape": (dirs * rows, inputs)})], {"perm": (1, 0)})
    shape = cx.type(x).shape
    if all(isinstance(d, int) for d in shape):  # one GEMM over all time steps and rows
        flat = cx.op("matmul", [cx.op("reshape", [x], {"shape": (math.prod(shape[:2]), inputs)}), w_t])
        return cx.op("reshape", [flat], {"shape": (*shape[:2], dirs * rows)})
    return cx.op("matmul", [x, w_t])


@converts("LSTM", "GRU", "RNN")
def _recurrent(cx: NodeContext):
    op = cx.node.op_type.lower()
    gates, _, _ = CELLS[op]
    x, w, r = cx.input(0), cx.input(1), cx.input(2)
    b = cx.optional(3)
    direction, layout = cx.attr("direction", "forward"), cx.attr("layout", 0)
    dirs, _, hidden = cx.static_shape(r, "the recurrence weights")
    dtype = cx.type(x).dtype
    lbr = op == "gru" and bool(cx.attr("linear_before_reset", 0))
    xp = project(cx, x, w, layout)
    rbh = np.zeros((dirs, hidden), dtype) if lbr else None
    if b is not None:
        wb = cx.op("slice", [b], {"starts": (0,), "ends": (gates * hidden,), "axes": (1,), "steps": (1,)})
        rb = cx.op("slice", [b], {"starts": (gates * hidden,), "ends": (2 * gates * hidden,), "axes": (1,),
                                  "steps": (1,)})
        if lbr:  # Rb of the h gate stays in the recurrence, multiplied by r
            rbh = cx.op("slice", [rb], {"starts": (2 * hidden,), "ends": (3 * hidden,), "axes": (1,), "steps": (1,)})
            keep = np.repeat(np.array([1, 1, 0], dtype), hidden)
            rb = cx.op("mul", [rb, keep])
        bias = cx.op("reshape", [cx.op("add", [wb, rb])], {"shape": (dirs * gates * hidden,)})
        xp = cx.op("add", [xp, bias])
    rp = cx.op("transpose", [cx.op("reshape", [r], {"shape": packed_split(dirs, gates, hidden)})], {"perm": PACK_PERM})
    optional = {"seq_lens": cx.optional(4), "h0": cx.optional(5)}
    if op == "lstm":
        optional.update(c0=cx.optional(6), p=cx.optional(7))
    if lbr:
        optional["rbh"] = rbh
    given = tuple(k for k in CELLS[op][2] if optional.get(k) is not None)
    attrs = {"direction": direction, "layout": layout, "activations": activations(cx, op, dirs),
             "clip": cx.attr("clip"), "given": given}
    if op == "lstm":
        attrs["input_forget"] = bool(cx.attr("input_forget", 0))
    if op == "gru":
        attrs["linear_before_reset"] = lbr
    return cx.ops(op, [xp, rp, *(optional[k] for k in given)], attrs)

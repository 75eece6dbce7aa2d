"""nn.LSTM, nn.GRU and nn.RNN (aten.lstm.input, gru.input, rnn_tanh.input, rnn_relu.input, which
ember keeps whole: ember.frontend.torch.module.KEEP) as one ember lstm, gru or rnn per layer
(ember.ops.recurrent).

Each layer's input projection, both directions at once, is one gemm over all time steps with
the two biases summed (for a GRU, whose candidate gate is torch's linear_before_reset form, all
but b_hn, which the gru takes as rbh). The weights are constants: their gates are put in ONNX's
order (torch's LSTM i, f, g, o and GRU r, z, n become i, o, f, c and z, r, h), packed
(ember.ops.recurrent.pack) and summed here, once. batch_first runs the layers with layout 1, so that no activation is
transposed; the states torch gives and returns are (layers * directions, batch, hidden) either way.
Initial states that are constant zeros (torch's default) are left out.
"""

from __future__ import annotations

import math

import numpy as np

from ....ops.recurrent import CELLS, pack
from ..node import Const, Unsupported
from ..registry import handles

# torch's gate blocks, in ONNX's order
GATE_ORDER = {"lstm": (0, 3, 1, 2), "gru": (1, 0, 2), "rnn": (0,)}
ACTIVATIONS = {"lstm": ("Sigmoid", "Tanh", "Tanh"), "gru": ("Sigmoid", "Tanh"), "rnn_tanh": ("Tanh",),
               "rnn_relu": ("Relu",)}


@handles("lstm.input")
def lstm(b, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _layers(b, "lstm", x, list(hx), params, has_biases, num_layers, train, bidirectional, batch_first)


@handles("gru.input")
def gru(b, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _layers(b, "gru", x, [hx], params, has_biases, num_layers, train, bidirectional, batch_first)


@handles("rnn_tanh.input")
def rnn_tanh(b, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _layers(b, "rnn_tanh", x, [hx], params, has_biases, num_layers, train, bidirectional, batch_first)


@handles("rnn_relu.input")
def rnn_relu(b, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _layers(b, "rnn_relu", x, [hx], params, has_biases, num_layers, train, bidirectional, batch_first)


def _layers(b, kind, x, states, params, has_biases, num_layers, train, bidirectional, batch_first):
    op = kind if kind in ("lstm", "gru") else "rnn"
    dirs = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    if train:
        raise Unsupported(f"{kind} in training mode (export the model in eval mode)")
    if len(params) != num_layers * dirs * per or not all(isinstance(p, Const) for p in params):
        raise Unsupported(f"{kind} with projections (proj_size) or weights computed at run time")
    y = b.v(x)
    last: list[list] = [[] for _ in states]  # per state: each layer's final one, (D, B, H)
    for layer in range(num_layers):
        group = [[_np(p) for p in params[(layer * dirs + d) * per:(layer * dirs + d + 1) * per]] for d in range(dirs)]
        given = [_initial(b, s, layer, dirs, batch_first) for s in states]
        y, finals = _layer(b, op, kind, y, group, given, bidirectional, batch_first)
        for k, f in enumerate(finals):
            last[k].append(f)
    outs = [b.op("concat", parts, axis=0) if len(parts) > 1 else parts[0] for parts in last]
    return (y, *outs)


def _np(p: Const) -> np.ndarray:
    return p.tensor.detach().cpu().numpy()


def _initial(b, state, layer: int, dirs: int, batch_first: bool):
    """The layer's initial state, (D, B, H) ((B, D, H) with batch_first), or None for zeros."""
    if isinstance(state, Const):
        data = _np(state)[layer * dirs:(layer + 1) * dirs]
        if not data.any():
            return None
        return b.const(data.swapaxes(0, 1) if batch_first else data, f"{state.name}.l{layer}")
    s = b.op("slice", [b.v(state)], starts=(layer * dirs,), ends=((layer + 1) * dirs,), axes=(0,), steps=(1,))
    return b.op("transpose", [s], perm=(1, 0, 2)) if batch_first else s


def _gates(w: np.ndarray, op: str) -> np.ndarray:
    """Rows of weights or biases in torch's gate order, reordered to ONNX's."""
    blocks = np.split(w, len(GATE_ORDER[op]))
    return np.concatenate([blocks[k] for k in GATE_ORDER[op]])


def _layer(b, op, kind, x, group, given, bidirectional, batch_first):
    """One layer: its output (T, B, D*H) ((B, T, D*H) with batch_first) and final states."""
    gates = len(GATE_ORDER[op])
    hidden = group[0][1].shape[1]
    dirs = len(group)
    w = np.concatenate([_gates(p[0], op) for p in group])  # (D*G*H, I)
    rp = pack(np.stack([_gates(p[1], op) for p in group]))
    zeros = np.zeros(dirs * gates * hidden, w.dtype)
    b_ih = np.concatenate([_gates(p[2], op) for p in group]) if len(group[0]) == 4 else zeros
    b_hh = np.concatenate([_gates(p[3], op) for p in group]) if len(group[0]) == 4 else zeros
    rbh = None
    if op == "gru":  # b_hn is multiplied by r inside the recurrence
        keep = np.tile(np.repeat(np.array([1, 1, 0], w.dtype), hidden), dirs)
        rbh = b_hh.reshape(dirs, gates, hidden)[:, 2]
        b_hh = b_hh * keep
    xp = _project(b, x, np.ascontiguousarray(w.T), b_ih + b_hh)
    optional = {"seq_lens": None, "h0": given[0], "c0": given[1] if op == "lstm" else None, "p": None,
                "rbh": None if rbh is None else b.const(np.ascontiguousarray(rbh), "rbh")}
    names = tuple(k for k in CELLS[op][2] if optional.get(k) is not None)
    attrs = dict(direction="bidirectional" if bidirectional else "forward", layout=int(batch_first),
                 activations=tuple((a, 0.0, 0.0) for a in ACTIVATIONS[kind]) * dirs, given=names)
    if op == "lstm":
        attrs["input_forget"] = False
    if op == "gru":
        attrs["linear_before_reset"] = True
    outs = b.ops(op, [xp, b.const(rp, "rp"), *(optional[k] for k in names)], **attrs)
    y, finals = outs[0], outs[1:]
    if batch_first:  # (B, T, D, H): the directions' outputs side by side already
        finals = [b.op("transpose", [f], perm=(1, 0, 2)) for f in finals]
    elif dirs > 1:  # (T, D, B, H)
        y = b.op("transpose", [y], perm=(0, 2, 1, 3))
    return b.op("reshape", [y], shape=(*b.type_of(xp).shape[:2], dirs * hidden)), finals


def _project(b, x, w_t: np.ndarray, bias: np.ndarray):
    """x @ w_t + bias over every time step: one gemm on the rows of all steps."""
    t = b.type_of(x)
    w, c = b.const(w_t, "w_ih.T"), b.const(bias, "bias")
    if all(isinstance(d, int) for d in t.shape):
        flat = b.op("gemm", [b.op("reshape", [x], shape=(math.prod(t.shape[:2]), t.shape[2])), w, c])
        return b.op("reshape", [flat], shape=(*t.shape[:2], w_t.shape[1]))
    return b.op("add", [b.op("matmul", [x, w]), c])

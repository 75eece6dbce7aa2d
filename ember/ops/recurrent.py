"""Recurrent layers: lstm, gru and rnn over a whole sequence, as ONNX defines LSTM, GRU and RNN.

The input projection is not part of these operators: a frontend computes it for every time step
at once, as one matmul (X @ W^T plus the biases that can be added there), which ember's GEMM
runs, and gives the result as `xp`. What is left is the recurrence, which one kernel runs with
the time loop inside it (ember.ops.recurrent_kernel).

    lstm(xp, rp, [seq_lens, h0, c0, p]) -> y, y_h, y_c
    gru(xp, rp, [seq_lens, h0, rbh])    -> y, y_h
    rnn(xp, rp, [seq_lens, h0])         -> y, y_h

- xp: (T, B, D*G*H) with layout 0, (B, T, D*G*H) with layout 1: per direction d, per gate g (ONNX's
  order: lstm i, o, f, c; gru z, r, h; rnn one gate), the input projection with the biases;
- rp: (D, H/JB, H, G, JB), the recurrence weights packed in blocks of JB = hidden_block(H) units:
  rp[d, n, k, g, u] = R[d, g*H + n*JB + u, k] (ONNX's R reshaped to (D, G, H/JB, JB, H) and
  transposed by PACK_PERM), so that the kernel streams each block's weights from contiguous
  memory; frontends pack constant weights at import;
- the optional inputs, those named in the attribute `given`, in the order above: seq_lens (B,)
  integers; h0 and c0, the initial states, (D, B, H) with layout 0, (B, D, H) with layout 1; p the
  peepholes (D, 3H) in the order i, o, f; rbh (D, H), the h-gate recurrence bias of a gru with
  linear_before_reset (the one bias that cannot be added to xp);
- y: (T, D, B, H) with layout 0, (B, T, D, H) with layout 1; zero after each sequence's length;
- y_h, y_c: the last states, shaped as h0 (zero for a sequence of length 0, as in ONNX Runtime).

Attributes: direction ("forward", "reverse", "bidirectional": D = 2, the second direction reversed),
activations (a (name, alpha, beta) triple per activation function and direction: lstm f, g, h;
gru f, g; rnn f; ONNX's names), clip (None, or the bound of every pre-activation), layout, given,
and input_forget (lstm: f = 1 - i) or linear_before_reset (gru). A reverse direction runs each
sequence from its own last element (seq_lens). Pattern `opaque`.
"""

from __future__ import annotations

import numpy as np

from .. import te
from ..graph.core import TensorType
from ..tir import dtype as dt
from .common import te_shape
from .recurrent_kernel import (
    ACTIVATIONS,
    CELLS,
    activation,
    clipper,
    gru_cell,
    hidden_block,
    lstm_cell,
    numpy_math,
    recurrence,
)
from .registry import REQUIRED, OpDef, OpTypeError, register

DIRECTIONS = ("forward", "reverse", "bidirectional")


PACK_PERM = (0, 2, 4, 1, 3)  # R reshaped to (D, G, H/JB, JB, H) -> rp (D, H/JB, H, G, JB)


def packed_split(dirs: int, gates: int, hidden: int) -> tuple[int, ...]:
    """The shape ONNX's R (D, G*H, H) is reshaped to before PACK_PERM packs it."""
    jb = hidden_block(hidden)
    return (dirs, gates, hidden // jb, jb, hidden)


def pack(r: np.ndarray) -> np.ndarray:
    """ONNX's R (D, G*H, H) as the operators' rp."""
    dirs, rows, hidden = r.shape
    return np.ascontiguousarray(r.reshape(packed_split(dirs, rows // hidden, hidden)).transpose(PACK_PERM))


def unpack(rp: np.ndarray) -> np.ndarray:
    """rp as R transposed, (D, H, G*H): rt[d, k, g*H + j] = R[d, g*H + j, k]."""
    dirs, blocks, hidden, gates, jb = rp.shape
    return rp.transpose(0, 2, 3, 1, 4).reshape(dirs, hidden, gates * hidden)


def _dirs(attrs) -> int:
    return 2 if attrs["direction"] == "bidirectional" else 1


def _check_attrs(op: str, attrs) -> None:
    gates, acts, optional = CELLS[op]
    if attrs["direction"] not in DIRECTIONS:
        raise OpTypeError(f"{op}: direction must be one of {DIRECTIONS}, got {attrs['direction']!r}")
    if attrs["layout"] not in (0, 1):
        raise OpTypeError(f"{op}: layout must be 0 or 1, got {attrs['layout']!r}")
    want = acts * _dirs(attrs)
    activations = attrs["activations"]
    if len(activations) != want or any(len(a) != 3 or a[0] not in ACTIVATIONS for a in activations):
        raise OpTypeError(f"{op}: activations must be {want} (name, alpha, beta) triples, names among "
                          f"{sorted(ACTIVATIONS)}; got {activations!r}")
    unknown = [g for g in attrs["given"] if g not in optional]
    if unknown or list(attrs["given"]) != [g for g in optional if g in attrs["given"]]:
        raise OpTypeError(f"{op}: given must name optional inputs among {optional}, in that order; got "
                          f"{attrs['given']!r}")
    if attrs["clip"] is not None and not (isinstance(attrs["clip"], float | int) and attrs["clip"] >= 0):
        raise OpTypeError(f"{op}: clip must be None or a number >= 0, got {attrs['clip']!r}")
    if op == "gru" and bool(attrs["linear_before_reset"]) != ("rbh" in attrs["given"]):
        raise OpTypeError("gru: the input rbh is given exactly when linear_before_reset is set")


def _infer(op: str):
    def infer(types: list[TensorType], attrs) -> list[TensorType]:
        _check_attrs(op, attrs)
        gates = CELLS[op][0]
        given = dict(zip(attrs["given"], types[2:]))
        if len(types) != 2 + len(attrs["given"]):
            raise OpTypeError(f"{op}: takes xp, rp and the inputs named in given {attrs['given']}, got "
                              f"{len(types)} inputs")
        xp, rp = types[:2]
        if xp.dtype not in ("float32", "float64") or rp.dtype != xp.dtype:
            raise OpTypeError(f"{op}: xp and rp must both be float32 or float64, got {xp.dtype} and {rp.dtype}")
        if xp.rank != 3 or rp.rank != 5 or not isinstance(rp.shape[2], int) or rp.shape[2] < 1:
            raise OpTypeError(f"{op}: xp must have rank 3 and rp rank 5 with a static hidden size, got shapes "
                              f"{xp.shape} and {rp.shape}")
        d, hidden = _dirs(attrs), rp.shape[2]
        jb = hidden_block(hidden)
        if rp.shape != (d, hidden // jb, hidden, gates, jb) or xp.shape[2] != d * gates * hidden:
            raise OpTypeError(f"{op}: with {d} direction(s) and hidden size {hidden}, rp must be "
                              f"{(d, hidden // jb, hidden, gates, jb)} (ember.ops.recurrent.pack) and xp's last "
                              f"dimension {d * gates * hidden}; got xp {xp.shape}, rp {rp.shape}")
        steps, batch = xp.shape[:2] if attrs["layout"] == 0 else xp.shape[1::-1]
        state = TensorType((d, batch, hidden) if attrs["layout"] == 0 else (batch, d, hidden), xp.dtype)
        want = {"seq_lens": (batch,), "h0": state.shape, "c0": state.shape, "p": (d, 3 * hidden), "rbh": (d, hidden)}
        for name, t in given.items():
            ok = dt.is_int(t.dtype) if name == "seq_lens" else t.dtype == xp.dtype
            if t.shape != want[name] or not ok:
                raise OpTypeError(f"{op}: input {name} must be {want[name]} of "
                                  f"{'an integer type' if name == 'seq_lens' else xp.dtype}, got {t.shape} {t.dtype}")
        y = (steps, d, batch, hidden) if attrs["layout"] == 0 else (batch, steps, d, hidden)
        return [TensorType(y, xp.dtype)] + [state] * (2 if op == "lstm" else 1)

    return infer


def _reference(op: str):
    def reference(inputs, attrs):
        gates, acts, _ = CELLS[op]
        xp, rt = np.asarray(inputs[0], np.float64), unpack(np.asarray(inputs[1], np.float64))
        given = {k: np.asarray(v, np.int64 if k == "seq_lens" else np.float64)
                 for k, v in zip(attrs["given"], inputs[2:])}
        layout1 = attrs["layout"] == 1
        if layout1:
            xp = xp.swapaxes(0, 1)
        steps, batch, _ = xp.shape
        dirs, hidden = rt.shape[:2]
        lens = given.get("seq_lens", np.full(batch, steps))
        states = [(given[k].swapaxes(0, 1) if layout1 else given[k]) if k in given else np.zeros((dirs, batch, hidden))
                  for k in ("h0", "c0")]
        h_all, c_all = (s.copy() for s in states)
        y = np.zeros((steps, dirs, batch, hidden))
        m = numpy_math()
        clip = clipper(attrs["clip"], m)
        rows = np.arange(batch)
        for d in range(dirs):
            reverse = attrs["direction"] == "reverse" or d == 1
            fs = [activation(a, m) for a in attrs["activations"][d * acts:(d + 1) * acts]]
            r = rt[d]
            h, c = h_all[d], c_all[d]
            for s in range(steps):
                valid = (s < lens)[:, None]
                t = (lens - 1 - s).clip(0, steps - 1) if reverse else np.full(batch, s)
                x = xp[t, rows, d * gates * hidden:(d + 1) * gates * hidden]
                pre = np.split(x, gates, axis=1)
                if op == "gru":
                    ghr = h @ r[:, :2 * hidden]
                    z, rr = fs[0](clip(pre[0] + ghr[:, :hidden])), fs[0](clip(pre[1] + ghr[:, hidden:]))
                    if attrs["linear_before_reset"]:
                        hh = fs[1](clip(pre[2] + rr * (h @ r[:, 2 * hidden:] + given["rbh"][d])))
                    else:
                        hh = fs[1](clip(pre[2] + (rr * h) @ r[:, 2 * hidden:]))
                    h_new, c_new = gru_cell(z, hh, h), c
                else:
                    a = np.split(x + h @ r, gates, axis=1)
                    if op == "lstm":
                        peep = np.split(given["p"][d], 3) if "p" in given else None
                        h_new, c_new = lstm_cell(a, c, peep, *fs, clip, attrs["input_forget"])
                    else:
                        h_new, c_new = fs[0](clip(a[0])), c
                y[np.where(valid[:, 0], t, s), d, rows] = np.where(valid, h_new, 0.0)
                h, c = np.where(valid, h_new, h), np.where(valid, c_new, c)
            empty = (lens <= 0)[:, None]  # ends with zero states, as in ONNX Runtime
            h_all[d], c_all[d] = np.where(empty, 0.0, h), np.where(empty, 0.0, c)
        if layout1:
            y, h_all, c_all = y.transpose(2, 0, 1, 3), h_all.swapaxes(0, 1), c_all.swapaxes(0, 1)
        outs = [y, h_all] + ([c_all] if op == "lstm" else [])
        return [np.ascontiguousarray(o).astype(inputs[0].dtype) for o in outs]

    return reference


def _compute(op: str):
    def compute(inputs, attrs, out_types):
        types = [(te_shape(t, inputs), t.dtype) for t in out_types]
        return te.extern(types, inputs, lambda ins, outs: recurrence(op, attrs, ins, outs), name=op)

    return compute


for _op, (_gates, _acts, _optional) in CELLS.items():
    _extra = {"lstm": {"input_forget": False}, "gru": {"linear_before_reset": False}, "rnn": {}}[_op]
    register(OpDef(
        name=_op,
        infer=_infer(_op),
        reference=_reference(_op),
        compute=_compute(_op),
        pattern="opaque",
        attrs={"direction": "forward", "activations": REQUIRED, "clip": None, "layout": 0, "given": (), **_extra},
        num_inputs=(2, 2 + len(_optional)),
        doc=f"One {_op} layer over a sequence from its projected input xp and packed recurrence weights rp "
            f"(optional: {', '.join(_optional)}); the time loop runs inside one kernel.",
    ))

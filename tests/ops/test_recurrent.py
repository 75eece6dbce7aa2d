"""lstm, gru and rnn (ember.ops.recurrent): the kernel, with its time loop inside, against the
NumPy reference for every attribute, on C and on the loop-IR interpreter; symbolic sequence
length and batch; the errors of bad attributes."""

import numpy as np
import pytest

from ember.graph.core import TensorType
from ember.ops.recurrent import CELLS, pack, unpack
from ember.ops.registry import OpTypeError, infer_types
from ember.testing import check_op, check_op_sizes

RTOL, ATOL = 1e-4, 1e-5
SIG, TANH = ("Sigmoid", 0.0, 0.0), ("Tanh", 0.0, 0.0)
DEFAULTS = {"lstm": (SIG, TANH, TANH), "gru": (SIG, TANH), "rnn": (TANH,)}


def inputs(op, rng, steps=5, batch=3, hidden=8, dirs=1, layout=0, given=()):
    gates = CELLS[op][0]
    xp = rng.standard_normal((steps, batch, dirs * gates * hidden) if layout == 0 else
                             (batch, steps, dirs * gates * hidden)).astype("float32")
    rp = pack((rng.standard_normal((dirs, gates * hidden, hidden)) / np.sqrt(hidden)).astype("float32"))
    state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    make = {"seq_lens": lambda: rng.integers(0, steps + 1, batch).astype("int32"),
            "h0": lambda: rng.standard_normal(state).astype("float32"),
            "c0": lambda: rng.standard_normal(state).astype("float32"),
            "p": lambda: rng.standard_normal((dirs, 3 * hidden)).astype("float32"),
            "rbh": lambda: rng.standard_normal((dirs, hidden)).astype("float32")}
    return [xp, rp] + [make[g]() for g in given]


def attrs(op, direction="forward", given=(), activations=None, **extra):
    dirs = 2 if direction == "bidirectional" else 1
    out = {"direction": direction, "activations": (activations or DEFAULTS[op]) * dirs, "given": given, **extra}
    if op == "gru":
        out.setdefault("linear_before_reset", "rbh" in given)
    return out


CASES = [
    ("lstm", {}, {}),
    ("lstm", {"direction": "reverse", "given": ("seq_lens", "h0", "c0")}, {}),
    ("lstm", {"direction": "bidirectional", "given": ("seq_lens", "h0", "c0", "p"), "clip": 0.8}, {}),
    ("lstm", {"direction": "bidirectional", "layout": 1, "given": ("h0", "p"), "input_forget": True}, {}),
    ("lstm", {"activations": (("HardSigmoid", 0.3, 0.4), ("LeakyRelu", 0.1, 0.0), ("ScaledTanh", 0.9, 1.3))}, {}),
    ("lstm", {"given": ("seq_lens",)}, {"hidden": 20, "batch": 16}),  # blocks of 4 units, of several rows
    ("gru", {"direction": "bidirectional", "given": ("seq_lens", "h0")}, {}),
    ("gru", {"direction": "reverse", "given": ("h0", "rbh"), "clip": 0.5, "layout": 1}, {}),
    ("gru", {"activations": (("Elu", 0.7, 0.0), ("Softplus", 0.0, 0.0))}, {"hidden": 3}),
    ("rnn", {"direction": "bidirectional", "given": ("seq_lens", "h0")}, {"hidden": 5}),
    ("rnn", {"activations": (("Affine", 0.5, 0.2),), "layout": 1}, {}),
    ("rnn", {"activations": (("Relu", 0.0, 0.0),), "clip": 1.5}, {}),
    # steps large enough for the parallel loop (PARALLEL_MIN_MACS), in both phases of the gru
    ("lstm", {"direction": "bidirectional", "given": ("seq_lens", "h0", "c0")},
     {"hidden": 64, "batch": 16, "steps": 3}),
    ("gru", {"direction": "bidirectional", "given": ("seq_lens", "h0")}, {"hidden": 64, "batch": 32, "steps": 3}),
]


@pytest.mark.parametrize(("op", "kw", "sizes"), CASES, ids=[f"{op}-{k}" for k, (op, *_) in enumerate(CASES)])
def test_kernel_matches_reference(op, kw, sizes):
    rng = np.random.default_rng(len(str(kw)))
    dirs = 2 if kw.get("direction") == "bidirectional" else 1
    xs = inputs(op, rng, dirs=dirs, layout=kw.get("layout", 0), given=kw.get("given", ()), **sizes)
    check_op(op, xs, attrs(op, **kw), RTOL, ATOL)


def test_interpreter_agrees():
    """The loop-IR interpreter, the oracle of the loop IR, runs the same kernel to the same result."""
    op, kw = "gru", {"direction": "bidirectional", "given": ("seq_lens", "h0")}
    xs = inputs(op, np.random.default_rng(3), steps=3, batch=2, hidden=4, dirs=2, given=kw["given"])
    check_op(op, xs, attrs(op, **kw), RTOL, ATOL, targets=("c", "python"))


def test_symbolic_sequence_and_batch():
    """One kernel for every sequence length and batch size."""
    rng = np.random.default_rng(4)
    kw = {"direction": "bidirectional", "given": ("seq_lens", "h0", "c0")}
    types = [TensorType(("t", "n", 64), "float32"), TensorType((2, 1, 8, 4, 8), "float32"), TensorType(("n",), "int32"),
             TensorType((2, "n", 8), "float32"), TensorType((2, "n", 8), "float32")]
    sets = [inputs("lstm", rng, steps=t, batch=n, dirs=2, given=kw["given"]) for t, n in ((5, 3), (2, 1), (7, 4))]
    check_op_sizes("lstm", types, attrs("lstm", **kw), sets, RTOL, ATOL)


def test_states_are_held_past_each_sequence():
    """A sequence of length 0 gives zeros, its final state too (as ONNX Runtime); the reverse
    direction of a short sequence starts at its own last element."""
    rng = np.random.default_rng(5)
    xs = inputs("rnn", rng, steps=4, batch=2, hidden=4, dirs=2, given=("seq_lens", "h0"))
    xs[2] = np.array([0, 2], "int32")
    y, y_h = check_op("rnn", xs, attrs("rnn", direction="bidirectional", given=("seq_lens", "h0")), RTOL, ATOL)
    np.testing.assert_array_equal(y[:, :, 0], 0)
    np.testing.assert_array_equal(y_h[:, 0], 0)
    np.testing.assert_array_equal(y[2:, :, 1], 0)
    first = np.tanh(xs[0][1, 1, 4:] + xs[3][1, 1] @ unpack(xs[1])[1])  # reverse: step 0 reads element 1
    np.testing.assert_allclose(y[1, 1, 1], first, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(("kw", "message"), [
    ({"direction": "sideways"}, "direction must be one of"),
    ({"activations": (("Swish", 0.0, 0.0),) * 3}, "activations must be 3"),
    ({"given": ("c0", "h0")}, "in that order"),
    ({"clip": -1.0}, "clip must be None or a number >= 0"),
])
def test_bad_attributes_are_named(kw, message):
    xs = inputs("lstm", np.random.default_rng(6), given=kw.get("given", ()))
    with pytest.raises(OpTypeError, match=message):
        infer_types("lstm", [TensorType(x.shape, x.dtype.name) for x in xs], {**attrs("lstm"), **kw})


def test_mismatched_weights_are_named():
    xs = inputs("gru", np.random.default_rng(7))
    types = [TensorType(xs[0].shape, "float32"), TensorType((1, 1, 8, 3, 4), "float32")]
    with pytest.raises(OpTypeError, match=r"rp must be \(1, 1, 8, 3, 8\)"):
        infer_types("gru", types, attrs("gru"))


@pytest.mark.parametrize("hidden", [16, 18])  # vectors of 16 units; blocks of 9 units, scalar loops
def test_float64(hidden):
    rng = np.random.default_rng(hidden)
    xp = rng.standard_normal((4, 2, 4 * hidden))
    rp = pack(rng.standard_normal((1, 4 * hidden, hidden)) / np.sqrt(hidden))
    c0 = rng.standard_normal((1, 2, hidden))
    check_op("lstm", [xp, rp, c0], attrs("lstm", given=("c0",)), 1e-10, 1e-12)

"""ONNX LSTM, GRU and RNN through ember.compile, one node per attribute combination, against
ONNX Runtime (which implements every attribute, but only layout 0) and against onnx's
ReferenceEvaluator for layout 1 (it ignores activations, clip, seq_lens and input_forget, so
those are checked against ONNX Runtime). Each model holds all its nodes, compiled once."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import ember
from ember.frontend.onnx import import_onnx
from ember.ops.registry import UnsupportedOpError
from ember.testing import assert_close

RTOL, ATOL = 1e-4, 1e-5
STEPS, BATCH, INPUT, HIDDEN = 5, 3, 6, 8
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}

ORT_CASES = [
    ("LSTM", {}),
    ("LSTM", {"direction": "reverse", "h0": True, "c0": True}),
    ("LSTM", {"direction": "bidirectional", "seq": True, "h0": True, "c0": True, "p": True}),
    ("LSTM", {"bias": False, "clip": 0.7}),
    ("LSTM", {"p": True, "clip": 0.5, "input_forget": 1, "seq": True}),
    ("LSTM", {"activations": ["HardSigmoid", "Tanh", "Softsign"], "activation_alpha": [0.3],
              "activation_beta": [0.4]}),
    ("LSTM", {"direction": "bidirectional", "activations": ["Sigmoid", "LeakyRelu", "ScaledTanh"] * 2,
              "activation_alpha": [0.1, 0.9, 0.2, 1.1], "activation_beta": [1.3, 0.8]}),
    ("LSTM", {"activations": ["Sigmoid", "Elu", "Softplus"], "activation_alpha": [0.7]}),
    ("LSTM", {"activations": ["Sigmoid", "Affine", "ThresholdedRelu"], "activation_alpha": [0.5, 0.2],
              "activation_beta": [0.3]}),
    ("GRU", {}),
    ("GRU", {"linear_before_reset": 1}),
    ("GRU", {"linear_before_reset": 1, "direction": "bidirectional", "seq": True, "h0": True}),
    ("GRU", {"direction": "reverse", "seq": True, "clip": 0.6}),
    ("GRU", {"linear_before_reset": 1, "bias": False}),
    ("GRU", {"activations": ["HardSigmoid", "Relu"], "activation_alpha": [0.25], "activation_beta": [0.45]}),
    ("RNN", {}),
    ("RNN", {"direction": "bidirectional", "seq": True, "h0": True}),
    ("RNN", {"activations": ["Relu"], "clip": 2.0}),
    ("RNN", {"direction": "reverse", "activations": ["Affine"], "activation_alpha": [0.5],
             "activation_beta": [0.2]}),
]
REFERENCE_CASES = [  # layout 1, with what the ReferenceEvaluator implements
    ("LSTM", {"layout": 1}),
    ("LSTM", {"layout": 1, "direction": "bidirectional", "h0": True, "c0": True, "p": True}),
    ("GRU", {"layout": 1, "direction": "reverse", "h0": True}),
    ("GRU", {"layout": 1, "linear_before_reset": 1}),
    ("RNN", {"layout": 1, "direction": "bidirectional", "h0": True}),
]


def add_node(k, op, rng, nodes, inits, outputs, *, layout=0, direction="forward", bias=True, seq=False,
             h0=False, c0=False, p=False, **attrs):
    """Node k of op type `op` reading X (layout 0) or XB (layout 1), its weights as initializers."""
    dirs, g = 2 if direction == "bidirectional" else 1, GATES[op]
    state = (dirs, BATCH, HIDDEN) if layout == 0 else (BATCH, dirs, HIDDEN)
    arrays = {"W": rng.uniform(-0.5, 0.5, (dirs, g * HIDDEN, INPUT)),
              "R": rng.uniform(-0.5, 0.5, (dirs, g * HIDDEN, HIDDEN)),
              "B": rng.uniform(-1, 1, (dirs, 2 * g * HIDDEN)) if bias else None,
              "S": rng.integers(0, STEPS + 1, BATCH).astype("int32") if seq else None,
              "H0": rng.uniform(-1, 1, state) if h0 else None}
    if op == "LSTM":
        arrays.update(C0=rng.uniform(-1, 1, state) if c0 else None, P=rng.uniform(-1, 1, (dirs, 3 * HIDDEN)) if p
                      else None)
    names = ["X" if layout == 0 else "XB"]
    for name, a in arrays.items():
        names.append("" if a is None else f"{name}{k}")
        if a is not None:
            inits.append(onnx.numpy_helper.from_array(a if a.dtype.kind == "i" else a.astype("float32"), f"{name}{k}"))
    while names[-1] == "":
        names.pop()
    outs = [f"Y{k}", f"Yh{k}"] + ([f"Yc{k}"] if op == "LSTM" else [])
    y = (STEPS, dirs, BATCH, HIDDEN) if layout == 0 else (BATCH, STEPS, dirs, HIDDEN)
    nodes.append(helper.make_node(op, names, outs, hidden_size=HIDDEN, direction=direction, layout=layout, **attrs))
    outputs += [helper.make_tensor_value_info(o, TensorProto.FLOAT, s) for o, s in zip(outs, [y, state, state])]


def model(cases, layout, seed) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits, outputs = [], [], []
    for k, (op, kw) in enumerate(cases):
        add_node(k, op, rng, nodes, inits, outputs, **kw)
    x = helper.make_tensor_value_info("X" if layout == 0 else "XB", TensorProto.FLOAT,
                                      (STEPS, BATCH, INPUT) if layout == 0 else (BATCH, STEPS, INPUT))
    m = helper.make_model(helper.make_graph(nodes, "recurrent", [x], outputs, inits),
                          opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


@pytest.fixture(scope="module")
def ort_model():
    m = model(ORT_CASES, 0, seed=1)
    return m, ember.compile(m)


@pytest.fixture(scope="module")
def reference_model():
    m = model(REFERENCE_CASES, 1, seed=2)
    return m, ember.compile(m)


def _outputs(compiled, x):
    out = compiled(x)
    return out if isinstance(out, list | tuple) else [out]


@pytest.mark.parametrize("k", range(len(ORT_CASES)), ids=[f"{op}{kw}" for op, kw in ORT_CASES])
def test_against_onnxruntime(ort_model, k):
    m, compiled = ort_model
    x = np.random.default_rng(10 + k).uniform(-2, 2, (STEPS, BATCH, INPUT)).astype("float32")
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in m.graph.output]
    expected = dict(zip(names, session.run(None, {"X": x})))
    actual = dict(zip(names, _outputs(compiled, x)))
    for name in names:
        if name[1:].lstrip("hc") == str(k):
            assert_close(actual[name], expected[name], RTOL, ATOL, f"{name} of {ORT_CASES[k]}")


def test_against_reference_evaluator(reference_model):
    m, compiled = reference_model
    x = np.random.default_rng(20).uniform(-2, 2, (BATCH, STEPS, INPUT)).astype("float32")
    expected = ReferenceEvaluator(m).run(None, {"XB": x})
    for name, a, e in zip([o.name for o in m.graph.output], _outputs(compiled, x), expected):
        assert_close(a, e, RTOL, ATOL, f"{name} (layout 1)")


def test_unknown_activation_is_named():
    m = model([("RNN", {"activations": ["Swish"]})], 0, seed=3)
    with pytest.raises(UnsupportedOpError, match="activation Swish"):
        import_onnx(m)


def test_projection_is_one_matmul_over_all_steps():
    """The input projection is one matmul of (T*B, I) rows, hoisted out of the recurrence, and
    constant weights are folded at import (no transpose or slice left in the graph)."""
    graph = import_onnx(model([("LSTM", {"direction": "bidirectional"})], 0, seed=4))
    ops = [n.op for n in graph.nodes]
    assert ops.count("matmul") == 1 and ops.count("lstm") == 1
    assert "transpose" not in ops and "slice" not in ops
    (mm,) = [n for n in graph.nodes if n.op == "matmul"]
    assert mm.outputs[0].shape == (STEPS * BATCH, 2 * 4 * HIDDEN)


def test_weights_given_at_run_time():
    """W, R and B as graph inputs: the projection and the packing of R run as kernels."""
    dirs, g = 2, GATES["GRU"]
    node = helper.make_node("GRU", ["X", "W", "R", "B"], ["Y", "Yh"], hidden_size=HIDDEN, direction="bidirectional",
                            linear_before_reset=1)
    shapes = {"X": (STEPS, BATCH, INPUT), "W": (dirs, g * HIDDEN, INPUT), "R": (dirs, g * HIDDEN, HIDDEN),
              "B": (dirs, 2 * g * HIDDEN)}
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()]
    outputs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (STEPS, dirs, BATCH, HIDDEN)),
               helper.make_tensor_value_info("Yh", TensorProto.FLOAT, (dirs, BATCH, HIDDEN))]
    m = helper.make_model(helper.make_graph([node], "gru", inputs, outputs),
                          opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    rng = np.random.default_rng(30)
    feed = {n: rng.uniform(-0.5, 0.5, s).astype("float32") for n, s in shapes.items()}
    expected = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    for name, a, e in zip(("Y", "Yh"), ember.compile(m)(*feed.values()), expected):
        assert_close(a, e, RTOL, ATOL, name)

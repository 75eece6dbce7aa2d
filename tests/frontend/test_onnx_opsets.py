"""ONNX models of every opset: the older forms of operators (attributes where newer versions take
inputs), function operators (converted to one ember operator, or expanded from their ONNX
bodies), and the converter table's version ranges; each model on fresh random data against
onnx's ReferenceEvaluator, and the old forms also against onnxruntime (the ReferenceEvaluator
runs Softmax-1 with Softmax-13's semantics, and has no Upsample-7 nor Resize-10)."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import ember
from ember.frontend.onnx import MAX_OPSET, import_onnx, registry
from ember.frontend.onnx.node import Importer, NodeContext
from ember.graph.core import Graph
from ember.ops import UnsupportedOpError
from ember.ops.evaluate import evaluate

RTOL, ATOL = 1e-5, 1e-6
F = TensorProto.FLOAT


@pytest.fixture
def rng():
    return np.random.default_rng()


def model_of(nodes, inputs, outputs, opset, initializers=()):
    """A checked model of these nodes; inputs and outputs as (name, shape) of float tensors,
    initializers as (name, array)."""
    declared = [helper.make_tensor_value_info(n, F, s) for n, s in inputs]
    declared += [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                 for n, a in initializers]  # (before IR 4 an initializer is an input too)
    graph = helper.make_graph(nodes, "g", declared,
                              [helper.make_tensor_value_info(n, F, s) for n, s in outputs],
                              [onnx.numpy_helper.from_array(a, n) for n, a in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
    onnx.checker.check_model(model)
    return model


def data(rng, *shapes):
    return [rng.uniform(-2.0, 2.0, s).astype("float32") for s in shapes]


def reference(model, inputs, runtime=False):
    """The outputs of onnx's ReferenceEvaluator, or of onnxruntime."""
    feeds = dict(zip([i.name for i in model.graph.input], inputs))
    if runtime:
        return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return ReferenceEvaluator(model).run(None, feeds)


def check_evaluated(model, inputs, rtol=RTOL, atol=ATOL, runtime=False):
    expected = reference(model, inputs, runtime)
    actual = evaluate(import_onnx(model), *inputs)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)


# -- older forms, each on the reference evaluator ------------------------------------------

OLD_FORMS = {  # name: (nodes, input shapes, output shapes, opset)
    "slice_1": ([helper.make_node("Slice", ["x"], ["y"], starts=[1, 0], ends=[3, -1], axes=[0, 2])],
                [(4, 3, 5)], [(2, 3, 4)], 9),
    "pad_2_reflect": ([helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 2, 0, 2, 1], mode="reflect")],
                      [(2, 4, 5)], [(2, 7, 8)], 9),
    "pad_2_constant": ([helper.make_node("Pad", ["x"], ["y"], pads=[1, 0, 0, 1], value=1.5)],
                       [(2, 3)], [(3, 4)], 7),
    "clip_6": ([helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=1.0)], [(3, 4)], [(3, 4)], 9),
    "clip_6_default_bounds": ([helper.make_node("Clip", ["x"], ["y"], max=0.25)], [(3, 4)], [(3, 4)], 7),
    "reduce_mean_11": ([helper.make_node("ReduceMean", ["x"], ["y"], axes=[1, -1], keepdims=0)],
                       [(2, 3, 4)], [(2,)], 11),
    "reduce_sum_11": ([helper.make_node("ReduceSum", ["x"], ["y"], axes=[0])], [(2, 3)], [(1, 3)], 11),
    "reduce_max_9": ([helper.make_node("ReduceMax", ["x"], ["y"])], [(2, 3)], [(1, 1)], 9),
    "reduce_log_sum_exp_17": ([helper.make_node("ReduceLogSumExp", ["x"], ["y"], axes=[1])],
                              [(2, 3)], [(2, 1)], 17),
    "squeeze_unsqueeze_11": ([helper.make_node("Squeeze", ["x"], ["s"], axes=[1]),
                              helper.make_node("Unsqueeze", ["s"], ["y"], axes=[0, -1])],
                             [(2, 1, 3)], [(1, 2, 3, 1)], 11),
    "split_2": ([helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[1, 3])],
                [(2, 4)], [(2, 1), (2, 3)], 9),
    "softmax_1_flattens": ([helper.make_node("Softmax", ["x"], ["y"], axis=1)], [(2, 3, 4)], [(2, 3, 4)], 9),
    "log_softmax_1_default_axis": ([helper.make_node("LogSoftmax", ["x"], ["y"])], [(2, 3, 4)], [(2, 3, 4)], 11),
    "upsample_7_nearest": ([helper.make_node("Upsample", ["x"], ["y"], scales=[1.0, 1.0, 2.0, 3.0])],
                           [(1, 2, 2, 3)], [(1, 2, 4, 9)], 7),
}


REFERENCE_LACKS = {"softmax_1_flattens", "log_softmax_1_default_axis", "upsample_7_nearest"}


@pytest.mark.parametrize("name", OLD_FORMS)
def test_old_form(rng, name):
    nodes, ins, outs, opset = OLD_FORMS[name]
    model = model_of(nodes, [(f"x{k}" if k else "x", s) for k, s in enumerate(ins)],
                     list(zip(nodes[-1].output, outs)), opset)
    inputs = data(rng, *ins)
    check_evaluated(model, inputs, runtime=True)
    if name not in REFERENCE_LACKS:
        check_evaluated(model, inputs)


def test_dropout_7_gives_its_mask_in_the_input_type(rng):
    """Inference keeps every element: a mask of ones (float before Dropout-10; onnxruntime gives
    zeros, the ReferenceEvaluator a bool mask)."""
    model = model_of([helper.make_node("Dropout", ["x"], ["y", "m"], ratio=0.3)], [("x", (2, 3))],
                     [("y", (2, 3)), ("m", (2, 3))], 7)
    (x,) = data(rng, (2, 3))
    y, mask = evaluate(import_onnx(model), x)
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.float32 and (mask == 1).all()


def test_upsample_9_and_resize_10_are_asymmetric_nearest(rng):
    scales = np.array([1.0, 1.0, 2.0, 2.0], dtype="float32")
    for op, opset in (("Upsample", 9), ("Resize", 10)):
        model = model_of([helper.make_node(op, ["x", "scales"], ["y"])], [("x", (1, 2, 3, 2))],
                         [("y", (1, 2, 6, 4))], opset, [("scales", scales)])
        check_evaluated(model, data(rng, (1, 2, 3, 2)), runtime=True)


def test_batch_normalization_7(rng):
    c = 3
    params = [("s", rng.uniform(0.5, 1.5, c)), ("b", rng.uniform(-1, 1, c)), ("m", rng.uniform(-1, 1, c)),
              ("v", rng.uniform(0.5, 1.5, c))]
    model = model_of([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)],
                     [("x", (2, c, 4, 4))], [("y", (2, c, 4, 4))], 7,
                     [(n, a.astype("float32")) for n, a in params])
    check_evaluated(model, data(rng, (2, c, 4, 4)), rtol=1e-4, atol=1e-5, runtime=True)


@pytest.fixture(scope="module")
def compiled_opset_9():
    """One compiled model of opset 9 that chains old forms: Slice-1, Pad-2, Clip-6, Upsample-9,
    ReduceMean-1 with attribute axes, Softmax-1 over the flattened trailing dimensions."""
    nodes = [helper.make_node("Slice", ["x"], ["a"], starts=[0, 1], ends=[1, 5], axes=[1, 3]),
             helper.make_node("Pad", ["a"], ["b"], pads=[0, 0, 1, 0, 0, 0, 0, 1], mode="edge"),
             helper.make_node("Clip", ["b"], ["c"], min=-1.0, max=1.5),
             helper.make_node("Upsample", ["c", "scales"], ["d"], mode="nearest"),
             helper.make_node("ReduceMean", ["d"], ["e"], axes=[3], keepdims=1),
             helper.make_node("Softmax", ["e"], ["y"], axis=2)]
    scales = np.array([1, 1, 2, 1], dtype="float32")
    model = model_of(nodes, [("x", (2, 3, 4, 6))], [("y", (2, 1, 10, 1))], 9, [("scales", scales)])
    return model, ember.compile(model)


def test_compiled_opset_9_model(rng, compiled_opset_9):
    model, compiled = compiled_opset_9
    (x,) = data(rng, (2, 3, 4, 6))
    (expected,) = reference(model, [x], runtime=True)  # (Softmax-1)
    np.testing.assert_allclose(np.asarray(compiled(x)), expected, rtol=RTOL, atol=ATOL)


def test_compiled_opset_7_and_11_models(rng):
    """Upsample-7 (scales as an attribute), ReduceSum-1 and Squeeze-1 (axes as attributes);
    ReduceSum-11, Unsqueeze-11, Softmax-11 over the flattened trailing dimensions."""
    for nodes, opset, shape in (
        ([helper.make_node("Upsample", ["x"], ["u"], scales=[1.0, 1.0, 2.0, 2.0]),
          helper.make_node("ReduceSum", ["u"], ["s"], axes=[1], keepdims=1),
          helper.make_node("Squeeze", ["s"], ["y"], axes=[1])], 7, (1, 4, 4)),
        ([helper.make_node("ReduceSum", ["x"], ["s"], axes=[1], keepdims=0),
          helper.make_node("Unsqueeze", ["s"], ["u"], axes=[1]),
          helper.make_node("Softmax", ["u"], ["y"], axis=1)], 11, (1, 1, 2, 2)),
    ):
        model = model_of(nodes, [("x", (1, 3, 2, 2))], [("y", shape)], opset)
        (x,) = data(rng, (1, 3, 2, 2))
        (expected,) = reference(model, [x], runtime=True)  # (Upsample-7, Softmax-11)
        np.testing.assert_allclose(np.asarray(ember.compile(model)(x)), expected, rtol=RTOL, atol=ATOL)


# -- function operators, expanded from their ONNX function bodies ---------------------------


@pytest.mark.parametrize("axis, scale_shape", [(-1, (8,)), (1, (3, 8)), (1, (1, 8))])
def test_rms_normalization_23_is_rms_norm(rng, axis, scale_shape):
    model = model_of([helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=axis, epsilon=1e-5)],
                     [("x", (2, 3, 8))], [("y", (2, 3, 8))], 23, [("scale", data(rng, scale_shape)[0])])
    assert "rms_norm" in {n.op for n in import_onnx(model).nodes}
    check_evaluated(model, data(rng, (2, 3, 8)), rtol=1e-5, atol=1e-5)


def test_rotary_embedding_23_expands(rng):
    b, heads, seq, dim = 2, 2, 3, 8
    model = model_of([helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"])],
                     [("x", (b, heads, seq, dim)), ("cos", (b, seq, dim // 2)), ("sin", (b, seq, dim // 2))],
                     [("y", (b, heads, seq, dim))], 23)
    check_evaluated(model, data(rng, (b, heads, seq, dim), (b, seq, dim // 2), (b, seq, dim // 2)))


def test_attention_23_is_sdpa_and_compiles(rng):
    b, heads, seq, dim = 1, 2, 4, 8
    shape = (b, heads, seq, dim)
    model = model_of([helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)],
                     [("q", shape), ("k", shape), ("v", shape)], [("y", shape)], 23)
    assert [n.op for n in import_onnx(model).nodes] == ["scaled_dot_product_attention"]
    inputs = data(rng, shape, shape, shape)
    check_evaluated(model, inputs, rtol=1e-5, atol=1e-5)
    (expected,) = reference(model, inputs)
    np.testing.assert_allclose(np.asarray(ember.compile(model)(*inputs)), expected, rtol=1e-5, atol=1e-5)


def test_attention_23_of_grouped_heads_expands(rng):
    """Two query heads per key head (q_num_heads 4, kv_num_heads 2, 3-D inputs): ONNX's body."""
    b, seq, dim = 2, 3, 4
    model = model_of([helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], q_num_heads=4, kv_num_heads=2)],
                     [("q", (b, seq, 4 * dim)), ("k", (b, 5, 2 * dim)), ("v", (b, 5, 2 * dim)), ("mask", (seq, 5))],
                     [("y", (b, seq, 4 * dim))], 23)
    assert "scaled_dot_product_attention" not in {n.op for n in import_onnx(model).nodes}
    check_evaluated(model, data(rng, (b, seq, 4 * dim), (b, 5, 2 * dim), (b, 5, 2 * dim), (seq, 5)),
                    rtol=1e-5, atol=1e-5)


# -- the table of converters: version ranges ------------------------------------------------


@pytest.fixture
def table(monkeypatch):
    monkeypatch.setattr(registry, "CONVERTERS", {})
    return registry


def test_ranged_converter_takes_precedence_over_the_plain_one(table):
    def plain(cx): ...
    def old(cx): ...
    table.converts("Op")(plain)
    table.converts("Op", versions=range(1, 10))(old)
    assert table.lookup("Op", 1) is old and table.lookup("Op", 9) is old
    assert table.lookup("Op", 10) is plain and table.lookup("Op", MAX_OPSET) is plain
    assert table.lookup("Other", 1) is None


def test_overlapping_ranges_are_refused(table):
    table.converts("Op", versions=range(1, 10))(lambda cx: [])
    table.converts("Op", versions=range(10, 13))(lambda cx: [])  # adjacent: fine
    with pytest.raises(ValueError, match="Op has two converters for versions 1 to 9 and 5 to 10"):
        table.converts("Op", versions=range(5, 11))(lambda cx: [])
    table.converts("Op")(lambda cx: [])
    with pytest.raises(ValueError, match="Op has two converters for versions all and all"):
        table.converts("Op")(lambda cx: [])


def test_operator_version_without_converter_is_named_per_node(table):
    """A version ember lacks is listed as Op-version, with the node, among the other unsupported
    ops (an op ember has no converter for at all by its name alone)."""
    table.converts("Relu", versions=range(13, 1 << 30))(lambda cx: [cx.op("relu", [cx.input(0)])])
    model = model_of([helper.make_node("Relu", ["x"], ["r"], name="old_relu"),
                      helper.make_node("Abs", ["x"], ["y"], name="abs")], [("x", (2,))], [("r", (2,)), ("y", (2,))], 11)
    with pytest.raises(UnsupportedOpError, match="2 unsupported operator") as e:
        import_onnx(model)
    assert "Relu-6  (at Relu node 'old_relu')" in str(e.value) and "Abs  (at Abs node 'abs')" in str(e.value)


def test_node_context_resolves_the_operator_version():
    node = helper.make_node("Slice", ["x"], ["y"], starts=[0], ends=[1])
    for opset, version in ((9, 1), (10, 10), (12, 11), (MAX_OPSET, 13)):
        cx = NodeContext(Importer(Graph(name="g"), opset), node, [], {})
        assert (cx.opset, cx.version) == (opset, version)


@pytest.mark.parametrize("mask, causal, native", [
    (np.ones((4, 4), bool), 1, True),
    (np.ones((4,), bool), 0, True),  # (broadcast over the queries)
    (np.eye(4, dtype=bool)[::-1], 1, False),  # row 0 keeps key 3 only, which causality masks: zeros, not NaN
])
def test_attention_23_bool_mask(rng, mask, causal, native):
    shape = (1, 2, 4, 8)
    model = model_of([helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], is_causal=causal)],
                     [("q", shape), ("k", shape), ("v", shape)], [("y", shape)], 23, [("mask", mask)])
    ops = {n.op for n in import_onnx(model).nodes}
    assert ("scaled_dot_product_attention" in ops) == native
    check_evaluated(model, data(rng, shape, shape, shape), rtol=1e-5, atol=1e-5)


def test_unsupported_op_inside_a_function_body_is_named_with_its_node(monkeypatch):
    """What ember lacks in an expanded body is listed with the body's node, named after the
    function node it expands."""
    monkeypatch.delitem(registry.CONVERTERS, "Mul")
    shape = (1, 2, 3, 8)
    model = model_of([helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"], name="rope")],
                     [("x", shape), ("cos", (1, 3, 4)), ("sin", (1, 3, 4))], [("y", shape)], 23)
    with pytest.raises(UnsupportedOpError, match=r"1 unsupported operator\(s\): Mul\n  Mul  \(at Mul node "
                                                 r"'rope/RotaryEmbedding/"):
        import_onnx(model)

"""ONNX If, Loop and Scan: built with onnx.helper, imported as ember's `if` and `loop` with their
regions, run on the reference evaluator and compiled (branch choice and iterations in the C entry
function), both checked against onnx's ReferenceEvaluator on fresh random inputs (onnxruntime where
the ReferenceEvaluator lacks the form: Scan's directions)."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import ember
from ember.errors import CompileError
from ember.frontend.onnx import import_onnx
from ember.ops import UnsupportedOpError
from ember.ops.evaluate import evaluate

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RTOL, ATOL = 1e-5, 1e-6


def _model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "main", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _check(model: onnx.ModelProto, compiled, inputs: list[np.ndarray], oracle: str = "reference") -> None:
    feeds = {vi.name: x for vi, x in zip(model.graph.input, inputs)}
    if oracle == "reference":
        expected = ReferenceEvaluator(model).run(None, feeds)
    else:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        expected = session.run(None, feeds)
    graph = import_onnx(model)
    for got in (evaluate(graph, *inputs), compiled(*inputs) if compiled is not None else None):
        if got is None:
            continue
        got = list(got) if isinstance(got, list | tuple) else [got]
        assert len(got) == len(expected)
        for a, e in zip(got, expected):
            assert a.dtype == e.dtype and a.shape == e.shape
            np.testing.assert_allclose(a, e, rtol=RTOL, atol=ATOL)


# -- If ------------------------------------------------------------------------------------------
def if_model() -> onnx.ModelProto:
    """The branches take different paths through different shapes to one output shape: then
    transposes x (3x4 -> 4x3) and adds an outer weight, else flattens the outer value `y` (12) and
    reshapes it back; both capture outer values."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype("float32"), "w")
    shape = numpy_helper.from_array(np.array([3, 4], "int64"), "shape")
    flat = numpy_helper.from_array(np.array([12], "int64"), "flat")
    then = helper.make_graph([
        helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
        helper.make_node("Add", ["xt", "w"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("Transpose", ["r"], ["then_out"], perm=[1, 0]),
    ], "then", [], [_vi("then_out", F, [3, 4])])
    other = helper.make_graph([
        helper.make_node("Reshape", ["y", "flat"], ["yf"]),
        helper.make_node("Sigmoid", ["yf"], ["ys"]),
        helper.make_node("Reshape", ["ys", "shape"], ["else_out"]),
    ], "else", [], [_vi("else_out", F, [3, 4])])
    nodes = [helper.make_node("Mul", ["x", "x"], ["y"]),
             helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other)]
    return _model(nodes, [_vi("x", F, [3, 4]), _vi("c", B, [])], [_vi("out", F, [3, 4])], [w, shape, flat])


@pytest.fixture(scope="module")
def compiled_if():
    return ember.compile(if_model())


@pytest.mark.parametrize("cond", [True, False])
def test_if_takes_each_branch(compiled_if, cond):
    x = np.random.default_rng().standard_normal((3, 4)).astype("float32")
    _check(if_model(), compiled_if, [x, np.array(cond)])


def test_if_captures_outer_values_as_inputs():
    graph = import_onnx(if_model())
    (node,) = [n for n in graph.nodes if n.op == "if"]
    assert [v.name for v in node.inputs[1:]] == ["x", "y"]  # what the branches read from outside
    then, other = node.regions
    assert len(then.inputs) == len(other.inputs) == 2
    assert "w" in then.constants  # an outer initializer becomes the region's own constant


def test_a_weight_both_branches_read_is_stored_once():
    rng = np.random.default_rng()
    w = numpy_helper.from_array(rng.standard_normal((4, 4)).astype("float32"), "w")
    then = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["then_out"])], "then", [],
                             [_vi("then_out", F, [2, 4])])
    other = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["else_out"], transB=1)], "else", [],
                              [_vi("else_out", F, [2, 4])])
    model = _model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                   [_vi("x", F, [2, 4]), _vi("c", B, [])], [_vi("y", F, [2, 4])], [w])
    compiled = ember.compile(model)
    assert len(compiled.spec.weights) == 1
    for cond in (True, False):
        _check(model, compiled, [rng.standard_normal((2, 4)).astype("float32"), np.array(cond)])


def test_if_on_a_constant_condition_becomes_its_branch():
    model = if_model()
    model.graph.initializer.append(numpy_helper.from_array(np.array(False), "c"))
    del model.graph.input[1]
    compiled = ember.compile(model)
    assert all(not n.regions for n in compiled.graph.nodes)
    x = np.random.default_rng().standard_normal((3, 4)).astype("float32")
    _check(model, compiled, [x])


def test_if_on_a_constant_condition_at_import_converts_only_its_branch():
    """`Size(x) == 4` folds at import: the then branch is converted in place (its shape arithmetic
    stays constant), the else branch, invalid for this x, never is."""
    four = numpy_helper.from_array(np.array(4, "int64"), "four")
    five = numpy_helper.from_array(np.array([5], "int64"), "five")
    then = helper.make_graph([helper.make_node("Shape", ["x"], ["shape"]),
                              helper.make_node("Reshape", ["x", "shape"], ["then_out"])],
                             "then", [], [_vi("then_out", F, [4])])
    other = helper.make_graph([helper.make_node("Reshape", ["x", "five"], ["else_out"])],
                              "else", [], [_vi("else_out", F, [4])])
    nodes = [helper.make_node("Size", ["x"], ["n"]), helper.make_node("Equal", ["n", "four"], ["is4"]),
             helper.make_node("If", ["is4"], ["y"], then_branch=then, else_branch=other),
             helper.make_node("Relu", ["y"], ["out"])]
    model = _model(nodes, [_vi("x", F, [4])], [_vi("out", F, [4])], [four, five])
    graph = import_onnx(model)
    assert all(not n.regions for n in graph.nodes)
    _check(model, None, [np.random.default_rng().standard_normal(4).astype("float32")])


def test_a_subgraph_reading_a_value_that_could_not_be_converted_skips_its_node():
    then = helper.make_graph([helper.make_node("Neg", ["m"], ["then_out"])], "then", [], [_vi("then_out", F, [4])])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["else_out"])], "else", [], [_vi("else_out", F, [4])])
    nodes = [helper.make_node("Mystery", ["x"], ["m"], domain="com.example"),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    graph = helper.make_graph(nodes, "main", [_vi("x", F, [4]), _vi("c", B, [])], [_vi("y", F, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(UnsupportedOpError) as e:
        import_onnx(model)
    assert [op for op, _ in e.value.missing] == ["com.example.Mystery"]


# -- Loop ----------------------------------------------------------------------------------------
def loop_model(trips: int | None = 5, early_exit: bool = False, scan: bool = True) -> onnx.ModelProto:
    """s <- s * 0.5 + x * i (x an outer value, i the iteration number); k <- k + 1; the scan
    output stacks tanh(s). With early_exit the body's condition is sum(s) < 40; with trips None
    the trip count is a graph input."""
    half = numpy_helper.from_array(np.array(0.5, "float32"), "half")
    one = numpy_helper.from_array(np.array(1, "int64"), "one")
    limit = numpy_helper.from_array(np.array(40.0, "float32"), "limit")
    body_nodes = [
        helper.make_node("Cast", ["i"], ["fi"], to=F),
        helper.make_node("Mul", ["x", "fi"], ["xi"]),
        helper.make_node("Mul", ["s_in", "half"], ["sh"]),
        helper.make_node("Add", ["sh", "xi"], ["s_out"]),
        helper.make_node("Add", ["k_in", "one"], ["k_out"]),
    ]
    outs = [_vi("cond_out", B, []), _vi("s_out", F, [4]), _vi("k_out", I64, [])]
    if early_exit:
        body_nodes += [helper.make_node("ReduceSum", ["s_out"], ["total"], keepdims=0),
                       helper.make_node("Less", ["total", "limit"], ["cond_out"])]
    else:
        body_nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    if scan:
        body_nodes.append(helper.make_node("Tanh", ["s_out"], ["scan_out"]))
        outs.append(_vi("scan_out", F, [4]))
    body = helper.make_graph(body_nodes, "body", [_vi("i", I64, []), _vi("cond_in", B, []), _vi("s_in", F, [4]),
                                                  _vi("k_in", I64, [])], outs)
    inits = [half, one, limit, numpy_helper.from_array(np.array(True), "go"),
             numpy_helper.from_array(np.array(0, "int64"), "k0")]
    inputs = [_vi("x", F, [4])]
    if trips is None:
        inputs.append(_vi("n", I64, []))
    else:
        inits.append(numpy_helper.from_array(np.array(trips, "int64"), "n"))
    outputs = [_vi("s", F, [4]), _vi("k", I64, [])] + ([_vi("ys", F, [trips, 4])] if scan else [])
    node = helper.make_node("Loop", ["n", "go", "x", "k0"], ["s", "k", "ys"][:len(outputs)], body=body)
    return _model([node], inputs, outputs, inits)


@pytest.fixture(scope="module")
def compiled_loop():
    return ember.compile(loop_model())


def test_loop_with_carried_values_and_scan_outputs(compiled_loop):
    x = np.random.default_rng().standard_normal(4).astype("float32")
    _check(loop_model(), compiled_loop, [x])


@pytest.fixture(scope="module")
def compiled_while():
    return ember.compile(loop_model(trips=None, early_exit=True, scan=False))


@pytest.mark.parametrize("n", [0, 1, 3, 50])
def test_loop_with_a_runtime_trip_count_and_a_condition(compiled_while, n):
    x = np.random.default_rng().uniform(0.5, 2.0, 4).astype("float32")
    _check(loop_model(trips=None, early_exit=True, scan=False), compiled_while, [x, np.array(n, "int64")])


def test_loop_scan_outputs_of_a_loop_that_may_stop_early_run_on_the_evaluator_only():
    model = loop_model(trips=30, early_exit=True)
    x = np.random.default_rng().uniform(0.5, 2.0, 4).astype("float32")
    _check(model, None, [x])  # fewer than 30 iterations: the scan output's length is known at run time
    with pytest.raises(CompileError, match="scan outputs"):
        ember.compile(model)


def test_loop_whose_carried_value_grows_is_refused_by_name():
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"]),
                              helper.make_node("Concat", ["v_in", "v_in"], ["v_out"], axis=0)],
                             "body", [_vi("i", I64, []), _vi("c_in", B, []), _vi("v_in", F, [2])],
                             [_vi("c_out", B, []), _vi("v_out", F, [None])])
    model = _model([helper.make_node("Loop", ["n", "", "v"], ["out"], body=body)], [_vi("v", F, [2])],
                   [_vi("out", F, [None])], [numpy_helper.from_array(np.array(3, "int64"), "n")])
    with pytest.raises(UnsupportedOpError, match="changes per iteration"):
        import_onnx(model)


# -- Scan ----------------------------------------------------------------------------------------
def scan_model(axis: int, backwards: bool) -> onnx.ModelProto:
    """A running sum over an axis of x (read backwards), with a captured outer scale; the scan
    output (tanh of the sum) stacked along that axis (written from the end)."""
    body = helper.make_graph([
        helper.make_node("Mul", ["xs", "scale"], ["scaled"]),
        helper.make_node("Add", ["acc_in", "scaled"], ["acc_out"]),
        helper.make_node("Tanh", ["acc_out"], ["y"]),
    ], "body", [_vi("acc_in", F, [3, 4]), _vi("xs", F, [3, 4])], [_vi("acc_out", F, [3, 4]), _vi("y", F, [3, 4])])
    nodes = [helper.make_node("Abs", ["x0"], ["scale"]),
             helper.make_node("Scan", ["acc0", "x"], ["acc", "ys"], body=body, num_scan_inputs=1,
                              scan_input_axes=[axis], scan_input_directions=[int(backwards)],
                              scan_output_axes=[axis], scan_output_directions=[int(backwards)])]
    x = [3, 4]
    x.insert(axis, 5)
    return _model(nodes, [_vi("acc0", F, [3, 4]), _vi("x", F, x), _vi("x0", F, [3, 4])],
                  [_vi("acc", F, [3, 4]), _vi("ys", F, x)])


@pytest.mark.parametrize("axis, backwards", [(0, False), (1, True)])
def test_scan_with_axes_and_directions(axis, backwards):
    rng = np.random.default_rng()
    x = [3, 4]
    x.insert(axis, 5)
    inputs = [rng.standard_normal(s).astype("float32") for s in ((3, 4), x, (3, 4))]
    model = scan_model(axis, backwards)
    _check(model, ember.compile(model), inputs, "onnxruntime" if axis or backwards else "reference")

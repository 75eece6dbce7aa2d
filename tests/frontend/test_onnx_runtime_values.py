"""Runtime-valued inputs of ONNX models: a graph input that gives axes, k, pads, scales, repeats, a
shape. ember.compile returns a SpecializedModel that compiles once per value of those inputs
(ember.runtime.specialized), checked against onnx's reference evaluator."""

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

import ember
from ember.errors import ArgumentTypeError, ArtifactError, CompileError, ConfigError
from ember.frontend.onnx import ConstantInputError, OnnxImportError, import_onnx
from ember.frontend.onnx.values import import_specialized
from ember.ops import UnsupportedOpError

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(op: str, inputs: list[tuple[str, int, list]], out_rank: int, opset: int = 18, **attrs) -> onnx.ModelProto:
    g = oh.make_graph([oh.make_node(op, [n for n, _, _ in inputs], ["y"], **attrs)], op.lower(),
                      [oh.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                      [oh.make_tensor_value_info("y", F, [None] * out_rank)])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])


def _i64(*v):
    return np.array(v, np.int64)


# (model, the runtime-valued inputs' values to call it with): each value is called twice
CASES = {
    "reduce_axes": (_model("ReduceSum", [("x", F, [3, 4, 5]), ("axes", I64, [1])], 3, keepdims=1),
                    [(_i64(0),), (_i64(2),), (_i64(-2),)]),
    "trilu_k": (_model("Trilu", [("x", F, [5, 6]), ("k", I64, [])], 2, upper=1), [(np.array(1),), (np.array(-2),)]),
    "pad_pads": (_model("Pad", [("x", F, [3, 4]), ("pads", I64, [4])], 2, mode="reflect"),
                 [(_i64(1, 0, 2, 1),), (_i64(0, 2, 0, 3),)]),
    "resize_scales": (_model("Resize", [("x", F, [1, 2, 3, 4]), ("roi", F, [0]), ("scales", F, [4])], 4,
                             mode="nearest"),
                      [(np.zeros(0, np.float32), np.array([1, 1, 2, 2], np.float32)),
                       (np.zeros(0, np.float32), np.array([1, 1, 3, 1.5], np.float32))]),
    "tile_repeats": (_model("Tile", [("x", F, [2, 3]), ("repeats", I64, [2])], 2), [(_i64(2, 1),), (_i64(1, 3),)]),
    "slice_starts_ends_axes": (
        _model("Slice", [("x", F, [6, 7]), ("starts", I64, [1]), ("ends", I64, [1]), ("axes", I64, [1])], 2),
        [(_i64(1), _i64(5), _i64(0)), (_i64(-4), _i64(100), _i64(1))]),
    "cumsum_axis": (_model("CumSum", [("x", F, [4, 5]), ("axis", I64, [])], 2), [(np.array(0),), (np.array(1),)]),
    "reshape_shape": (_model("Reshape", [("x", F, [4, 6]), ("shape", I64, [3])], 3),
                      [(_i64(2, -1, 3),), (_i64(4, 3, 2),)]),
    "range_inputs": (_model("Range", [("start", F, []), ("limit", F, []), ("delta", F, [])], 1),
                     [tuple(np.array(v, np.float32) for v in t) for t in ((0, 5, 1), (2.5, -1, -0.5))]),
    "constant_of_shape": (_model("ConstantOfShape", [("shape", I64, [2])], 2,
                                 value=onnx.numpy_helper.from_array(np.array([1.5], np.float32))),
                          [(_i64(2, 3),), (_i64(4, 1),)]),
    "expand_shape": (_model("Expand", [("x", F, [3, 1]), ("shape", I64, [3])], 3),
                     [(_i64(2, 3, 4),), (_i64(1, 1, 2),)]),
}


def _data_inputs(model: onnx.ModelProto, n_values: int, rng) -> list[np.ndarray]:
    out = []
    for vi in model.graph.input[:len(model.graph.input) - n_values]:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        out.append(rng.standard_normal(shape).astype(np.float32))
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_per_value(name):
    model, values = CASES[name]
    rng = np.random.default_rng(len(name))
    cm = ember.compile(model)
    assert isinstance(cm, ember.runtime.specialized.SpecializedModel)
    ref = ReferenceEvaluator(model)
    names = [vi.name for vi in model.graph.input]
    for _ in range(2):
        for value in values:
            data = _data_inputs(model, len(value), rng)
            args = [*data, *value]
            (expected,) = ref.run(None, dict(zip(names, args)))
            actual = cm(*args)
            assert actual.shape == expected.shape, (value, actual.shape, expected.shape)
            np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6, err_msg=str(value))
    assert cm.compiles == len(values) and cm.hits == len(values)  # each value compiled once, then found


def _reduce():
    return CASES["reduce_axes"][0]


def test_limit_exceeded_is_a_clear_error():
    cm = ember.compile(_reduce(), max_specializations=2)
    x = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)
    cm(x, _i64(0))
    cm(x, _i64(1))
    cm(x, _i64(0))  # a value compiled for already: no new specialization
    with pytest.raises(CompileError, match=r"axes=\[2\].*2 specialization\(s\) already.*EMBER_MAX_SPECIALIZATIONS"):
        cm(x, _i64(2))
    np.testing.assert_allclose(cm(x, _i64(1)), x.sum(axis=1, keepdims=True), rtol=1e-5)  # still usable


def test_limit_from_the_environment(monkeypatch):
    monkeypatch.setenv("EMBER_MAX_SPECIALIZATIONS", "1")
    cm = ember.compile(_reduce())
    x = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(np.float32)
    cm(x, _i64(0))
    with pytest.raises(CompileError, match=r"1 specialization\(s\) already"):
        cm(x, _i64(1))
    monkeypatch.setenv("EMBER_MAX_SPECIALIZATIONS", "0")
    with pytest.raises(ConfigError, match="EMBER_MAX_SPECIALIZATIONS='0'"):
        ember.compile(_reduce())


def test_value_input_checked_before_compiling():
    cm = ember.compile(_reduce())
    x = np.random.default_rng(2).standard_normal((3, 4, 5)).astype(np.float32)
    with pytest.raises(ArgumentTypeError, match="input 'axes' has dtype int32, expected int64"):
        cm(x, np.array([0], np.int32))
    with pytest.raises(ArgumentTypeError, match="takes 2 input"):
        cm(x)
    assert cm.compiles == 0


def test_torch_tensors_as_values():
    torch = pytest.importorskip("torch")
    cm = ember.compile(_reduce())
    x = torch.randn(3, 4, 5)
    y = cm(x, torch.tensor([2]))
    assert isinstance(y, torch.Tensor)
    torch.testing.assert_close(y, x.sum(2, keepdim=True), rtol=1e-5, atol=1e-6)


def test_a_new_process_finds_the_library_in_the_build_cache():
    """A second compiled model of the same ONNX model (as in a new process) builds no C for a value
    compiled before."""
    x = np.random.default_rng(3).standard_normal((3, 4, 5)).astype(np.float32)
    ember.compile(_reduce())(x, _i64(1))
    cm = ember.compile(_reduce())
    cm(x, _i64(1))
    (specialization,) = cm.specializations.values()
    assert specialization.stats.cached


def test_value_inputs_found_through_computation():
    """Axes computed from a graph input (here axes + 1) make that input runtime-valued; a second one
    found only once the first is known (the shape of a Reshape) is added at the first call."""
    nodes = [oh.make_node("Add", ["a", "one"], ["axes"]), oh.make_node("ReduceMax", ["x", "axes"], ["r"], keepdims=0),
             oh.make_node("Reshape", ["r", "shape"], ["y"])]
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", F, [2, 3, 4]),
                                   oh.make_tensor_value_info("a", I64, [1]),
                                   oh.make_tensor_value_info("shape", I64, [1])],
                      [oh.make_tensor_value_info("y", F, [None])], [onnx.numpy_helper.from_array(_i64(1), "one")])
    model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)])
    with pytest.raises(ConstantInputError) as e:
        import_onnx(model)
    assert e.value.inputs == ("a",)
    x = np.random.default_rng(4).standard_normal((2, 3, 4)).astype(np.float32)
    graph, names = import_specialized(model, {"a": _i64(0), "shape": _i64(-1)})
    assert names == ("a", "shape") and [v.name for v in graph.inputs] == ["x"]
    cm = ember.compile(model)
    assert cm.value_inputs == ("a",)
    np.testing.assert_allclose(cm(x, _i64(0), _i64(-1)), x.max(axis=1).reshape(-1), rtol=1e-6)
    assert cm.value_inputs == ("a", "shape")
    np.testing.assert_allclose(cm(x, _i64(1), _i64(6)), x.max(axis=2).reshape(-1), rtol=1e-6)
    assert cm.compiles == 2


def test_keywords_checked_at_compile():
    with pytest.raises(ConfigError, match="num_threads=-1"):
        ember.compile(_reduce(), num_threads=-1)


def test_not_one_artifact():
    with pytest.raises(ArtifactError, match="specializations"):
        ember.compile(_reduce()).save("unused")


def test_calls_from_threads_compile_each_value_once():
    cm = ember.compile(_reduce())
    x = np.random.default_rng(5).standard_normal((3, 4, 5)).astype(np.float32)
    errors = []

    def work(k):
        try:
            for _ in range(3):
                np.testing.assert_allclose(cm(x, _i64(k % 2)), x.sum(axis=k % 2, keepdims=True), rtol=1e-5)
        except Exception as e:  # (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and cm.compiles == 2 and cm.compiles + cm.hits == 18


def test_topk_runtime_k():
    """TopK's k given as a graph input: specialized per k (where ember converts TopK)."""
    nodes = [oh.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)]
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", F, [3, 8]), oh.make_tensor_value_info("k", I64, [1])],
                      [oh.make_tensor_value_info("v", F, [3, None]), oh.make_tensor_value_info("i", I64, [3, None])])
    model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)])
    try:
        cm = ember.compile(model)
    except UnsupportedOpError:
        pytest.skip("ember converts no TopK")
    ref = ReferenceEvaluator(model)
    rng = np.random.default_rng(6)
    for k in (1, 3, 8, 3):
        x = rng.standard_normal((3, 8)).astype(np.float32)
        for a, e in zip(cm(x, _i64(k)), ref.run(None, {"x": x, "k": _i64(k)})):
            np.testing.assert_allclose(a, e, rtol=1e-6)
    assert cm.compiles == 3 and cm.hits == 1


def test_input_values_checked():
    model = _reduce()
    with pytest.raises(OnnxImportError, match=r"input_values names \['nope'\]"):
        import_onnx(model, input_values={"nope": _i64(0)})
    with pytest.raises(OnnxImportError, match="input_values gives input 'axes' a int32 array"):
        import_onnx(model, input_values={"axes": np.array([0], np.int32)})


def test_runtime_axes_then_nonzero():
    """A specialization that is itself cut around a host step: ReduceMax over runtime axes, then
    NonZero of its result."""
    nodes = [oh.make_node("ReduceMax", ["x", "axes"], ["m"], keepdims=0), oh.make_node("NonZero", ["m"], ["y"])]
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", F, [3, 4]),
                                   oh.make_tensor_value_info("axes", I64, [1])],
                      [oh.make_tensor_value_info("y", I64, [1, None])])
    model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)])
    cm = ember.compile(model)
    ref = ReferenceEvaluator(model)
    rng = np.random.default_rng(7)
    for axis in (0, 1, 0):
        x = rng.standard_normal((3, 4)).astype(np.float32)
        (expected,) = ref.run(None, {"x": x, "axes": _i64(axis)})
        np.testing.assert_array_equal(cm(x, _i64(axis)), expected)
    assert cm.compiles == 2

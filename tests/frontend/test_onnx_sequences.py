"""ONNX sequences and optionals (ember/frontend/onnx/structured.py, converters/sequence.py):
models built with onnx.helper, compiled with ember.compile, called with lists, None and arrays
of fresh random data, and compared with onnx's reference evaluator; the per-structure
specialization (ember.runtime.specialized) and the errors."""

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

import ember
from ember.errors import ArgumentTypeError, ArtifactError, CompileError
from ember.frontend.onnx import OnnxImportError, StructureError, import_graph, import_onnx
from ember.ops.evaluate import evaluate
from ember.runtime.specialized import SpecializedModel

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RTOL, ATOL = 1e-5, 1e-6


def _model(nodes, inputs, outputs, opset=18, initializers=()) -> onnx.ModelProto:
    g = oh.make_graph(nodes, "m", inputs, outputs, initializer=list(initializers))
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])


def _seq(name, elem=F, shape=None):
    return oh.make_tensor_sequence_value_info(name, elem, shape)


def _opt(name, elem=F, shape=None):
    return oh.make_value_info(name, oh.make_optional_type_proto(oh.make_tensor_type_proto(elem, shape)))


def _t(name, elem=F, shape=None):
    return oh.make_tensor_value_info(name, elem, shape)


def _check(model, cm, *args):
    """cm(*args) against the reference evaluator, output by output (lists element by element)."""
    expected = ReferenceEvaluator(model).run(None, dict(zip((vi.name for vi in model.graph.input), args)))
    actual = cm(*args)
    actual = list(actual) if len(expected) > 1 else [actual]
    for a, e in zip(actual, expected, strict=True):
        if e is None or isinstance(e, list):
            assert (a is None) == (e is None) and len(a or []) == len(e or [])
            pairs = zip(a or [], e or [])
        else:
            pairs = [(a, e)]
        for x, y in pairs:
            assert x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_allclose(x, y, rtol=RTOL, atol=ATOL)


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# a sequence in, its first element doubled, the whole concatenated (axis 0) and stacked (new axis
# 1), the sequence with a tensor inserted at the front, its last element erased
SEQUENCE_OPS = _model(
    [oh.make_node("Constant", [], ["zero"], value=oh.make_tensor("zero", I64, [], [0])),
     oh.make_node("SequenceAt", ["xs", "zero"], ["first"]),
     oh.make_node("Add", ["first", "first"], ["doubled"]),
     oh.make_node("ConcatFromSequence", ["xs"], ["cat"], axis=0),
     oh.make_node("ConcatFromSequence", ["xs"], ["stacked"], axis=1, new_axis=1),
     oh.make_node("SequenceInsert", ["xs", "t", "zero"], ["inserted"]),
     oh.make_node("SequenceErase", ["inserted"], ["erased"]),
     oh.make_node("SequenceLength", ["erased"], ["n"])],
    [_seq("xs", F, [2, 3]), _t("t", F, [2, 3])],
    [_t("doubled", F, [2, 3]), _t("cat", F, [None, 3]), _t("stacked", F, [2, None, 3]), _seq("erased"),
     _t("n", I64, [])])


@pytest.fixture(scope="module")
def sequence_ops():
    return ember.compile(SEQUENCE_OPS, max_specializations=2)


def test_sequence_input_per_length(sequence_ops):
    cm, rng = sequence_ops, np.random.default_rng(0)
    assert isinstance(cm, SpecializedModel) and cm.structured == {"xs": "sequence"}
    _check(SEQUENCE_OPS, cm, [_rand(rng, 2, 3) for _ in range(3)], _rand(rng, 2, 3))
    assert (cm.compiles, cm.hits) == (1, 0)
    _check(SEQUENCE_OPS, cm, [_rand(rng, 2, 3) for _ in range(3)], _rand(rng, 2, 3))  # same structure
    assert (cm.compiles, cm.hits) == (1, 1)
    _check(SEQUENCE_OPS, cm, [_rand(rng, 2, 3)], _rand(rng, 2, 3))  # a new length compiles once more
    assert (cm.compiles, cm.hits) == (2, 1)
    with pytest.raises(CompileError, match=r"the sequence or optional input\(s\) \['xs'\] take a value or "
                                           r"structure it was not compiled for \(xs=a list of 2: \[float32\[2, 3\], "
                                           r"float32\[2, 3\]\]\), and it has 2 specialization\(s\) already"):
        cm([_rand(rng, 2, 3) for _ in range(2)], _rand(rng, 2, 3))  # one structure more than the bound
    _check(SEQUENCE_OPS, cm, [_rand(rng, 2, 3)], _rand(rng, 2, 3))  # the compiled ones still run
    assert (cm.compiles, cm.hits) == (2, 2)


def test_sequence_argument_errors(sequence_ops):
    rng = np.random.default_rng(1)
    with pytest.raises(ArgumentTypeError, match="'xs' is an ONNX sequence: it takes a list of arrays"):
        sequence_ops(_rand(rng, 2, 3), _rand(rng, 2, 3))
    with pytest.raises(ArgumentTypeError, match="'xs' has dtype int64"):
        sequence_ops([np.ones((2, 3), np.int64)], _rand(rng, 2, 3))
    with pytest.raises(ArtifactError, match=r"per value or structure of the sequence or optional input\(s\) \['xs'\]"):
        sequence_ops.save("unused")
    assert "and the structure of ['xs']" in repr(sequence_ops)


def test_structure_of_imports():
    """import_onnx takes a sequence's structure from input_shapes, and names what it lacks."""
    with pytest.raises(StructureError, match=r"\['xs'\] are sequences or optionals") as e:
        import_onnx(SEQUENCE_OPS)
    assert e.value.inputs == ("xs",)
    with pytest.raises(StructureError, match="outputs include sequences"):
        import_onnx(SEQUENCE_OPS, input_shapes={"xs": [(2, 3), (2, 3)]})
    graph, layout = import_graph(SEQUENCE_OPS, input_shapes={"xs": [(2, 3), (2, 3)]})
    assert [v.name for v in graph.inputs] == ["xs_0", "xs_1", "t"] and layout == ("tensor",) * 3 + (2, "tensor")
    with pytest.raises(OnnxImportError, match=r"shape \(4, 3\), but the model declares \(2, 3\)"):
        import_graph(SEQUENCE_OPS, input_shapes={"xs": [(4, 3)]})
    with pytest.raises(OnnxImportError, match="SequenceAt node 'first': position 0 is out of range to read a "
                                              "sequence of 0"):
        import_graph(SEQUENCE_OPS, input_shapes={"xs": []})


def test_optional_input():
    """An optional input: present or absent, chosen at import (If on OptionalHasElement folds)."""
    then = oh.make_graph([oh.make_node("OptionalGetElement", ["opt"], ["v"]), oh.make_node("Relu", ["v"], ["r"])],
                         "then", [], [_t("r", F, [3, 4])])
    other = oh.make_graph([oh.make_node("Neg", ["x"], ["r2"])], "else", [], [_t("r2", F, [3, 4])])
    model = _model([oh.make_node("OptionalHasElement", ["opt"], ["has"]),
                    oh.make_node("If", ["has"], ["y"], then_branch=then, else_branch=other)],
                   [_opt("opt", F, [3, 4]), _t("x", F, [3, 4])], [_t("y", F, [3, 4])])
    cm, rng = ember.compile(model), np.random.default_rng(2)
    for opt in (_rand(rng, 3, 4), None, _rand(rng, 3, 4)):
        _check(model, cm, opt, _rand(rng, 3, 4))
    assert (cm.compiles, cm.hits) == (2, 1)
    with pytest.raises(ArgumentTypeError, match="'opt' is an ONNX optional: it takes None or an array, got list"):
        cm([_rand(rng, 3, 4)], _rand(rng, 3, 4))


def test_optional_output_and_identity():
    """Optional (present, and empty with only a type) and an optional sequence passed through."""
    model = _model([oh.make_node("Optional", ["x"], ["some"]),
                    oh.make_node("Optional", [], ["none"], type=oh.make_tensor_type_proto(F, [2])),
                    oh.make_node("Identity", ["os"], ["same"])],
                   [_t("x", F, [2]), oh.make_value_info("os", oh.make_optional_type_proto(
                       oh.make_sequence_type_proto(oh.make_tensor_type_proto(F, None))))],
                   [_opt("some", F, [2]), _opt("none", F, [2]),
                    oh.make_value_info("same", oh.make_optional_type_proto(
                        oh.make_sequence_type_proto(oh.make_tensor_type_proto(F, None))))])
    cm, rng = ember.compile(model), np.random.default_rng(3)
    x = _rand(rng, 2)
    some, none, same = cm(x, None)
    np.testing.assert_array_equal(some, x)
    assert none is None and same is None
    xs = [_rand(rng, 4), _rand(rng, 1, 2)]
    _, _, same = cm(x, xs)
    assert [s.tolist() for s in same] == [s.tolist() for s in xs]


def test_split_to_sequence_runtime_split():
    """SplitToSequence by sizes given at run time (specialized on their value), by a constant
    chunk size (the last part smaller), and in parts of 1 with keepdims=0."""
    model = _model([oh.make_node("SplitToSequence", ["x", "split"], ["parts"], axis=1),
                    oh.make_node("SplitToSequence", ["x", "three"], ["chunks"], axis=-1),
                    oh.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0)],
                   [_t("x", F, [3, 7]), _t("split", I64, [None])], [_seq("parts"), _seq("chunks"), _seq("rows")],
                   initializers=[onnx.numpy_helper.from_array(np.array(3, np.int64), "three")])
    cm, rng = ember.compile(model), np.random.default_rng(4)
    for split in (np.array([2, 5], np.int64), np.array([1, 1, 5], np.int64)):
        _check(model, cm, _rand(rng, 3, 7), split)
    assert cm.value_inputs == ("split",) and cm.compiles == 2


def test_sequence_at_runtime_position():
    """SequenceAt and SequenceInsert at positions given at run time: specialized on their values."""
    model = _model([oh.make_node("SequenceAt", ["xs", "i"], ["y"]),
                    oh.make_node("SequenceInsert", ["xs", "y", "i"], ["ys"])],
                   [_seq("xs", F, [4]), _t("i", I64, [])], [_t("y", F, [4]), _seq("ys")])
    cm, rng = ember.compile(model), np.random.default_rng(5)
    xs = [_rand(rng, 4) for _ in range(3)]
    for i in (0, -1, 2, 0):
        _check(model, cm, xs, np.array(i, np.int64))
    assert cm.value_inputs == ("i",) and (cm.compiles, cm.hits) == (3, 1)


def test_sequence_map():
    """SequenceMap's body inlined per element, with a tensor input passed whole."""
    body = oh.make_graph([oh.make_node("Mul", ["a", "b"], ["p"]), oh.make_node("Shape", ["a"], ["s"])], "body",
                         [_t("a", F, None), _t("b", F, [5])], [_t("p", F, None), _t("s", I64, [2])])
    model = _model([oh.make_node("SequenceMap", ["xs", "w"], ["ps", "ss"], body=body)],
                   [_seq("xs", F, ["N", 5]), _t("w", F, [5])], [_seq("ps"), _seq("ss", I64)])
    cm, rng = ember.compile(model), np.random.default_rng(6)
    _check(model, cm, [_rand(rng, 2, 5), _rand(rng, 7, 5), _rand(rng, 1, 5)], _rand(rng, 5))


def _loop_model(cond_from_data: bool = False) -> onnx.ModelProto:
    """A Loop that appends x[:i+1] + y to a sequence per iteration (ONNX's test_loop13_seq, with
    data), its trip count a graph input; or whose condition the body computes from the data."""
    nodes = [oh.make_node("Constant", [], ["one"], value=oh.make_tensor("one", I64, [1], [1])),
             oh.make_node("Constant", [], ["zero"], value=oh.make_tensor("zero", I64, [1], [0])),
             oh.make_node("Unsqueeze", ["i", "zero"], ["i1"]),
             oh.make_node("Add", ["i1", "one"], ["end"]),
             oh.make_node("Slice", ["x", "zero", "end"], ["head"]),
             oh.make_node("Add", ["head", "y"], ["item"]),
             oh.make_node("SequenceInsert", ["s_in", "item"], ["s_out"])]
    if cond_from_data:
        nodes.append(oh.make_node("ReduceSum", ["x"], ["total"], keepdims=0))
        nodes.append(oh.make_node("Less", ["total", "y"], ["c_out"]))
    else:
        nodes.append(oh.make_node("Identity", ["c_in"], ["c_out"]))
    body = oh.make_graph(nodes, "body", [_t("i", I64, []), _t("c_in", B, []), _seq("s_in")],
                         [_t("c_out", B, []), _seq("s_out")])
    return _model([oh.make_node("SequenceEmpty", [], ["empty"]),  # (the reference runs no iteration without cond)
                   oh.make_node("Constant", [], ["go"], value=oh.make_tensor("go", B, [], [True])),
                   oh.make_node("Loop", ["n", "go", "empty"], ["s"], body=body)],
                  [_t("n", I64, []), _t("x", F, [6]), _t("y", F, [])], [_seq("s")])


def test_loop_over_a_sequence_unrolled():
    model = _loop_model()
    cm, rng = ember.compile(model), np.random.default_rng(7)
    for n in (4, 1, 4):
        _check(model, cm, np.array(n, np.int64), _rand(rng, 6), _rand(rng))
    assert cm.value_inputs == ("n",) and (cm.compiles, cm.hits) == (2, 1)


def test_loop_over_a_sequence_refused():
    """A loop over a sequence whose condition is known at run time only cannot be unrolled."""
    with pytest.raises(OnnxImportError, match="Loop node 's': a loop over sequences or optionals is unrolled at "
                                              "import, and the condition its body computes in iteration 0 is known "
                                              "at run time only"):
        import_graph(_loop_model(cond_from_data=True), input_values={"n": np.array(3, np.int64)})


def test_if_over_sequences_chosen_per_condition():
    """An If whose branches give sequences of different lengths: specialized on the condition."""
    then = oh.make_graph([oh.make_node("SequenceConstruct", ["x", "x"], ["a"])], "then", [], [_seq("a")])
    other = oh.make_graph([oh.make_node("Neg", ["x"], ["nx"]), oh.make_node("SequenceConstruct", ["nx"], ["b"])],
                          "else", [], [_seq("b")])
    model = _model([oh.make_node("If", ["c"], ["s"], then_branch=then, else_branch=other)],
                   [_t("c", B, []), _t("x", F, [3])], [_seq("s")])
    cm, rng = ember.compile(model), np.random.default_rng(8)
    for c in (True, False, True):
        _check(model, cm, np.array(c), _rand(rng, 3))
    assert cm.value_inputs == ("c",) and (cm.compiles, cm.hits) == (2, 1)


def test_sequence_into_a_tensor_operator():
    """A sequence where a tensor is expected: the node and input are named."""
    model = _model([oh.make_node("Identity", ["xs"], ["ys"]), oh.make_node("Relu", ["ys"], ["y"])],
                   [_seq("xs", F, [2])], [_t("y", F, [2])])
    with pytest.raises(OnnxImportError, match=r"Relu node 'y': input 0 \('ys'\) is a sequence of 1; this operator "
                                              "takes tensors"):
        import_graph(model, input_shapes={"xs": [(2,)]})


def test_nothing_to_compute():
    """Outputs that are all an empty sequence or an absent optional: a specialization with no
    graph outputs runs nothing."""
    model = _model([oh.make_node("SequenceEmpty", [], ["s"]),
                    oh.make_node("Optional", [], ["o"], type=oh.make_tensor_type_proto(F, [2]))],
                   [], [_seq("s"), _opt("o", F, [2])])
    cm = ember.compile(model)
    assert cm() == ([], None) and cm.compiles == 1


def test_if_reading_a_sequence_inside_an_unrolled_loop():
    """An If with a condition given at run time, in the body of a loop over a sequence, reading
    that sequence from two scopes out: chosen at import (specialized on the condition)."""
    then = oh.make_graph([oh.make_node("SequenceAt", ["xs", "i"], ["a"])], "then", [], [_t("a", F, [3])])
    other = oh.make_graph([oh.make_node("Neg", ["x"], ["b"])], "else", [], [_t("b", F, [3])])
    body = oh.make_graph([oh.make_node("If", ["c"], ["v"], then_branch=then, else_branch=other),
                          oh.make_node("SequenceInsert", ["s_in", "v"], ["s_out"]),
                          oh.make_node("Identity", ["c_in"], ["c_out"])], "body",
                         [_t("i", I64, []), _t("c_in", B, []), _seq("s_in")], [_t("c_out", B, []), _seq("s_out")])
    model = _model([oh.make_node("Constant", [], ["n"], value=oh.make_tensor("n", I64, [], [2])),
                    oh.make_node("Constant", [], ["go"], value=oh.make_tensor("go", B, [], [True])),
                    oh.make_node("SequenceConstruct", ["x", "x"], ["xs"]),
                    oh.make_node("Loop", ["n", "go", "xs"], ["s"], body=body)],
                   [_t("c", B, []), _t("x", F, [3])], [_seq("s")])
    cm, rng = ember.compile(model), np.random.default_rng(9)
    for c in (True, False):
        _check(model, cm, np.array(c), _rand(rng, 3))
    assert cm.value_inputs == ("c",)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_positions_against_the_reference(data):
    """SequenceInsert, SequenceErase and SequenceAt at any valid position (negative ones too) of
    sequences of any length and row counts, imported for that structure and evaluated with the
    operators' references, against Python's list operations (the spec) and onnx's reference
    evaluator (except for an insertion at position n, the end, which it makes at the front)."""
    n = data.draw(st.integers(1, 5), "length")
    rows = data.draw(st.lists(st.integers(1, 3), min_size=n, max_size=n), "rows")
    at = data.draw(st.integers(-n, n), "insert at")
    erase = data.draw(st.integers(-n - 1, n), "erase at")
    read = data.draw(st.integers(-n, n - 1), "read at")
    consts = {"at": at, "erase": erase, "read": read}
    model = _model([*(oh.make_node("Constant", [], [k], value=oh.make_tensor(k, I64, [], [v]))
                      for k, v in consts.items()),
                    oh.make_node("SequenceInsert", ["xs", "t", "at"], ["ins"]),
                    oh.make_node("SequenceErase", ["ins", "erase"], ["ers"]),
                    oh.make_node("SequenceAt", ["ers", "read"], ["y"]),
                    oh.make_node("ConcatFromSequence", ["ers"], ["cat"], axis=0)],
                   [_seq("xs", F, [None, 2]), _t("t", F, [None, 2])], [_t("y", F, [None, 2]), _t("cat", F, [None, 2])])
    rng = np.random.default_rng(n * 100 + at)
    xs, t = [_rand(rng, r, 2) for r in rows], _rand(rng, 2, 2)
    graph, layout = import_graph(model, input_shapes={"xs": [x.shape for x in xs], "t": t.shape})
    assert layout == ("tensor", "tensor")
    seq = list(xs)
    seq.insert(at, t)
    del seq[erase]
    expected = [seq[read], np.concatenate(seq)]
    actual = evaluate(graph, *xs, t)
    for a, e in zip(actual, expected, strict=True):
        np.testing.assert_array_equal(a, e)
    if at != n:
        for a, e in zip(actual, ReferenceEvaluator(model).run(None, {"xs": xs, "t": t}), strict=True):
            np.testing.assert_array_equal(a, e)


def test_unroll_bound(monkeypatch):
    """A loop over a sequence runs at most MAX_UNROLL iterations at import; more is refused."""
    from ember.frontend.onnx.converters import control

    monkeypatch.setattr(control, "MAX_UNROLL", 3)
    model = _loop_model()
    import_graph(model, input_values={"n": np.array(3, np.int64)})
    with pytest.raises(OnnxImportError, match=r"Loop node 's': a loop over sequences or optionals is unrolled at "
                                              r"import, and this one runs more than 3 iterations \(trip count 4\)"):
        import_graph(model, input_values={"n": np.array(4, np.int64)})


def test_get_element_of_an_absent_optional():
    model = _model([oh.make_node("OptionalGetElement", ["opt"], ["y"])], [_opt("opt", F, [2])], [_t("y", F, [2])])
    with pytest.raises(OnnxImportError, match="OptionalGetElement node 'y': the optional input holds no value"):
        import_graph(model, input_shapes={"opt": None})
    with pytest.raises(OnnxImportError, match="input_shapes gives the sequence input 'xs' None; only an optional"):
        import_graph(SEQUENCE_OPS, input_shapes={"xs": None})

"""ONNX Slice with symbolic starts and ends: a static table sliced up to a symbolic length (BERT's
position_ids[:, :tokens]), the symbol's range narrowed so that each call is checked against the
table, a symbolic axis sliced with constant bounds likewise (its symbol at least what they need: a
property test against onnxruntime), and the slices that cannot be checked refused naming the
node. BERT (a tiny config)
exported by the TorchScript exporter over symbolic tokens, compiled and compared with
onnxruntime on the C target and on the GPU-semantics interpreter."""

import io

import numpy as np
import onnx
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx_check import run_onnxruntime
from onnx_graphs import model, value_info

import ember
from ember.errors import ShapeError
from ember.frontend.onnx import import_onnx
from ember.ops.registry import OpTypeError
from ember.target import Target
from ember.testing import assert_close

RNG = np.random.default_rng(25)
POSITIONS = 16


class Encoder(torch.nn.Module):
    """BertModel's last hidden state, from token ids alone."""

    def __init__(self):
        super().__init__()
        import transformers

        torch.manual_seed(0)
        config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=64, max_position_embeddings=POSITIONS)
        self.bert = transformers.BertModel(config).eval()

    def forward(self, ids):
        return self.bert(input_ids=ids).last_hidden_state


@pytest.fixture(scope="module")
def bert_onnx() -> onnx.ModelProto:
    f = io.BytesIO()
    torch.onnx.export(Encoder().eval(), (torch.randint(0, 64, (1, 7)),), f, dynamo=False, opset_version=17,
                      input_names=["ids"], dynamic_axes={"ids": {1: "tokens"}})
    return onnx.load_from_string(f.getvalue())


@pytest.mark.parametrize("target, lengths", [("c", (3, POSITIONS)), (Target("cuda", simulate=True), (4,))],
                         ids=["c", "cuda-interpreter"])  # (the interpreter: one short length, a second)
def test_bert_over_symbolic_tokens(bert_onnx, target, lengths):
    graph = import_onnx(bert_onnx)
    assert graph.inputs[0].shape == (1, "tokens") and graph.ranges["tokens"] == (0, POSITIONS)
    compiled = ember.compile(graph, target=target)
    for tokens in lengths:  # (from 2 tokens: the exporter fixed is_causal at the example's length)
        ids = RNG.integers(0, 64, (1, tokens)).astype("int64")
        assert_close(compiled(ids), run_onnxruntime(bert_onnx, [ids])[0], 1e-5, 1e-5, f"{tokens} tokens")
    with pytest.raises(ShapeError, match="tokens"):  # longer than the position table
        compiled(RNG.integers(0, 64, (1, POSITIONS + 1)).astype("int64"))


def sliced_table(ends, starts=(0,), steps=(1,)) -> onnx.ModelProto:
    """table[:, starts:ends:steps] + x[:, :1], ends = scale * n + offset of x's symbolic length n."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"], start=1, end=2),
             helper.make_node("Mul", ["shape", "scale"], ["scaled"]),
             helper.make_node("Add", ["scaled", "offset"], ["ends"]),
             helper.make_node("Slice", ["table", "starts", "ends", "axes", "steps"], ["rows"], name="rows"),
             helper.make_node("Slice", ["x", "zero", "one", "axes"], ["first"]),
             helper.make_node("Add", ["first", "rows"], ["y"])]
    scale, offset = ends
    inits = {"table": RNG.standard_normal((1, POSITIONS)).astype("float32"), "scale": np.array([scale]),
             "offset": np.array([offset]), "starts": np.array(starts), "axes": np.array([1]),
             "steps": np.array(steps), "zero": np.array([0]), "one": np.array([1])}
    return model(nodes, [value_info("x", TensorProto.FLOAT, [1, "n"])], [value_info("y", TensorProto.FLOAT)], inits)


def test_a_table_sliced_up_to_a_symbol_plus_a_constant():
    """table[:, 2:n + 2] takes n in [0, 14] and x[:, :1] n >= 1: the range checked at each call,
    where onnxruntime would clamp the ends to the table's and x's lengths."""
    proto = sliced_table((1, 2), starts=(2,))
    graph = import_onnx(proto)
    assert graph.ranges["n"] == (1, POSITIONS - 2)
    compiled = ember.compile(graph)
    x = RNG.standard_normal((1, 9)).astype("float32")
    assert_close(compiled(x), run_onnxruntime(proto, [x])[0], 1e-6, 1e-6, "table[:, 2:n + 2] + x")
    with pytest.raises(ShapeError):
        compiled(RNG.standard_normal((1, POSITIONS - 1)).astype("float32"))


def test_a_table_sliced_up_to_a_multiple_of_a_symbol():
    """table[:, 1:2 * n]: 1 <= 2 * n <= 16, so n in [1, 8]."""
    graph = import_onnx(sliced_table((2, 0), starts=(1,)))
    assert graph.ranges["n"] == (1, POSITIONS // 2)


@pytest.mark.parametrize("ends, steps, says", [((-1, POSITIONS), (1,), "grows with its symbols"),
                                                ((1, 0), (2,), "takes step 1")], ids=["16 - n", "step 2"])
def test_slices_a_call_cannot_be_checked_against(ends, steps, says):
    """An end counted from the end (16 - n) or a step other than 1 over a symbolic end: an
    OpTypeError naming the node."""
    with pytest.raises(OpTypeError, match=f"Slice node 'rows'.*{says}"):
        import_onnx(sliced_table(ends, steps=steps))


def sliced_sequence(starts, ends, axes=(1,), steps=None) -> onnx.ModelProto:
    """x[:, starts:ends] * 2 over x's symbolic length m (constant bounds)."""
    inits = {"starts": np.array(starts), "ends": np.array(ends), "axes": np.array(axes)}
    names = ["x", "starts", "ends", "axes"] + (["steps"] if steps else [])
    if steps:
        inits["steps"] = np.array(steps)
    nodes = [helper.make_node("Slice", names, ["part"], name="part"), helper.make_node("Add", ["part", "part"], ["y"])]
    return model(nodes, [value_info("x", TensorProto.FLOAT, [2, "m"])], [value_info("y", TensorProto.FLOAT)], inits)


INT64_MAX = 2**63 - 1


@pytest.mark.parametrize("starts, ends, axes, least", [
    ((0,), (5,), (1,), 5), ((1,), (4,), (-1,), 4), ((2,), (INT64_MAX,), (1,), 2), ((-4,), (INT64_MAX,), (1,), 4),
    ((0,), (-1,), (1,), 1), ((-3,), (-1,), (-1,), 3)], ids=["[:5]", "[1:4] axis -1", "[2:]", "[-4:]", "[:-1]",
                                                            "[-3:-1]"])
def test_a_symbolic_axis_sliced_within_bounds_it_may_be_shorter_than(starts, ends, axes, least):
    """x[:, :5] of x's m columns read 5 columns whatever m was (onnxruntime clamps to m): at m = 3
    the kernel read past the row, a silent wrong answer, and x[:, 2:] at m = 1 was an output of
    -1 columns (a bare OutOfMemoryError). m's range now starts at the length the slice needs, and
    a shorter call is a ShapeError naming m."""
    proto = sliced_sequence(starts, ends, axes)
    graph = import_onnx(proto)
    assert graph.ranges["m"] == (least, None)
    compiled = ember.compile(graph)
    for m in (least, least + 3):
        x = RNG.standard_normal((2, m)).astype("float32")
        assert_close(compiled(x), run_onnxruntime(proto, [x])[0], 0, 0, f"m = {m}")
    with pytest.raises(ShapeError, match=rf"binds 'm' outside the range \[{least}, inf\].*at least the bounds"):
        compiled(RNG.standard_normal((2, least - 1)).astype("float32"))


def test_an_empty_slice_of_a_symbolic_axis_takes_any_length():
    graph = import_onnx(sliced_sequence((5,), (2,)))
    assert graph.ranges == {} and graph.outputs[0].type.shape == (2, 0)


def test_a_symbolic_axis_sliced_up_to_another_symbol_is_refused():
    """x[:, :n] of x's m columns (n another input's length): n <= m relates two symbols, which no
    call is checked against (m = 5, n = 8 read past x's rows): an OpTypeError naming the node."""
    nodes = [helper.make_node("Shape", ["y"], ["ends"], start=1, end=2),
             helper.make_node("Slice", ["x", "zero", "ends", "axes"], ["part"], name="part")]
    proto = model(nodes, [value_info("x", TensorProto.FLOAT, [2, "m"]), value_info("y", TensorProto.FLOAT, [1, "n"])],
                  [value_info("part", TensorProto.FLOAT)], {"zero": np.array([0]), "axes": np.array([1])})
    with pytest.raises(OpTypeError, match=r"Slice node 'part': axis 1 of length m sliced from 0 for n.*m - n >= 0"):
        import_onnx(proto)


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(start=st.sampled_from([0, 1, 3, -1, -4]), end=st.sampled_from([2, 6, -1, -2, INT64_MAX]),
       axis=st.sampled_from([1, -1]), m=st.integers(0, 9))
def test_any_constant_bounds_of_a_symbolic_axis_match_onnxruntime_or_are_refused(start, end, axis, m):
    """Whatever the bounds (from either end, past the axis), a call either matches onnxruntime or,
    where the axis is shorter than they need, is a ShapeError naming m: never a read past it."""
    proto = sliced_sequence((start,), (end,), (axis,))
    try:
        graph = import_onnx(proto)
    except OpTypeError:  # (a start from the end, an end from the start: no one range of m holds them)
        assume(False)
    lo = graph.ranges.get("m", (0, None))[0]
    x = RNG.standard_normal((2, m)).astype("float32")
    compiled = ember.compile(graph)
    if m < lo:
        with pytest.raises(ShapeError, match="binds 'm' outside the range"):
            compiled(x)
    else:
        assert_close(compiled(x), run_onnxruntime(proto, [x])[0], 0, 0, f"x[:, {start}:{end}] of m = {m}")

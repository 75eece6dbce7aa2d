"""ONNX operators checked against onnx's ReferenceEvaluator on fresh random data, through the
reference evaluator and compiled: CumProd, Det, BatchNormalization in training mode (the batch's
statistics and the running ones), Dropout in training mode with ratio 0."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import ember
from ember.frontend.onnx import import_onnx
from ember.ops.evaluate import evaluate
from ember.testing import assert_close

RNG = np.random.default_rng()


def one_node(op: str, inputs: dict[str, np.ndarray], outputs: list[str], opset: int = 21,
             consts: dict[str, np.ndarray] | None = None, node_inputs: list[str] | None = None,
             domain: str = "", **attrs) -> onnx.ModelProto:
    """A model of one `op` node: graph inputs of these arrays' types, then initializers `consts`
    (the node takes them in that order, or `node_inputs`); outputs typed by ONNX's inference."""
    consts = consts or {}
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
                    for n, x in inputs.items()]
    inits = [onnx.numpy_helper.from_array(v, n) for n, v in consts.items()]
    node = helper.make_node(op, node_inputs or [*inputs, *consts], outputs, **attrs)
    graph = helper.make_graph([node], op.lower(), graph_inputs,
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def check(model: onnx.ModelProto, inputs: dict[str, np.ndarray], rtol: float, atol: float, compiled: bool = True):
    """ember's reference evaluator and (when `compiled`) its compiled model against onnx's
    ReferenceEvaluator."""
    expected = ReferenceEvaluator(model).run(None, inputs)
    runs = [("ember's reference", evaluate(import_onnx(model), *inputs.values()))]
    if compiled:
        out = ember.compile(model)(*inputs.values())
        runs.append(("compiled", list(out) if isinstance(out, tuple | list) else [out]))
    for what, actual in runs:
        assert len(actual) == len(expected)
        for k, (a, e) in enumerate(zip(actual, expected)):
            a = np.asarray(a)
            got, want = f"{a.dtype}{a.shape}", f"{e.dtype}{e.shape}"
            assert got == want, f"{what} output {k}: {got} != {want}"
            assert_close(a, e, rtol, atol, f"{what} output {k} vs onnx's ReferenceEvaluator")


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumprod(exclusive, reverse):
    x = (RNG.uniform(0.7, 1.3, (3, 40, 2)) * RNG.choice([-1.0, 1.0], (3, 40, 2))).astype("float32")
    model = one_node("CumProd", {"x": x}, ["y"], opset=26, consts={"axis": np.array(-2, "int64")},
                     exclusive=exclusive, reverse=reverse)
    check(model, {"x": x}, 1e-5, 1e-6)


def test_cumprod_axis_given_at_run_time():
    """A runtime axis: the model is compiled per value of it (a SpecializedModel)."""
    x = RNG.uniform(0.5, 1.5, (4, 5)).astype("float64")
    model = one_node("CumProd", {"x": x, "axis": np.array(0, "int32")}, ["y"], opset=26)
    cm = ember.compile(model)
    for axis in (1, 0, -1):
        a = np.array(axis, "int32")
        (e,) = ReferenceEvaluator(model).run(None, {"x": x, "axis": a})
        assert_close(np.asarray(cm(x, a)), e, 1e-12, 1e-12, f"axis {axis}")


@pytest.mark.parametrize("shape, dtype", [((5, 5), "float32"), ((2, 3, 4, 4), "float64")])
def test_det(shape, dtype):
    x = RNG.uniform(-1, 1, shape).astype(dtype)
    check(one_node("Det", {"x": x}, ["y"]), {"x": x}, 1e-4 if dtype == "float32" else 1e-10, 1e-6)


@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (6, 3)])
def test_batch_norm_training_mode(shape):
    c = shape[1]
    inputs = {"x": RNG.uniform(-2, 3, shape).astype("float32"), "s": RNG.uniform(0.5, 2, c).astype("float32"),
              "b": RNG.uniform(-1, 1, c).astype("float32"), "mean": RNG.uniform(-1, 1, c).astype("float32"),
              "var": RNG.uniform(0.5, 2, c).astype("float32")}
    model = one_node("BatchNormalization", inputs, ["y", "running_mean", "running_var"], opset=15,
                     training_mode=1, momentum=0.8, epsilon=1e-3)
    check(model, inputs, 1e-4, 1e-5)


def test_dropout_training_with_ratio_zero():
    x = RNG.uniform(-2, 2, (3, 4, 5)).astype("float32")
    model = one_node("Dropout", {"x": x}, ["y", "mask"], opset=13,
                     consts={"ratio": np.array(0.0, "float32"), "training_mode": np.array(True)})
    check(model, {"x": x}, 0, 0)
    model = one_node("Dropout", {"x": x}, ["y"], opset=13,
                     consts={"ratio": np.array(0.5, "float32"), "training_mode": np.array(True)})
    with pytest.raises(ember.ops.UnsupportedOpError, match=r"Dropout\(training_mode=True\)"):
        import_onnx(model)


@pytest.mark.parametrize("axis, shape, length", [(None, (3, 4), 9), (0, (5, 3), 5), (-1, (2, 3, 6), 4)])
def test_compress(axis, shape, length):
    """The condition's nonzero indices on the host, the gather compiled: sizes from the data (none
    kept, some, all); a condition shorter than the axis drops the rest."""
    x = RNG.uniform(-2, 2, shape).astype("float32")
    attrs = {} if axis is None else {"axis": axis}
    model = one_node("Compress", {"x": x, "condition": np.ones(length, bool)}, ["y"], **attrs)
    cm, ref = ember.compile(model), ReferenceEvaluator(model)
    for condition in (RNG.random(length) < 0.5, np.zeros(length, bool), np.ones(length, bool)):
        x = RNG.uniform(-2, 2, shape).astype("float32")
        (e,) = ref.run(None, {"x": x, "condition": condition})
        np.testing.assert_array_equal(np.asarray(cm(x, condition)), e)


def test_compress_constant_condition_is_a_gather():
    x = RNG.uniform(-2, 2, (4, 6)).astype("float32")
    condition = np.array([1, 0, 0, 1, 1], bool)
    model = one_node("Compress", {"x": x}, ["y"], consts={"condition": condition}, axis=1)
    graph = import_onnx(model)
    assert [n.op for n in graph.nodes] == ["gather"]
    check(model, {"x": x}, 0, 0)


def random_boxes(batches: int, n: int, center: bool) -> np.ndarray:
    """Boxes in a 10 x 10 field, many overlapping; corners in either order."""
    a, b = RNG.uniform(0, 10, (batches, n, 2)), RNG.uniform(0, 10, (batches, n, 2))
    if center:
        return np.concatenate([a, np.abs(b - a) + 0.5], axis=-1).astype("float32")
    return np.concatenate([a, a + RNG.uniform(-4, 4, (batches, n, 2))], axis=-1).astype("float32")


@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression_thresholds_at_run_time(center):
    boxes, scores = random_boxes(2, 30, center), RNG.uniform(0, 1, (2, 3, 30)).astype("float32")
    scores[0, 1, 5:9] = scores[0, 1, 4]  # ties: the lower index first
    inputs = {"boxes": boxes, "scores": scores, "limit": np.array([4], "int64"),
              "iou": np.array([0.3], "float32"), "score": np.array([0.2], "float32")}
    model = one_node("NonMaxSuppression", inputs, ["y"], opset=11, center_point_box=center)
    cm, ref = ember.compile(model), ReferenceEvaluator(model)
    counts = set()
    for limit, iou, score in [(4, 0.3, 0.2), (100, 0.5, 0.0), (0, 0.5, 0.0), (3, 0.0, 0.9), (30, 1.0, -1.0)]:
        inputs |= {"limit": np.array([limit], "int64"), "iou": np.array([iou], "float32"),
                   "score": np.array([score], "float32")}
        (e,) = ref.run(None, inputs)
        a = np.asarray(cm(*inputs.values()))
        assert a.dtype == np.int64
        np.testing.assert_array_equal(a, e, err_msg=f"limit {limit}, iou {iou}, score threshold {score}")
        counts.add(len(a))
    assert len(counts) >= 4 and 0 in counts


def test_non_max_suppression_inputs_left_out():
    """No score threshold keeps every box; no IoU threshold: any overlap suppresses; no limit:
    nothing kept (against onnxruntime: onnx's reference fails without an IoU threshold)."""
    ort = pytest.importorskip("onnxruntime")
    boxes, scores = random_boxes(1, 20, False), RNG.uniform(-1, 1, (1, 2, 20)).astype("float32")
    for names in (["boxes", "scores", "limit"], ["boxes", "scores", "limit", "iou"], ["boxes", "scores"]):
        consts = {"limit": np.array([5], "int64"), "iou": np.array([0.4], "float32")}
        model = one_node("NonMaxSuppression", {"boxes": boxes, "scores": scores}, ["y"], opset=11,
                         consts={k: v for k, v in consts.items() if k in names}, node_inputs=names)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        (e,) = session.run(None, {"boxes": boxes, "scores": scores})
        assert len(e) > 0 or len(names) == 2
        np.testing.assert_array_equal(np.asarray(ember.compile(model)(boxes, scores)), e, err_msg=str(names))


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter(mode):
    cache, update = RNG.uniform(-1, 1, (3, 2, 12, 4)).astype("float32"), RNG.uniform(-1, 1, (3, 2, 3, 4))
    update = update.astype("float32")
    high = 12 if mode == "circular" else 10
    inputs = {"cache": cache, "update": update, "at": RNG.integers(0, high, 3).astype("int64")}
    check(one_node("TensorScatter", inputs, ["present"], opset=24, mode=mode), inputs, 0, 0)
    del inputs["at"]  # from position 0
    check(one_node("TensorScatter", inputs, ["present"], opset=24, mode=mode, axis=2), inputs, 0, 0)


def scan_8(directions: list[int], lens: np.ndarray | None) -> onnx.ModelProto:
    """Scan-8 over xs (batch 3, length 4, 2) from states (3, 2): s' = s + x, y = s' * w (w: read
    from the outer graph), and the running maximum of a second input."""
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s2"]), helper.make_node("Mul", ["s2", "w"], ["y"]),
         helper.make_node("Max", ["m", "z"], ["m2"])], "body",
        [vi("s", 1, [2]), vi("m", 1, []), vi("x", 1, [2]), vi("z", 1, [])],
        [vi("s2", 1, [2]), vi("m2", 1, []), vi("y", 1, [2])])
    inputs = [vi("init", 1, [3, 2]), vi("m0", 1, [3]), vi("xs", 1, [3, 4, 2]), vi("zs", 1, [3, 4]), vi("w", 1, [2])]
    node = helper.make_node("Scan", ["" if lens is None else "lens", "init", "m0", "xs", "zs"], ["s", "m", "ys"],
                            body=body, num_scan_inputs=2, directions=directions)
    inits = [] if lens is None else [onnx.numpy_helper.from_array(lens, "lens")]
    graph = helper.make_graph([node], "scan8", inputs, [vi("s", 1, [3, 2]), vi("m", 1, [3]), vi("ys", 1, [3, 4, 2])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)])
    model.ir_version = 4  # (initializers that are no graph inputs)
    return model


@pytest.mark.parametrize("directions, lens", [([0, 0], None), ([1, 0], np.array([4, 4, 4], "int64"))])
def test_scan_8(directions, lens):
    """Against onnxruntime (onnx's reference runs no Scan before 9): a loop over the batch around
    the loop over the sequence, compiled."""
    ort = pytest.importorskip("onnxruntime")
    model = scan_8(directions, lens)
    feeds = {"init": RNG.uniform(-1, 1, (3, 2)), "m0": RNG.uniform(-1, 1, 3), "xs": RNG.uniform(-1, 1, (3, 4, 2)),
             "zs": RNG.uniform(-1, 1, (3, 4)), "w": RNG.uniform(-1, 1, 2)}
    feeds = {k: v.astype("float32") for k, v in feeds.items()}
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for what, actual in [("ember's reference", evaluate(import_onnx(model), *feeds.values())),
                         ("compiled", ember.compile(model)(*feeds.values()))]:
        for k, (a, e) in enumerate(zip(actual, expected)):
            assert_close(np.asarray(a), e, 1e-6, 1e-6, f"{what} output {k} vs onnxruntime")


def test_scan_8_with_shorter_sequences_is_refused():
    with pytest.raises(ember.ops.UnsupportedOpError, match=r"sequence_lens \[4, 2, 4\] shorter"):
        import_onnx(scan_8([0, 0], np.array([4, 2, 4], "int64")))


def test_slice_at_the_iteration_number_inside_a_loop():
    """ONNX's test_loop11 with a constant trip count (so that its scan output has a static length,
    which compiling needs): Slice(x, [i], [i + 1]) in the body is a window of one element at a
    start read at run time, compiled once. (One-element rows: onnx's reference concatenates the
    scan output's entries where ONNX stacks them, which agree only on them.)"""
    vi = helper.make_tensor_value_info
    x = RNG.uniform(-1, 1, 6).astype("float32")
    nodes = [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
             helper.make_node("Constant", [], ["one"], value=onnx.numpy_helper.from_array(np.array(1, "int64"))),
             helper.make_node("Add", ["i", "one"], ["end"]),
             helper.make_node("Constant", [], ["axes"], value=onnx.numpy_helper.from_array(np.array([0], "int64"))),
             helper.make_node("Unsqueeze", ["i", "axes"], ["start_1"]),
             helper.make_node("Unsqueeze", ["end", "axes"], ["end_1"]),
             helper.make_node("Slice", ["x", "start_1", "end_1"], ["row"]),
             helper.make_node("Add", ["y_in", "row"], ["y_out"]),
             helper.make_node("Identity", ["y_out"], ["scan"])]
    body = helper.make_graph(nodes, "body", [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []),
                                             vi("y_in", 1, [1])],
                             [vi("cond_out", TensorProto.BOOL, []), vi("y_out", 1, [1]), vi("scan", 1, [1])])
    loop = helper.make_node("Loop", ["trips", "go", "y"], ["y_final", "ys"], body=body)
    graph = helper.make_graph([loop], "loop_slice", [vi("y", 1, [1]), vi("x", 1, [6])],
                              [vi("y_final", 1, [1]), vi("ys", 1, [6, 1])],
                              [onnx.numpy_helper.from_array(np.array(6, "int64"), "trips"),
                               onnx.numpy_helper.from_array(np.array(True), "go")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    inputs = {"y": RNG.uniform(-1, 1, 1).astype("float32"), "x": x}
    assert "dynamic_slice" in {n.op for n in import_onnx(model).nodes[0].regions[0].nodes}
    check(model, inputs, 1e-6, 1e-6)


@pytest.mark.parametrize("size, compiled_as", [(2, "CompiledModel"), (12, "SpecializedModel")])
def test_slice_of_a_run_time_start_and_a_constant_length(size, compiled_as):
    """starts a graph input, ends = starts + size: one compiled model serves every start; a
    window longer than the axis (Slice clamps it to what there is) is specialized per start."""
    x = RNG.uniform(-1, 1, (4, 9)).astype("float32")
    model = one_node("Slice", {"x": x, "s": np.array([0], "int64")}, ["y"], opset=13,
                     consts={"size": np.array([size], "int64"), "axes": np.array([1], "int64")},
                     node_inputs=["x", "s", "e", "axes"])
    model.graph.node.insert(0, helper.make_node("Add", ["s", "size"], ["e"]))
    model = onnx.shape_inference.infer_shapes(model)
    cm = ember.compile(model)
    assert type(cm).__name__ == compiled_as
    for start in (0, 3, 7, -4):
        s = np.array([start], "int64")
        (e,) = ReferenceEvaluator(model).run(None, {"x": x, "s": s})
        np.testing.assert_array_equal(np.asarray(cm(x, s)), e, err_msg=f"start {start}")

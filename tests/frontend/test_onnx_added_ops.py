"""ONNX operators that map onto a new ember operator or decompose into existing ones, each a
one-node model checked against onnx's ReferenceEvaluator on fresh random inputs: Einsum (many
equations: batched matmul, diagonals, ellipsis, implicit output, three operands), GatherElements,
ScatterElements, ScatterND, TopK, Hardmax; then the same models compiled, once each."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from ember.frontend.onnx import import_onnx
from ember.ops.evaluate import evaluate
from ember.testing import assert_close

RNG = np.random.default_rng()
OPSET = 21


def one_node(op: str, inputs: list[np.ndarray], n_out: int = 1, consts: dict[str, np.ndarray] | None = None,
             opset: int = OPSET, node_inputs: list[str] | None = None, **attrs) -> onnx.ModelProto:
    """A model of one `op` node whose inputs are graph inputs of these arrays' types, then the
    constants (initializers) `consts`, in order (or the names `node_inputs`, "" for one left out);
    outputs typed by ONNX's inference."""
    names = [f"x{k}" for k in range(len(inputs))] + list(consts or {})
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
                    for n, x in zip(names, inputs)]
    inits = [onnx.numpy_helper.from_array(v, n) for n, v in (consts or {}).items()]
    outs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, names if node_inputs is None else node_inputs, outs, **attrs)
    graph = helper.make_graph([node], op.lower(), graph_inputs,
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def check(model: onnx.ModelProto, inputs: list[np.ndarray], rtol: float = 1e-5, atol: float = 1e-6):
    expected = ReferenceEvaluator(model).run(None, {f"x{k}": x for k, x in enumerate(inputs)})
    graph = import_onnx(model)
    actual = evaluate(graph, *inputs)
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert a.dtype == e.dtype, f"output {k}: {a.dtype} != {e.dtype}"
        assert_close(a, e, rtol, atol, f"output {k} vs onnx's ReferenceEvaluator")
    return graph


def rand(*shape, dtype="float32") -> np.ndarray:
    return RNG.uniform(-2, 2, shape).astype(dtype)


EINSUM = [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output: ik
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),  # trace
    ("...ii->...i", [(2, 3, 4, 4)]),
    ("bii,bi->b", [(3, 4, 4), (3, 4)]),
    ("ij->ji", [(3, 5)]),
    ("ij->", [(3, 5)]),
    ("i,i", [(6,), (6,)]),  # inner product
    ("i,j->ij", [(3,), (4,)]),  # outer product
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (1, 5, 4, 2)]),  # broadcast ellipsis
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 4), (2, 3, 6, 4)]),  # attention scores
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]),
    ("ijk,jil->kl", [(3, 4, 5), (4, 3, 2)]),
    ("ab,ab->ab", [(3, 4), (3, 4)]),
]


@pytest.mark.parametrize("equation, shapes", EINSUM, ids=[e for e, _ in EINSUM])
def test_einsum_equations(equation, shapes):
    inputs = [rand(*s) for s in shapes]
    check(one_node("Einsum", inputs, equation=equation), inputs)


def test_gather_elements_and_scatters():
    data = rand(4, 5, 6)
    indices = RNG.integers(-5, 5, (4, 3, 6)).astype("int64")
    check(one_node("GatherElements", [data, indices], axis=1), [data, indices])
    for reduction in ["none", "add", "mul", "max", "min"]:
        updates = rand(4, 3, 6)
        distinct = np.argsort(RNG.random((4, 5, 6)), axis=1)[:, :3].astype("int64")  # "none": no duplicates
        idx = distinct if reduction == "none" else indices
        check(one_node("ScatterElements", [data, idx, updates], axis=1, reduction=reduction), [data, idx, updates])
        slots = RNG.permutation(20)[:3].reshape(3, 1)
        nd_idx = np.stack([slots[:, 0] // 5, slots[:, 0] % 5], axis=-1).astype("int64")
        nd_upd = rand(3, 6)
        check(one_node("ScatterND", [data, nd_idx, nd_upd], reduction=reduction), [data, nd_idx, nd_upd])


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_values_and_indices(largest):
    x = rand(3, 8, 5)
    model = one_node("TopK", [x], n_out=2, consts={"k": np.array([3], "int64")}, axis=1, largest=largest)
    check(model, [x])


def test_hardmax_first_maximum():
    x = RNG.integers(0, 3, (3, 4, 5)).astype("float32")  # ties
    for axis in (-1, 1, 0):
        check(one_node("Hardmax", [x], axis=axis), [x])


def test_compiled_models_match_the_reference():
    import ember

    x, y = rand(2, 3, 4), rand(2, 4, 5)
    data, indices = rand(6, 4), RNG.integers(0, 6, (3, 4)).astype("int64")
    q = RNG.integers(0, 255, (3, 4)).astype("uint8")
    qconsts = {"sa": np.array(0.02, "float32"), "za": np.array(7, "uint8"), "b": q.T.copy(),
               "sb": np.array(0.03, "float32"), "zb": np.array(200, "uint8"), "sy": np.array(0.5, "float32"),
               "zy": np.array(100, "uint8")}
    for model, inputs in [(one_node("Einsum", [x, y], equation="bij,bjk->bik"), [x, y]),
                          (one_node("ScatterElements", [data, indices, rand(3, 4)], reduction="add"),
                           [data, indices, rand(3, 4)]),
                          (one_node("TopK", [x], n_out=2, consts={"k": np.array([2], "int64")}), [x]),
                          (one_node("QLinearMatMul", [q], consts=qconsts), [q])]:
        graph = check(model, inputs)
        outs = ember.compile(graph)(*inputs)
        for a, e in zip(outs if isinstance(outs, tuple) else [outs], evaluate(graph, *inputs)):
            assert_close(np.asarray(a), e, 1e-5, 1e-6, "compiled vs the reference")


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16"])
def test_quantize_dequantize_per_tensor_axis_and_block(dtype):
    info = np.iinfo(dtype)
    x = rand(2, 6, 4) * 50
    zero = lambda *s: RNG.integers(info.min // 2, info.max // 2, s).astype(dtype)  # noqa: E731
    q = RNG.integers(info.min, info.max, (2, 6, 4)).astype(dtype)
    cases = [({}, np.array(0.37, "float32"), zero()),
             ({"axis": 1}, RNG.uniform(0.1, 1, 6).astype("float32"), zero(6)),
             ({"axis": 1, "block_size": 4}, RNG.uniform(0.1, 1, (2, 2, 4)).astype("float32"), zero(2, 2, 4))]
    for attrs, scale, zp in cases:
        check(one_node("QuantizeLinear", [x], consts={"s": scale, "z": zp}, **attrs), [x])
        check(one_node("DequantizeLinear", [q], consts={"s": scale, "z": zp}, **attrs), [q])
    check(one_node("QuantizeLinear", [x], consts={"s": np.array(0.5, "float32")}), [x])  # uint8, no zero point


def test_dynamic_quantize_and_integer_matmuls():
    x = rand(3, 5) * 4
    check(one_node("DynamicQuantizeLinear", [x], n_out=3), [x])
    a, b = RNG.integers(0, 255, (2, 3, 4)).astype("uint8"), RNG.integers(0, 255, (4, 5)).astype("uint8")
    check(one_node("MatMulInteger", [a, b], consts={"za": np.array(RNG.integers(0, 255), "uint8"),
                                                    "zb": RNG.integers(0, 255, 5).astype("uint8")}), [a, b])
    a, b = RNG.integers(-128, 127, (2, 3, 4)).astype("int8"), RNG.integers(-128, 127, (4, 5)).astype("int8")
    for scale_dtype in ("float32", "float16"):
        scales = [np.array(RNG.uniform(0.01, 0.1), scale_dtype) for _ in range(3)]
        zps = [np.array(RNG.integers(-20, 20), "int8") for _ in range(3)]
        model = one_node("QLinearMatMul", [a], consts={"sa": scales[0], "za": zps[0], "b": b, "sb": scales[1],
                                                       "zb": zps[1], "sy": scales[2], "zy": zps[2]})
        check(model, [a])


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_losses_with_weights_and_ignored_targets(reduction):
    scores = rand(3, 5, 4)
    labels = RNG.integers(0, 5, (3, 4)).astype("int64")
    labels[0, 1] = labels[2, 3] = -1
    weights = RNG.uniform(0.5, 2, 5).astype("float32")
    check(one_node("SoftmaxCrossEntropyLoss", [scores, labels], n_out=2, reduction=reduction, ignore_index=-1),
          [scores, labels])
    check(one_node("SoftmaxCrossEntropyLoss", [scores, labels % 5, weights], reduction=reduction),
          [scores, labels % 5, weights])
    check(one_node("NegativeLogLikelihoodLoss", [scores, labels, weights], reduction=reduction, ignore_index=-1),
          [scores, labels, weights])


def test_center_crop_pad_one_hot_col2im():
    x = rand(5, 6, 3)
    for sizes, axes in [((3, 9), (0, 1)), ((8, 2), (-2, -1)), ((4, 7, 3), None)]:
        attrs = {} if axes is None else {"axes": axes}
        check(one_node("CenterCropPad", [x], consts={"shape": np.array(sizes, "int64")}, **attrs), [x])
    indices = RNG.integers(-6, 8, (3, 4)).astype("int64")  # negative ones wrap, 6 and 7 match nothing
    values = np.array([-0.5, 2.0], "float32")
    for axis in (-1, 0, 1):
        check(one_node("OneHot", [indices], consts={"depth": np.array(6, "int64"), "values": values}, axis=axis),
              [indices])
    for strides, pads, dilations in [((1, 1), (0, 0, 0, 0), (1, 1)), ((2, 1), (1, 0, 1, 2), (1, 2))]:
        image, block = np.array([7, 8], "int64"), np.array([2, 3], "int64")
        blocks = [(image[d] + pads[d] + pads[d + 2] - dilations[d] * (block[d] - 1) - 1) // strides[d] + 1
                  for d in range(2)]
        cols = rand(2, 3 * 6, blocks[0] * blocks[1])
        check(one_node("Col2Im", [cols], consts={"image": image, "block": block}, strides=strides, pads=pads,
                       dilations=dilations), [cols])


@pytest.mark.parametrize("inverse, onesided, parts", [(0, 0, 1), (0, 0, 2), (0, 1, 1), (1, 0, 2), (1, 1, 2)])
def test_dft_forms(inverse, onesided, parts):
    x = rand(2, 8, 5, parts)
    for axis, length in [(1, None), (2, None), (-2, 6), (1, 11)]:
        consts = {"n": np.array(length, "int64")} if length else {}
        model = one_node("DFT", [x], consts={**consts, "axis": np.array(axis, "int64")}, inverse=inverse,
                         onesided=onesided, node_inputs=["x0", "n" if length else "", "axis"])
        check(model, [x], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_unsigned_inputs_and_outputs_compiled(dtype):
    import ember

    info = np.iinfo(dtype)
    a = RNG.integers(0, info.max, (3, 5), endpoint=True, dtype=dtype)
    b = RNG.integers(1, 1000, (3, 5), dtype=dtype)
    for model, inputs in [(one_node("Add", [a, b]), [a, b]), (one_node("Div", [a, b]), [a, b]),
                          (one_node("Max", [a, b]), [a, b]), (one_node("Cast", [a], to=TensorProto.FLOAT), [a]),
                          (one_node("ReduceMax", [a], keepdims=0), [a])]:
        graph = check(model, inputs)
        out = ember.compile(graph)(*inputs)
        expected = ReferenceEvaluator(model).run(None, {f"x{k}": x for k, x in enumerate(inputs)})[0]
        assert out.dtype == expected.dtype
        np.testing.assert_array_equal(out, expected)


def test_bfloat16_inputs_and_outputs_compiled():
    import ml_dtypes

    import ember

    bf16 = ml_dtypes.bfloat16
    a, b = rand(4, 24).astype(bf16), rand(24, 8).astype(bf16)
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("ReduceSum", ["r"], ["s"], keepdims=0),
             helper.make_node("Cast", ["r"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["f"], ["y"], to=TensorProto.BFLOAT16)]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "bf16", [vi("a", TensorProto.BFLOAT16, a.shape), vi("b", TensorProto.BFLOAT16,
                                                                                           b.shape)],
                              [vi("s", TensorProto.BFLOAT16, None), vi("f", TensorProto.FLOAT, None),
                               vi("y", TensorProto.BFLOAT16, None)])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    expected = ReferenceEvaluator(model).run(None, {"a": a, "b": b})
    ember_graph = import_onnx(model)
    for outs in (evaluate(ember_graph, a, b), ember.compile(ember_graph)(a, b)):
        for k, (o, e) in enumerate(zip(outs, expected)):
            assert o.dtype == e.dtype, f"output {k}: {o.dtype} != {e.dtype}"
            assert_close(o, e, 2**-6, 1e-2, f"output {k} vs onnx's ReferenceEvaluator")


def test_lp_normalization_lp_pool_reverse_sequence_affine_grid():
    x = rand(2, 3, 7, 6)
    x[0, :, 0, 0] = 0  # a zero norm gives zeros
    for p in (1, 2):  # (the reference sums x, not |x|, for p = 1: it agrees on positive x)
        check(one_node("LpNormalization", [x], axis=1, p=p), [abs(x) if p == 1 else x])
        check(one_node("LpPool", [x], kernel_shape=(3, 2), strides=(2, 1), pads=(1, 0, 1, 1), p=p), [x], 1e-4, 1e-5)
    seq = rand(5, 3, 4)
    lengths = np.array([5, 1, 3], "int64")
    check(one_node("ReverseSequence", [seq], consts={"lengths": lengths}, batch_axis=1, time_axis=0), [seq])
    check(one_node("ReverseSequence", [seq.transpose(1, 0, 2).copy()], consts={"lengths": lengths}, batch_axis=0,
                   time_axis=1), [seq.transpose(1, 0, 2).copy()])
    for align in (0, 1):
        theta = rand(2, 2, 3)
        check(one_node("AffineGrid", [theta], consts={"size": np.array([2, 3, 4, 5], "int64")},
                       align_corners=align), [theta])
        theta = rand(2, 3, 4)
        check(one_node("AffineGrid", [theta], consts={"size": np.array([2, 3, 2, 4, 5], "int64")},
                       align_corners=align), [theta])


def test_swish_where_the_opset_has_it():
    from ember.frontend.onnx import OnnxImportError

    x = rand(3, 4)
    model = one_node("Swish", [x], opset=24, alpha=0.7)
    try:
        import_onnx(model)
    except OnnxImportError as e:
        pytest.skip(f"opset 24 is not imported yet: {e}")
    check(model, [x])


def test_integer_convolutions_per_channel():
    import ember

    x = RNG.integers(0, 255, (1, 3, 7, 6)).astype("uint8")
    w = RNG.integers(-128, 127, (4, 3, 3, 3)).astype("int8")
    conv = {"kernel_shape": (3, 3), "pads": (1, 0, 1, 1), "strides": (2, 1)}
    model = one_node("ConvInteger", [x], consts={"w": w, "xz": np.array(7, "uint8"),
                                                 "wz": RNG.integers(-5, 5, 4).astype("int8")}, **conv)
    check(model, [x])
    qconsts = {"xs": np.array(0.02, "float32"), "xz": np.array(12, "uint8"), "w": w,
               "ws": RNG.uniform(0.01, 0.05, 4).astype("float32"), "wz": np.zeros(4, "int8"),
               "ys": np.array(0.7, "float32"), "yz": np.array(90, "uint8"),
               "b": RNG.integers(-500, 500, 4).astype("int32")}
    model = one_node("QLinearConv", [x], consts=qconsts, **conv)
    graph = check(model, [x])
    np.testing.assert_array_equal(ember.compile(graph)(x), evaluate(graph, x)[0])


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64"])
def test_bit_shift_wraps_and_overshifts_to_zero(dtype):
    import ember

    width = np.iinfo(dtype).bits
    x = RNG.integers(0, np.iinfo(dtype).max, (3, 7), endpoint=True, dtype=dtype)
    s = RNG.integers(0, width + 3, (3, 7)).astype(dtype)
    for direction in ("LEFT", "RIGHT"):
        model = one_node("BitShift", [x, s], direction=direction)
        graph = check(model, [x, s])
        expected = np.left_shift(x, s) if direction == "LEFT" else np.right_shift(x, s)
        np.testing.assert_array_equal(np.where(s < width, expected, 0), evaluate(graph, x, s)[0])
        np.testing.assert_array_equal(ember.compile(graph)(x, s), evaluate(graph, x, s)[0])


def test_inverse_trigonometric_and_hyperbolic():
    for op, (low, high) in {"Asin": (-1, 1), "Acos": (-1, 1), "Atan": (-9, 9), "Asinh": (-9, 9), "Acosh": (1, 9),
                            "Atanh": (-0.9, 0.9)}.items():
        x = RNG.uniform(low, high, (4, 5)).astype("float32")
        check(one_node(op, [x]), [x])


def test_stft_windows_mel_eye_like():
    signal = rand(2, 40, 1)
    window = np.hanning(12).astype("float32")
    for onesided in (0, 1):
        model = one_node("STFT", [signal], consts={"step": np.array(5, "int64"), "window": window},
                         node_inputs=["x0", "step", "window"], onesided=onesided)
        check(model, [signal], 1e-4, 1e-4)
    model = one_node("STFT", [signal], consts={"step": np.array(7, "int64"), "n": np.array(9, "int64")},
                     node_inputs=["x0", "step", "", "n"], onesided=0)  # (ONNX infers 9 bins for onesided)
    check(model, [signal], 1e-4, 1e-4)
    x = rand(3)  # unused data input of the one-node helper
    for op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
        for periodic in (0, 1):
            check(one_node(op, [x], consts={"size": np.array(11, "int64")}, node_inputs=["size"], periodic=periodic),
                  [x])
    consts = {"bins": np.array(8, "int64"), "n": np.array(64, "int64"), "rate": np.array(16000, "int64"),
              "low": np.array(20.0, "float32"), "high": np.array(7600.0, "float32")}
    check(one_node("MelWeightMatrix", [x], consts=consts, node_inputs=list(consts)), [x])
    for k in (-1, 0, 2):
        check(one_node("EyeLike", [rand(4, 6)], k=k, dtype=TensorProto.INT32), [rand(4, 6)])

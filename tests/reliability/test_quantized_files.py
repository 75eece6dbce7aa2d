"""Quantized models from files, malformed: a MatMulNBits whose attributes and data disagree, a
QuantizeLinear of values past the integer type (1e9, an infinity, a scale of 0) against ONNX
Runtime, per-axis scales of the wrong length or axis, a DequantizeLinear whose zero point is of
another type than x, GGUF files that are missing, cut short, not GGUF or whose heads do not divide
the embedding, and a tensorize given something other than an intrinsic. Each is an EmberError
naming the node, tensor or file (never numpy's reshape error, a wrapped integer or a
transformers ValueError)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember import te
from ember.errors import ScheduleError, WeightsFileError
from ember.frontend.onnx.node import OnnxImportError

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng()
K, N = 64, 8


def nbits(b_blocks: int = K // 32, scales: int = N * K // 32, zero_points=None, bias: int | None = None, **attrs):
    """A MatMulNBits (block 32) of A (2, K), its B of `b_blocks` blocks a column and `scales` scales."""
    inits = [numpy_helper.from_array(RNG.integers(0, 256, (N, b_blocks, 16), dtype=np.uint8), "B"),
             numpy_helper.from_array(RNG.uniform(0.01, 0.1, scales).astype(np.float32), "scales")]
    names = ["A", "B", "scales", ""]
    if zero_points is not None:
        inits.append(numpy_helper.from_array(zero_points, "zp"))
        names[3] = "zp"
    if bias is not None:
        inits.append(numpy_helper.from_array(RNG.standard_normal(bias).astype(np.float32), "bias"))
        names += ["", "bias"]
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft",
                            **{"K": K, "N": N, "bits": 4, "block_size": 32, **attrs})
    graph = helper.make_graph([node], "nbits", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, K])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, N])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("model, says", [
    (lambda: nbits(b_blocks=1), r"input 1 \(B\) uint8 \(8, 1, 16\) has 128 elements; K, N and block_size give it 256"),
    (lambda: nbits(scales=7), r"input 2 \(scales\) float32 \(7,\) has 7 elements; .* give it 16"),
    (lambda: nbits(zero_points=np.zeros(3, np.uint8)), r"input 3 \(zero_points\) uint8 \(3,\) has 3 elements"),
    (lambda: nbits(zero_points=np.zeros(16, np.int32)), "zero_points of dtype int32"),
    (lambda: nbits(bias=3), r"input 5 \(bias\) float32 \(3,\) has 3 elements; .* give it 8"),
    (lambda: nbits(N=0), "K=64, N=0: MatMulNBits needs both attributes, positive"),
])
def test_matmul_nbits_whose_data_disagree_is_named(model, says):
    with pytest.raises(OnnxImportError, match=says):
        ember.compile(model())


def quantize_linear(scale, zero_point, axis: int | None = None, op: str = "QuantizeLinear",
                    x_type=TensorProto.FLOAT, y_type=TensorProto.UINT8):
    inits = [numpy_helper.from_array(np.asarray(scale, np.float32), "s"),
             numpy_helper.from_array(np.asarray(zero_point), "z")]
    node = helper.make_node(op, ["x", "s", "z"], ["y"], **({} if axis is None else {"axis": axis}))
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info("x", x_type, [2, 4])],
                              [helper.make_tensor_value_info("y", y_type, [2, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_quantize_linear_saturates_as_onnxruntime():
    """Values past the type (1e9, infinities, anything over a scale of 0) saturate as ONNX Runtime's
    do; they wrapped to INT_MIN in the int32 cast, so 1e9 quantized to 0."""
    x = RNG.uniform(-3, 3, (2, 4)).astype(np.float32)
    x[0, :3] = 1e9, -np.inf, np.inf
    for scale, zero in ((0.1, np.uint8(128)), (0.0, np.uint8(3)), (0.05, np.int8(-4))):
        y_type = TensorProto.UINT8 if zero.dtype == np.uint8 else TensorProto.INT8
        model = quantize_linear(scale, zero, y_type=y_type)
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        got = ember.compile(model, target="python")(x)
        np.testing.assert_array_equal(got, want[0], err_msg=f"scale {scale}, zero point {zero!r}")


@pytest.mark.parametrize("model, says", [
    (lambda: quantize_linear([0.1, 0.2, 0.3], np.array([1, 2, 3], np.uint8), axis=1),
     r"per-axis scale or zero point must be 1-D of the length of axis 1 \(4\), got shape \(3,\)"),
    (lambda: quantize_linear([0.1] * 4, np.zeros(4, np.uint8), axis=5), "axis 5 is outside the input's 2 axes"),
    (lambda: quantize_linear(0.1, np.int8(1), op="DequantizeLinear", x_type=TensorProto.UINT8,
                             y_type=TensorProto.FLOAT), "x is uint8 and its zero point int8"),
])
def test_quantization_operators_out_of_spec_are_named(model, says):
    with pytest.raises(OnnxImportError, match=says):
        ember.compile(model())


def write_gguf(path, heads: int = 2, embedding: int = 64, eps=1e-5, token_embd=None, bos=None) -> None:
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_block_count(1)
    w.add_context_length(32)
    w.add_embedding_length(embedding)
    w.add_feed_forward_length(4 * embedding)
    w.add_head_count(heads)
    if isinstance(eps, str):
        w.add_string("gpt2.attention.layer_norm_epsilon", eps)
    else:
        w.add_layer_norm_eps(eps)
    if bos is not None:
        w.add_string("tokenizer.ggml.bos_token_id", bos)
    w.add_tensor("token_embd.weight", RNG.standard_normal((10, embedding)).astype(np.float32)
                 if token_embd is None else token_embd)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_files_ember_cannot_read_are_named(tmp_path):
    from ember.frontend.gguf import load_gguf

    write_gguf(tmp_path / "whole.gguf")
    data = (tmp_path / "whole.gguf").read_bytes()
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file " * 8)
    for name, cut in (("cut_header", 20), ("cut_tensor", len(data) - 100)):
        (tmp_path / f"{name}.gguf").write_bytes(data[:cut])
    for name in ("missing", "junk", "cut_header", "cut_tensor"):
        with pytest.raises(WeightsFileError, match=rf"{name}.gguf: cannot be read as a GGUF file \(missing, another "
                                                   r"format or version, or truncated\)"):
            load_gguf(tmp_path / f"{name}.gguf")
    write_gguf(tmp_path / "heads.gguf", heads=7)
    with pytest.raises(WeightsFileError, match="7 heads over 7 key/value heads do not divide an embedding of 64"):
        load_gguf(tmp_path / "heads.gguf")
    # (each raised a bare IndexError or ValueError)
    write_gguf(tmp_path / "vector.gguf", token_embd=RNG.standard_normal(64).astype(np.float32))
    with pytest.raises(WeightsFileError, match=r"tensor 'token_embd.weight' has 1 dimension\(s\) \(64,\); ember needs "
                                               r"a \(vocabulary, embedding\) matrix"):
        load_gguf(tmp_path / "vector.gguf")
    for eps in ("small", -1.0):
        write_gguf(tmp_path / "eps.gguf", eps=eps)
        with pytest.raises(WeightsFileError, match=rf"metadata key 'gpt2.attention.layer_norm_epsilon' is {eps!r}; "
                                                   r"ember needs a number, 0 or more"):
            load_gguf(tmp_path / "eps.gguf")
    write_gguf(tmp_path / "bos.gguf", bos="<s>")
    with pytest.raises(WeightsFileError, match="bos.gguf: metadata key 'tokenizer.ggml.bos_token_id' is '<s>'; ember "
                                               "needs a token id"):
        load_gguf(tmp_path / "bos.gguf")


@pytest.mark.parametrize("intrin", [42, None, ["add4"]])
def test_tensorize_onto_something_not_an_intrinsic_is_named(intrin):
    a = te.placeholder((8,), name="a")
    c = te.compute((8,), lambda i: a[i] * 2, name="c")
    s = te.create_schedule(c.op)
    with pytest.raises(ScheduleError, match=f"a tensor intrinsic is given by its name .* got {type(intrin).__name__}"):
        s[c].tensorize(c.op.axis[0], intrin)

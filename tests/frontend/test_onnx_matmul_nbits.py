"""com.microsoft MatMulNBits (ember/frontend/onnx/converters/matmul_nbits.py) imported onto
gemm_nbits: a (batch, seq, K) activation by 4-bit weights with group scales, without zero points,
with packed uint8 and with float zero points, and a bias, against ONNX Runtime's own kernel on
the same file; a form ember does not take is an UnsupportedOpError naming it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.frontend.onnx import OnnxImportError
from ember.ops import UnsupportedOpError
from ember.target import Target

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng()
K, N = 128, 40


def _model(block: int, zeros: str, bits: int = 4, bias: bool = True, accuracy_level: int = 0,
           b_dtype=np.uint8) -> onnx.ModelProto:
    blocks = K // block
    b = RNG.integers(0, 256, (N, blocks, block // 2), dtype=np.uint8).view(b_dtype)
    inits = [numpy_helper.from_array(b, "B"),
             numpy_helper.from_array(RNG.uniform(0.01, 0.1, N * blocks).astype(np.float32), "scales")]
    names = ["A", "B", "scales"]
    if zeros == "uint8":
        inits.append(numpy_helper.from_array(RNG.integers(0, 256, (N * -(-blocks // 2),), dtype=np.uint8), "zp"))
    elif zeros == "float":
        inits.append(numpy_helper.from_array(RNG.uniform(0, 15, N * blocks).astype(np.float32), "zp"))
    names.append("zp" if zeros != "none" else "")
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(N).astype(np.float32), "bias"))
        names += ["", "bias"]
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft",
                            K=K, N=N, bits=bits, block_size=block, accuracy_level=accuracy_level)
    graph = helper.make_graph([node], "nbits", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, "seq", K])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, "seq", N])], inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


@pytest.mark.parametrize("block,zeros,bias", [(32, "none", True), (64, "uint8", False), (128, "float", True)])
def test_matmul_nbits_against_onnxruntime(block, zeros, bias):
    model = _model(block, zeros, bias=bias)
    a = RNG.standard_normal((2, 3, K)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"A": a})[0]
    compiled = ember.compile(model)
    assert [n.op for n in compiled.graph.nodes if n.op == "gemm_nbits"] == ["gemm_nbits"]
    np.testing.assert_allclose(compiled(a), want, rtol=1e-4, atol=1e-4)


def test_accuracy_level_4_prefill_rows_in_int8():
    """accuracy_level 4 lets a prefill's rows be int8 (the VNNI products, where the target has
    them: passes/quantize_rows.py), as ONNX Runtime's kernel quantizes them; a step's one row stays float32."""
    model = _model(32, "uint8", accuracy_level=4)
    compiled = ember.compile(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    int8 = {"avx512vnni", "avx512bw"} <= Target("c").features
    assert {n.attrs["act"] for n in compiled.graph.nodes if n.op == "gemm_nbits"} == ({"int8_rows"} if int8 else
                                                                                    {"auto"})
    for seq in (1, 24):
        a = RNG.standard_normal((2, seq, K)).astype(np.float32)
        want = session.run(None, {"A": a})[0]
        assert np.linalg.norm(compiled(a) - want) / np.linalg.norm(want) < 0.03


def test_unsupported_forms_are_named():
    with pytest.raises(UnsupportedOpError, match="bits=8, block_size=32"):
        ember.compile(_model(32, "none", bits=8))
    with pytest.raises(UnsupportedOpError, match="block_size=16"):
        ember.compile(_model(16, "none"))
    # (ONNX Runtime refuses it too; its high nibbles were read as -8..-1, a wrong result)
    with pytest.raises(OnnxImportError, match="B is int8: MatMulNBits takes uint8 bytes of two 4-bit codes each"):
        ember.compile(_model(32, "none", b_dtype=np.int8))

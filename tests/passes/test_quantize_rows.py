"""int8 products (ember/passes/quantize_rows.py): on a target with VNNI, gemm_nbits nodes whose x
may have many rows quantize it in their own kernel (constant codes, packed once in the products'
layout, the graph computing what it did) or read it quantized by one quantize_rows per x (codes
given at run time), a decode step's (VBMI too) by one quantize_groups per x and group; a target
without VNNI (a decode step: without VBMI) and K not a multiple of 32 keep the float32 path."""

import numpy as np
import pytest
from pass_check import ops

from ember.graph import Graph, TensorType
from ember.ops.evaluate import evaluate
from ember.ops.nodes import add_op
from ember.passes.quantize_rows import quantize_rows
from ember.passes.quantize_weights import WeightFormat, quantize_weights
from ember.target import Target
from ember.tir.nbits import unpack_vnni

RNG = np.random.default_rng()
VNNI = Target("c", cflags="-O2 -march=x86-64-v4 -mavx512vnni")
VBMI = Target("c", cflags="-O2 -march=x86-64-v4 -mavx512vnni -mavx512vbmi")


def _graph(rows, k=64, weights="int8"):
    """Two gemms of one x and a third of the first's result, weights int8 (or int4 per group of 32)."""
    g = Graph()
    x = g.add_input("x", TensorType((rows, k)))
    a, = add_op(g, "gemm", [x, g.add_constant(RNG.standard_normal((k, 64)).astype("float32"), "wa")])
    b, = add_op(g, "gemm", [x, g.add_constant(RNG.standard_normal((k, 40)).astype("float32"), "wb")])
    c, = add_op(g, "gemm", [a, g.add_constant(RNG.standard_normal((64, 40)).astype("float32"), "wc")])
    g.set_outputs([b, c])
    return quantize_weights(g, WeightFormat.of(weights, 32 if weights == "int4" else None))


def test_a_prefill_of_constant_codes_quantizes_its_rows_in_the_kernel():
    out = quantize_rows(_graph("seq"), VNNI)
    assert ops(out) == ["gemm_nbits"] * 3
    assert all(n.attrs["act"] == "int8_rows" and n.attrs["packed"] for n in out.nodes)


def test_a_prefill_of_codes_given_at_run_time_reads_its_rows_quantized_once_per_x():
    g = Graph()
    x = g.add_input("x", TensorType(("seq", 64)))
    before = _graph("seq")
    products = [n for n in before.nodes if n.op == "gemm_nbits"][:2]
    codes = [g.add_input(f"codes{i}", n.inputs[1].type) for i, n in enumerate(products)]
    outs = [add_op(g, "gemm_nbits", [x, c, g.add_constant(before.constants[n.inputs[2].name], f"s{i}")], n.attrs)[0]
            for i, (c, n) in enumerate(zip(codes, products))]
    g.set_outputs(outs)
    out = quantize_rows(g, VNNI)
    assert ops(out) == ["quantize_rows", "gemm_nbits", "gemm_nbits"]
    first, a, b = out.nodes
    assert a.inputs[1:3] == b.inputs[1:3] == first.outputs
    assert all(n.attrs["act"] == "int8" and not n.attrs["packed"] for n in (a, b))


@pytest.mark.parametrize("weights,bits", [("int8", 8), ("int4", 4)])
def test_a_prefills_codes_are_packed_once_in_the_products_layout(weights, bits):
    before = _graph(13, weights=weights)
    out = quantize_rows(before, VNNI)
    products = [n for n in out.nodes if n.op == "gemm_nbits"]
    assert all(n.attrs["packed"] for n in products)
    olds = [n for n in before.nodes if n.op == "gemm_nbits"]
    for old, new in zip(olds, products):
        codes, packed = before.constants[old.inputs[1].name], out.constants[new.inputs[1].name]
        assert np.array_equal(unpack_vnni(packed, bits, codes.shape[1]), codes)
    x = RNG.standard_normal((13, 64)).astype(np.float32)
    for want, got in zip(evaluate(before, x), evaluate(out, x), strict=True):
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.02  # the rows' 8-bit rounding


def test_a_decode_step_other_targets_and_odd_k_keep_float32_rows():
    for graph, target in ((_graph(1), VNNI), (_graph("seq"), Target("c", cflags="-O2 -march=x86-64-v3")),
                          (_graph("seq"), Target("python"))):
        assert "quantize_rows" not in ops(quantize_rows(graph, target))
    assert ops(quantize_rows(_graph("seq", k=48), VNNI))[:2] == ["gemm_nbits", "gemm_nbits"]  # x's K: 48


def test_a_decode_steps_int4_gemvs_read_their_row_quantized_per_group_once_per_x():
    out = quantize_rows(_graph(1, weights="int4"), VBMI)
    assert ops(out) == ["quantize_groups", "gemm_nbits", "gemm_nbits", "quantize_groups", "gemm_nbits"]
    first, a, b = out.nodes[:3]
    assert first.attrs["group"] == 32 and a.inputs[1:3] == b.inputs[1:3] == first.outputs
    assert all(n.attrs["act"] == "int8_groups" for n in out.nodes if n.op == "gemm_nbits")
    for target in (VNNI, Target("python")):  # no VBMI; no VNNI
        assert ops(quantize_rows(_graph(1, weights="int4"), target))[:2] == ["gemm_nbits", "gemm_nbits"]


def test_a_decode_steps_int8_gemvs_read_their_row_quantized_per_group_once_per_x():
    out = quantize_rows(_graph(1, k=192), VBMI)
    assert ops(out) == ["quantize_groups", "gemm_nbits", "gemm_nbits", "quantize_groups", "gemm_nbits"]
    first, a, b, second, c = out.nodes
    assert a.attrs["group"] == 0 and a.inputs[1:3] == b.inputs[1:3] == first.outputs
    assert (first.attrs["group"], second.attrs["group"]) == (32, 32)  # per channel: llama.cpp's Q8_0 blocks
    assert all(n.attrs["act"] == "int8_groups" for n in out.nodes if n.op == "gemm_nbits")
    assert ops(quantize_rows(_graph(1, k=96), VBMI))[0] == "quantize_groups"
    assert ops(quantize_rows(_graph(1, k=48), VBMI))[:2] == ["gemm_nbits", "gemm_nbits"]  # 32 does not divide 48

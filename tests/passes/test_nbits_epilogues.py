"""A residual added to a prefill's weight-only quantized product, and silu(gate) * up of a LLaMA
MLP's siblings (ember/passes/nbits_epilogues.py), are computed by the product's kernel (gemm_nbits'
act int8_rows, residual and glu): the graph computes what it did (the same quantized rows, so
within float32 rounding); a sum that broadcasts, a product read twice, a product of rows quantized
apart (act int8) and halves that split a panel keep their add or mul."""

import numpy as np
import pytest
from pass_check import check_same, ops

from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.dce import dce
from ember.passes.nbits_epilogues import nbits_epilogues
from ember.passes.quantize_rows import quantize_rows
from ember.passes.quantize_weights import WeightFormat, quantize_weights
from ember.target import Target

RNG = np.random.default_rng()
M = 13  # rows: a prefill's (4 or more)
VNNI = Target("c", cflags="-O2 -march=x86-64-v4 -mavx512vnni")
VBMI = Target("c", cflags="-O2 -march=x86-64-v4 -mavx512vnni -mavx512vbmi")  # a decode step's GEMV on VNNI too


def _layer(weights="int4", residual_shape=(1, M, 40), swap=False, reread=False):
    """x (M, 64) times a quantized weight, reshaped to (1, M, 40), plus r; the product's
    output also an output of its own with `reread`."""
    g = Graph()
    x = g.add_input("x", TensorType((M, 64)))
    r = g.add_input("r", TensorType(residual_shape))
    (y,) = add_op(g, "gemm", [x, g.add_constant(RNG.standard_normal((64, 40)).astype("float32"), "w")])
    (v,) = add_op(g, "reshape", [y], {"shape": (1, M, 40)})
    (s,) = add_op(g, "add", [r, v] if swap else [v, r])
    g.set_outputs([s, y] if reread else [s])
    return quantize_rows(quantize_weights(g, WeightFormat.of(weights, 32 if weights == "int4" else None)), VNNI)


@pytest.mark.parametrize("weights,swap", [("int8", False), ("int4", True)])
def test_the_residual_is_added_by_the_products_kernel(weights, swap):
    before = _layer(weights, swap=swap)
    after = dce(nbits_epilogues(before))
    assert ops(after) == ["reshape", "gemm_nbits", "reshape"]
    product = after.nodes[1]
    assert product.attrs["residual"] and product.attrs["act"] == "int8_rows"
    assert product.inputs[-1] is after.nodes[0].outputs[0]
    check_same(before, after, rtol=1e-4, atol=1e-4)


def test_a_broadcast_a_product_read_twice_and_rows_quantized_apart_keep_their_add():
    for before in (_layer(residual_shape=(40,)), _layer(reread=True)):
        assert "add" in ops(dce(nbits_epilogues(before)))
    g = Graph()  # codes given at run time: quantize_rows' rows, act int8
    x, r = g.add_input("x", TensorType((M, 64))), g.add_input("r", TensorType((1, M, 40)))
    codes = g.add_input("codes", TensorType((2, 64, 32), "int8"))
    scales = g.add_constant(RNG.uniform(0.5, 1, 64).astype("float32"), "s")
    (y,) = add_op(g, "gemm_nbits", [x, codes, scales], {"bits": 8, "n": 40, "act": "auto"})
    (v,) = add_op(g, "reshape", [y], {"shape": (1, M, 40)})
    g.set_outputs(add_op(g, "add", [v, r]))
    quantized = quantize_rows(g, VNNI)
    assert nbits_epilogues(quantized) is quantized


def _mlp(half=64, swap=False):
    """x (M, 64) times the gate and up weights side by side (as fuse_siblings leaves them),
    reshaped to (1, M, 2 half), split, silu(gate) * up."""
    g = Graph()
    x = g.add_input("x", TensorType((M, 64)))
    (y,) = add_op(g, "gemm", [x, g.add_constant(RNG.standard_normal((64, 2 * half)).astype("float32"), "w")])
    (v,) = add_op(g, "reshape", [y], {"shape": (1, M, 2 * half)})
    gate, up = add_op(g, "split", [v], {"axis": -1, "sizes": (half, half)})
    (a,) = add_op(g, "silu", [gate])
    g.set_outputs(add_op(g, "mul", [up, a] if swap else [a, up]))
    return quantize_rows(quantize_weights(g, WeightFormat.of("int4", 32)), VNNI)


@pytest.mark.parametrize("swap", [False, True])
def test_silu_of_the_gate_times_up_is_computed_by_the_products_kernel(swap):
    before = _mlp(swap=swap)
    after = dce(nbits_epilogues(before))
    assert ops(after) == ["gemm_nbits", "reshape"]
    assert after.nodes[0].attrs["glu"] == "silu" and after.nodes[0].outputs[0].shape == (M, 64)
    check_same(before, after, rtol=1e-4, atol=1e-4)


def test_halves_that_split_a_panel_keep_their_mul():
    assert "mul" in ops(dce(nbits_epilogues(_mlp(half=48))))


def _gelu_layer(rows=M, form="ten", swap=False, reread=False, cube="mul", c=0.044715):
    """x (rows, 64) times a quantized weight, reshaped to (1, rows, 96), through GELU: torch's tanh
    formula in ten operators as a trace leaves it (`swap`: every add's and mul's operands reversed; `cube`:
    x^3 as x * x * x or pow(x, 3); `c` its cube's coefficient), or the gelu op (form "tanh" or
    "none", its approximate); the tanh also an output with `reread`."""
    g = Graph()
    x = g.add_input("x", TensorType((rows, 64)))
    (y,) = add_op(g, "gemm", [x, g.add_constant(RNG.standard_normal((64, 96)).astype("float32") / 4, "w")])
    (v,) = add_op(g, "reshape", [y], {"shape": (1, rows, 96)})

    def op(name, a, b):
        b = g.add_constant(np.float32(b)) if isinstance(b, float) else b
        return add_op(g, name, [b, a] if swap and name != "pow" else [a, b])[0]

    if form == "ten":
        x3 = op("mul", op("mul", v, v), v) if cube == "mul" else op("pow", v, 3.0)
        (t,) = add_op(g, "tanh", [op("mul", op("add", v, op("mul", x3, c)), float(np.sqrt(2 / np.pi)))])
        g.set_outputs([op("mul", op("mul", v, 0.5), op("add", t, 1.0))] + ([t] if reread else []))
    else:
        g.set_outputs(add_op(g, "gelu", [v], {"approximate": form}))
    return quantize_rows(quantize_weights(g, WeightFormat.of("int8", None)), VBMI)


@pytest.mark.parametrize("rows,form,swap,cube,activation", [
    (M, "ten", False, "mul", "gelu_tanh"), (M, "ten", True, "pow", "gelu_tanh"), (1, "ten", False, "mul", "gelu_tanh"),
    (M, "tanh", False, "mul", "gelu_tanh"), (1, "none", False, "mul", "gelu")])
def test_gelu_of_the_product_is_computed_by_the_products_kernel(rows, form, swap, cube, activation):
    """GPT-2's GELU (torch's ten operators, in either operand order, x^3 either way) and the gelu
    op after a prefill's product (act int8_rows) and a decode step's GEMV (1 row: act int8_groups)."""
    before = _gelu_layer(rows, form, swap, cube=cube)
    after = dce(nbits_epilogues(before))
    product = next(n for n in after.nodes if n.op == "gemm_nbits")
    assert ops(after)[-2:] == ["gemm_nbits", "reshape"] and not {"tanh", "gelu", "mul"} & set(ops(after))
    assert product.attrs["activation"] == activation
    assert product.attrs["act"] == ("int8_rows" if rows > 1 else "int8_groups")
    check_same(before, after, rtol=1e-4, atol=1e-4)


def test_another_formula_or_a_value_read_elsewhere_keeps_the_operators():
    for before in (_gelu_layer(c=0.04), _gelu_layer(reread=True)):
        assert "tanh" in ops(dce(nbits_epilogues(before)))

"""Weight-only quantization (ember/passes/quantize_weights.py): a gemm's constant float32 weight
becomes gemm_nbits codes (a tied weight read by two gemms quantized once, a transposed one
too); a weight int4's groups do not divide, a non-constant weight or alpha != 1 stay gemm; the
compiled model against the float32 NumPy product within the format's error; bad options are
ConfigErrors."""

import numpy as np
import pytest
from pass_check import ops

import ember
from ember.errors import ArgumentTypeError, ConfigError
from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.passes.quantize_weights import WeightFormat, quantize_weights

RNG = np.random.default_rng()


def _rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


def _graph(k=64, alpha=1.0):
    """y = x w + c and z = x w'^T (w' tied: the same constant read transposed twice)."""
    g = Graph()
    x = g.add_input("x", TensorType(("m", k)))
    w, tied = g.add_constant(_rand(k, 40), "w"), g.add_constant(_rand(50, k), "tied")
    y, = add_op(g, "gemm", [x, w, g.add_constant(_rand(40), "c")], {"alpha": alpha}, name="y")
    z, = add_op(g, "gemm", [x, tied], {"trans_b": True}, name="z")
    z2, = add_op(g, "gemm", [x, tied], {"trans_b": True}, name="z2")
    g.set_outputs([y, z, z2])
    return g


def test_gemms_become_gemm_nbits_and_a_tied_weight_is_quantized_once():
    out = quantize_weights(_graph(), WeightFormat.of("int4", 32, zero_points=True))
    assert ops(out) == ["gemm_nbits"] * 3
    z, z2 = out.nodes[1:]
    assert [v.name for v in z.inputs[1:]] == [v.name for v in z2.inputs[1:]]
    read = {v.name for n in out.nodes for v in n.inputs if out.is_constant(v)}
    assert len(read) == 3 + 3 + 1  # (codes, scales, offsets) of w and of tied, and w's bias
    g = _graph()
    assert quantize_weights(g, None) is g


def test_what_the_layout_cannot_take_stays_gemm():
    with pytest.warns(RuntimeWarning, match=r"2 weight\(s\) keep float32, their K not a multiple of 32 \(w, tied\)"):
        assert ops(quantize_weights(_graph(k=48), WeightFormat.of("int4", 32))) == ["gemm"] * 3
    assert ops(quantize_weights(_graph(alpha=0.5), WeightFormat.of("int8"))) == ["gemm", "gemm_nbits", "gemm_nbits"]


@pytest.mark.parametrize("weights,group,zero_points,tol", [("int8", None, False, 0.03), ("int4", 32, False, 0.2),
                                                          ("int4", 64, True, 0.2)])
def test_compiled_against_float32(weights, group, zero_points, tol):
    g = _graph()
    model = ember.compile(g, weights=weights, group_size=group, zero_points=zero_points)
    c = dict(g.constants)
    for rows in (3, 20):  # 20: the rows' int8 products where the machine has VNNI (passes/quantize_rows.py)
        x = _rand(rows, 64)
        want = [x @ c["w"] + c["c"], x @ c["tied"].T, x @ c["tied"].T]
        for got, ref in zip(model(x), want):
            assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < tol


def test_ember_quantize_with_weights_is_weight_only():
    g = _graph()
    model = ember.quantize(g, weights="int8")
    assert {n.op for n in model.graph.nodes if n.op.startswith("gemm")} == {"gemm_nbits"}
    x = _rand(2, 64)
    np.testing.assert_array_equal(model(x)[0], ember.compile(g, weights="int8")(x)[0])
    with pytest.raises(ArgumentTypeError, match="weights only"):
        ember.quantize(g, calibration_data=[x], weights="int4")


def test_bad_options_are_config_errors():
    with pytest.raises(ConfigError, match="weights must be one of"):
        WeightFormat.of("int2")
    with pytest.raises(ConfigError, match="group_size must be one of"):
        ember.compile(_graph(), weights="int4", group_size=48)
    with pytest.raises(ConfigError, match="zero_points are for int4"):
        WeightFormat.of("int8", zero_points=True)

"""ember.passes.kv_cache (ember.compile's kv_cache="bf16" or "int8"): the graph inputs that are a
decode step's cache read in place become bfloat16 inputs, or int8 rows with a scale each, read by
the attention converted in registers (checked against the operator's reference on the same stored
values, rtol 1e-4, atol 1e-5; int8's rows also against the float32 attention of the rows before
they were quantized, atol 2e-2: a row's rounding, max |row| / 254); an input something else reads
stays float32, and int8 is only for one query's attention, whose step returns its own rows as
int8 rows (bit-exact with quantize_rows); an unknown option is a ConfigError naming the choices."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ember
from ember.errors import ConfigError
from ember.graph.core import Graph, TensorType
from ember.ops.attention import SDPA
from ember.ops.nodes import add_op
from ember.ops.registry import get
from ember.passes.kv_cache import kv_cache
from ember.tir.kv_int8 import quantize_rows

RNG = np.random.default_rng()
ATTRS = {"layout": "bshd", "appended": True, "gqa": True}


def step_graph(past: int = 40, k_read_elsewhere: bool = False, queries: int = 1) -> Graph:
    """One decode attention: 4 query heads over 2 key/value heads, the cache (k, v) and the
    step's row (kn, vn); optionally k also a graph output's input."""
    g = Graph("step")
    q = g.add_input("q", TensorType((1, queries, 4, 16)))
    k, v = (g.add_input(n, TensorType((1, past, 2, 16))) for n in "kv")
    kn, vn = (g.add_input(n, TensorType((1, 1, 2, 16))) for n in ("kn", "vn"))
    (out,) = add_op(g, SDPA, [q, k, v, kn, vn], ATTRS)
    outs = [out]
    if k_read_elsewhere:
        outs += add_op(g, "exp", [k])
    g.set_outputs(outs)
    return g


def test_cache_inputs_become_bf16_and_are_read_in_registers():
    past = 40
    cm = ember.compile(step_graph(past), kv_cache="bf16")
    assert [s.dtype for s in cm.spec.inputs] == ["float32", "bfloat16", "bfloat16", "float32", "float32"]
    assert "ember_attention_decode_none_bfloat16_appended_16_16_2(" in cm.source
    q = RNG.uniform(-1, 1, (1, 1, 4, 16)).astype("float32")
    kn, vn = RNG.uniform(-1, 1, (2, 1, 1, 2, 16)).astype("float32")
    k, v = RNG.uniform(-1, 1, (2, 1, past, 2, 16)).astype(ml_dtypes.bfloat16)
    (want,) = get(SDPA).reference([q, k, v, kn, vn], {**get(SDPA).attrs, **ATTRS})
    np.testing.assert_allclose(cm(q, k, v, kn, vn), want, rtol=1e-4, atol=1e-5)


def test_cache_inputs_become_int8_rows_with_scales():
    past = 70
    cm = ember.compile(step_graph(past), kv_cache="int8")
    assert [(s.dtype, s.shape) for s in cm.spec.inputs[1:3]] == [("int8", (1, past, 2, 20))] * 2
    assert "ember_attention_decode_none_int8_appended_16_16_2(" in cm.source
    q = RNG.uniform(-1, 1, (1, 1, 4, 16)).astype("float32")
    kn, vn = RNG.uniform(-1, 1, (2, 1, 1, 2, 16)).astype("float32")
    k, v = RNG.uniform(-1, 1, (2, 1, past, 2, 16)).astype("float32")
    kq, vq = quantize_rows(k), quantize_rows(v)
    attrs = {**get(SDPA).attrs, **ATTRS}
    got = cm(q, kq, vq, kn, vn)
    np.testing.assert_allclose(got, get(SDPA).reference([q, kq, vq, kn, vn], attrs)[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, get(SDPA).reference([q, k, v, kn, vn], attrs)[0], atol=2e-2)


def test_int8_step_returns_its_rows_as_int8_rows():
    """The step's own key and value, graph outputs as RowStep returns them, come out as int8 rows
    (kv_int8_rows) that are quantize_rows' bytes, so that the caller copies them."""
    g = Graph("step")
    q = g.add_input("q", TensorType((1, 1, 4, 16)))
    k, v = (g.add_input(n, TensorType((1, 30, 2, 16))) for n in "kv")
    kn, vn = (add_op(g, "neg", [g.add_input(n, TensorType((1, 1, 2, 16)))])[0] for n in ("kn", "vn"))
    (out,) = add_op(g, SDPA, [q, k, v, kn, vn], ATTRS)
    g.set_outputs([out, kn, vn])
    cm = ember.compile(g, kv_cache="int8")
    assert [(s.dtype, s.shape) for s in cm.spec.outputs[1:]] == [("int8", (1, 1, 2, 20))] * 2
    q, kn, vn = (RNG.uniform(-2, 2, s).astype("float32") for s in ((1, 1, 4, 16), (1, 1, 2, 16), (1, 1, 2, 16)))
    k, v = (quantize_rows(RNG.uniform(-1, 1, (1, 30, 2, 16)).astype("float32")) for _ in "kv")
    _, kq, vq = cm(q, k, v, kn, vn)
    np.testing.assert_array_equal(kq, quantize_rows(-kn))
    np.testing.assert_array_equal(vq, quantize_rows(-vn))


def test_int8_is_for_one_query_only():
    g = step_graph(queries=3)
    assert kv_cache(g, "int8") is g  # three queries: the staged attention, which reads no int8 rows
    assert [v.type.dtype for v in kv_cache(g, "bfloat16").inputs[1:3]] == ["bfloat16"] * 2


def test_an_input_read_elsewhere_stays_float32():
    g = step_graph(k_read_elsewhere=True)
    assert kv_cache(g, "bfloat16") is g  # k read elsewhere, and v with it: unchanged
    assert kv_cache(g, None) is g  # float32: unchanged


def test_unknown_option_is_named():
    with pytest.raises(ConfigError, match=r"kv_cache must be one of \['bf16', 'float32', 'int8'\], got 'int3'"):
        ember.compile(step_graph(), kv_cache="int3")

"""gemm_nbits (ember/ops/gemm_nbits.py): int8 per channel and per group, int4 per group
(symmetric, and with zero points) on the C target and the interpreter, for a GEMV (float32 rows, and
int8 rows per group on VNNI), a few rows and a prefill's block of rows, against the float64 product
of the NumPy dequantization, over a column count that leaves the last panel partial; the layout's
packing round-trips; bad inputs are OpTypeErrors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.graph.core import TensorType
from ember.ops import OpTypeError, infer_types
from ember.ops.registry import get
from ember.passes.quantize_weights import quantize_int4, quantize_int8
from ember.target import Target
from ember.testing import check_op_sizes
from ember.tir.nbits import (
    dequantize,
    dequantize_groups,
    pack_int4,
    pack_int8,
    pack_vnni,
    pad_columns,
    quantize_groups,
    quantize_rows,
    row_group,
    unpack,
)

RNG = np.random.default_rng()
K, N = 128, 75  # three panels, the last with 11 columns


def _inputs(bits: int, group: int = 0, zero_points: bool = False, bias: bool = True, k: int = K, n: int = N):
    w = RNG.standard_normal((k, n)).astype(np.float32)
    if bits == 8:
        parts = list(quantize_int8(w))
        if group:  # per group: the per-column scales varied down the rows
            vary = RNG.uniform(0.5, 2, (k // group, 1)).astype(np.float32)
            parts[1] = np.repeat(parts[1][None], k // group, 0) * vary
    else:
        codes, scales, offsets = quantize_int4(w, group, zero_points)
        parts = [codes, scales] + ([offsets] if zero_points else [])
    if bias:
        parts.append(pad_columns(RNG.standard_normal(n).astype(np.float32)))
    return parts, {"bits": bits, "group": group, "n": n, "offsets": zero_points}


@pytest.mark.parametrize("bits,group,zero_points,bias", [(8, 0, False, True), (8, 32, False, False),
                                                          (4, 32, False, False), (4, 64, True, True)])
def test_gemm_nbits_against_dequantized_product(bits, group, zero_points, bias):
    weights, attrs = _inputs(bits, group, zero_points, bias)
    types = [TensorType(("m", K), "float32")] + [TensorType(p.shape, p.dtype.name) for p in weights]
    sets = [[RNG.standard_normal((m, K)).astype(np.float32)] + weights for m in (1, 3, 70)]
    check_op_sizes("gemm_nbits", types, attrs, sets, rtol=1e-4, atol=1e-4, targets=("c", "python"))


@pytest.mark.parametrize("bits,group,zero_points,bias", [(8, 0, False, True), (8, 32, False, False),
                                                          (4, 128, False, True), (4, 64, True, False)])
def test_int8_products_against_reference(bits, group, zero_points, bias):
    """act int8: the rows quantized by quantize_rows, their products on VNNI (a scalar twin where
    the target has none) against the reference's, which computes the same quantized x; 3 rows take
    the float32 path, 70 and 13 (a partial register tile) the int8 one."""
    weights, attrs = _inputs(bits, group, zero_points, bias)
    types = [TensorType(("m", K), "float32"), TensorType(("m", K), "uint8"), TensorType(("m", 1 + K // 32), "float32")]
    types += [TensorType(p.shape, p.dtype.name) for p in weights]
    xs = [RNG.standard_normal((m, K)).astype(np.float32) for m in (3, 70, 13)]
    sets = [[x, *quantize_rows(x)] + weights for x in xs]
    check_op_sizes("gemm_nbits", types, {**attrs, "act": "int8"}, sets, rtol=1e-4, atol=1e-4, targets=("c", "python"))
    w = dequantize(*weights[:2], weights[2] if zero_points else None, bits)[:, :N]
    x = xs[1]
    op = get("gemm_nbits")
    (y,) = op.reference(sets[1], op.bind_attrs({**attrs, "act": "int8"}))
    exact = x @ w + (weights[-1][:N] if bias else 0)
    assert np.linalg.norm(y - exact) / np.linalg.norm(exact) < 0.02  # the rows' 8-bit rounding


def _rows_case(bits, group, zero_points, bias, residual, k=K, n=N):
    """Packed weights (pack_vnni, as ember.passes.quantize_rows packs constant ones), the types of
    gemm_nbits' act int8_rows on them and its attrs."""
    weights, attrs = _inputs(bits, group, zero_points, bias, k, n)
    packed = [pack_vnni(weights[0], bits, group, zero_points)] + weights[1:]
    types = [TensorType(("m", k), "float32")] + [TensorType(p.shape, p.dtype.name) for p in packed]
    types += [TensorType(("m", n), "float32")] if residual else []
    return weights, packed, types, {**attrs, "act": "int8_rows", "packed": True, "residual": residual}


@pytest.mark.parametrize("bits,group,zero_points,bias,residual", [
    (8, 0, False, True, True), (8, 32, False, False, False), (4, 128, False, True, False), (4, 64, True, False, True),
    (4, 32, True, True, True)])
def test_rows_quantized_in_the_kernel_against_reference(bits, group, zero_points, bias, residual):
    """act int8_rows: each block of rows quantized by the kernel (quantize_rows' formulas) and
    multiplied by every panel of packed codes, plus a residual, at every M (1 and 3 rows too, 13: a
    partial register tile, 70: two blocks, the last partial), against the reference on the same
    quantized rows (VNNI, and the scalar twin on AVX2), and the float64 product of the dequantized
    weight within the rows' 8-bit rounding."""
    weights, packed, types, attrs = _rows_case(bits, group, zero_points, bias, residual)
    sets = []
    for m in (1, 3, 13, 70):
        x = RNG.standard_normal((m, K)).astype(np.float32)
        sets.append([x, *packed] + ([RNG.standard_normal((m, N)).astype(np.float32)] if residual else []))
    runs = check_op_sizes("gemm_nbits", types, attrs, sets, rtol=1e-4, atol=1e-4, targets=("c", "python", AVX2))
    w = dequantize(*weights[:2], weights[2] if zero_points else None, bits)[:, :N]
    # the rows' 8-bit rounding (with zero points the codes times x are not centred, their error larger than y's)
    tol = 0.05 if zero_points else 0.02
    for (y,), inputs in zip(runs, sets):
        exact = inputs[0] @ w + (weights[-1][:N] if bias else 0) + (inputs[-1] if residual else 0)
        assert np.linalg.norm(y - exact) / np.linalg.norm(exact) < tol


@settings(max_examples=6, deadline=None)
@given(bits=st.sampled_from([4, 8]), group=st.sampled_from([0, 32, 64, 128]), zero_points=st.booleans(),
       groups=st.integers(1, 3), n=st.integers(1, 80), m=st.integers(1, 75), residual=st.booleans())
def test_rows_quantized_in_the_kernel_over_shapes(bits, group, zero_points, groups, n, m, residual):
    """act int8_rows over K (whole groups), N (a partial last panel) and M (partial blocks and
    register tiles), int8 per channel or group and int4 symmetric or with zero points, on this
    machine's C against the reference."""
    group = group or (0 if bits == 8 else 32)
    k = groups * (group or 32)
    _, packed, types, attrs = _rows_case(bits, group, zero_points and bits == 4, True, residual, k, n)
    x = RNG.standard_normal((m, k)).astype(np.float32)
    extra = [RNG.standard_normal((m, n)).astype(np.float32)] if residual else []
    check_op_sizes("gemm_nbits", types, attrs, [[x, *packed, *extra]], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bits,group,zero_points,bias", [(8, 0, False, True), (4, 32, True, False)])
def test_silu_of_the_gate_times_up_in_the_kernel(bits, group, zero_points, bias):
    """glu "silu": the first half of the columns (the gate) through silu times the second (up), as
    a LLaMA MLP's siblings compute them, on VNNI, the interpreter and the scalar twin against the
    reference, and against silu(x w_gate) * (x w_up) within the rows' 8-bit rounding."""
    n = 128
    weights, packed, types, attrs = _rows_case(bits, group, zero_points, bias, False, n=n)
    xs = [RNG.standard_normal((m, K)).astype(np.float32) for m in (1, 13, 70)]
    # atol: silu(gate) * up carries the float32 rounding of gate's sum (products reaching ~100) times up
    # (seen: 1.5e-4 on a 0.44 of the AVX2 twin, outputs up to ~170)
    runs = check_op_sizes("gemm_nbits", types, {**attrs, "glu": "silu"}, [[x, *packed] for x in xs], rtol=1e-4,
                          atol=1e-3, targets=("c", "python", AVX2))
    w = dequantize(*weights[:2], weights[2] if zero_points else None, bits)[:, :n]
    for (y,), x in zip(runs, xs):
        assert y.shape == (len(x), n // 2)
        full = x @ w + (weights[-1][:n] if bias else 0)
        exact = full[:, :n // 2] / (1 + np.exp(-full[:, :n // 2])) * full[:, n // 2:]
        assert np.linalg.norm(y - exact) / np.linalg.norm(exact) < (0.05 if zero_points else 0.03)


def test_packed_codes_are_act_int8_rows():
    weights, attrs = _inputs(8, 0, False, False)
    packed = pack_vnni(weights[0], 8, 0)
    head = [TensorType((5, K), "float32"), TensorType((5, K), "uint8"), TensorType((5, 1 + K // 32), "float32")]
    tail = [TensorType(packed.shape, "int8"), TensorType(weights[1].shape, "float32")]
    with pytest.raises(OpTypeError, match="packed codes are act int8_rows'"):
        infer_types("gemm_nbits", [head[0], *tail], {**attrs, "packed": True})
    with pytest.raises(OpTypeError, match="packed codes are act int8_rows'"):
        infer_types("gemm_nbits", head + tail, {**attrs, "act": "int8", "packed": True})
    with pytest.raises(OpTypeError, match="packed codes are act int8_rows'"):
        infer_types("gemm_nbits", [head[0], *tail], {**attrs, "act": "int8_rows"})
    with pytest.raises(OpTypeError, match="int8 codes must be"):
        infer_types("gemm_nbits", [head[0], TensorType(weights[0].shape, "int8"), tail[1]],
                    {**attrs, "act": "int8_rows", "packed": True})
    rows = {**attrs, "act": "int8_rows", "packed": True}
    assert infer_types("gemm_nbits", [head[0], *tail], rows)[1][0].shape == (5, N)
    residual = TensorType((5, N), "float32")
    assert infer_types("gemm_nbits", [head[0], *tail, residual], {**rows, "residual": True})[1][0].shape == (5, N)
    with pytest.raises(OpTypeError, match="a residual is act int8_rows' last input"):
        infer_types("gemm_nbits", [head[0], *tail, TensorType((5, N + 1), "float32")], {**rows, "residual": True})
    with pytest.raises(OpTypeError, match="a residual is act int8_rows' last input"):
        infer_types("gemm_nbits", [head[0], TensorType(weights[0].shape, "int8"), tail[1], residual],
                    {**attrs, "residual": True})
    with pytest.raises(OpTypeError, match="glu 'silu' is act int8_rows' without a residual, n a multiple of 64"):
        infer_types("gemm_nbits", [head[0], *tail], {**rows, "glu": "silu"})  # n = 75
    with pytest.raises(OpTypeError, match="glu 'silu' is act int8_rows'"):
        infer_types("gemm_nbits", [head[0], *tail], {**rows, "glu": "gelu"})


def test_int8_products_without_vnni():
    """The scalar twin of the int8 products (a target without VNNI or VBMI: AVX2) gives the same."""
    weights, attrs = _inputs(4, 64, True, True)
    types = [TensorType(("m", K), "float32"), TensorType(("m", K), "uint8"), TensorType(("m", 1 + K // 32), "float32")]
    x = RNG.standard_normal((13, K)).astype(np.float32)
    avx2 = Target("c", cflags="-O2 -march=x86-64-v3 -fopenmp -shared -fPIC -std=gnu11")
    check_op_sizes("gemm_nbits", types + [TensorType(p.shape, p.dtype.name) for p in weights], {**attrs, "act": "int8"},
                   [[x, *quantize_rows(x)] + weights], rtol=1e-4, atol=1e-4, targets=(avx2,))


def _grouped_types(k: int, group: int, weights) -> list[TensorType]:
    return [TensorType(("m", k), "float32"), TensorType(("m", k), "int8"),
            TensorType(("m", 2 * (k // group)), "float32")] + [TensorType(p.shape, p.dtype.name) for p in weights]


AVX2 = Target("c", cflags="-O2 -march=x86-64-v3 -fopenmp -shared -fPIC -std=gnu11")  # no VNNI: the scalar twins


@pytest.mark.parametrize("bits,k,group,zero_points,bias,targets", [
    (4, 96, 32, False, True, ("c", "python")), (4, 192, 64, True, False, ("c", AVX2)),
    (4, 256, 128, False, False, ("c",)), (8, 96, 0, False, True, ("c", "python")),
    (8, 320, 0, False, False, ("c", AVX2)), (8, 256, 0, False, True, ("c",)),
    (8, 96, 32, False, False, ("c", AVX2, "python"))])
def test_gemv_on_vnni_against_reference(bits, k, group, zero_points, bias, targets):
    """act int8_groups: a decode step's rows quantized per group (quantize_groups; int8 per channel
    per row_group's 32 columns), the codes times their bytes (vpdpbusd, a scalar twin
    where the target has no VNNI) against the reference's float64 product of the same quantized
    rows; an odd count of groups, 75 columns."""
    weights, attrs = _inputs(bits, group, zero_points, bias, k)
    rows = row_group(group, k)
    assert rows == (group or 32)
    xs = [RNG.standard_normal((m, k)).astype(np.float32) for m in (1, 3)]
    sets = [[x, *quantize_groups(x, rows)] + weights for x in xs]
    check_op_sizes("gemm_nbits", _grouped_types(k, rows, weights), {**attrs, "act": "int8_groups"}, sets,
                   rtol=1e-5, atol=1e-4, targets=targets)
    op = get("gemm_nbits")
    (y,) = op.reference(sets[1], op.bind_attrs({**attrs, "act": "int8_groups"}))
    w = dequantize(*weights[:2], weights[2] if zero_points else None, bits)[:, :N]
    exact = xs[1] @ w + (weights[-1][:N] if bias else 0)
    assert np.linalg.norm(y - exact) / np.linalg.norm(exact) < 0.01  # the rows' 8-bit rounding per group


def test_int8_gemv_integer_sums_are_exact():
    """int8 codes over their whole range (-128 too, which the flipped sign bit makes 0), scales of
    1 and rows of integers whose groups each hold 127: the product comes out exactly."""
    k = 256
    q = RNG.integers(-128, 128, (k, N)).astype(np.int8)
    q[:, 0] = -128
    weights = [pack_int8(q), np.ones(96, np.float32)]
    x = RNG.integers(-127, 128, (2, k)).astype(np.float32)
    x[:, ::32] = 127
    xq, meta = quantize_groups(x, 32)
    assert np.array_equal(xq, x.astype(np.int8)) and np.all(meta[:, ::2] == 1)
    attrs = {"bits": 8, "group": 0, "n": N, "offsets": False, "act": "int8_groups"}
    (y,) = check_op_sizes("gemm_nbits", _grouped_types(k, 32, weights), attrs, [[x, xq, meta] + weights],
                          rtol=0, atol=0, targets=("c", AVX2))[0]
    assert np.array_equal(y, x @ q.astype(np.float32))


def test_int4_gemv_integer_sums_are_exact():
    """Scales of 1 and rows of integers whose groups each hold 127: x is its own codes, and the
    product sum (q - 8) x comes out exactly (an integer below 2^24)."""
    k, group = 256, 64
    q = RNG.integers(0, 16, (k, N)).astype(np.uint8)
    weights = [pack_int4(q), np.ones((k // group, 96), np.float32)]
    x = RNG.integers(-127, 128, (1, k)).astype(np.float32)
    x[0, ::group] = 127
    xq, meta = quantize_groups(x, group)
    assert np.array_equal(xq, x.astype(np.int8)) and np.all(meta[:, ::2] == 1)
    attrs = {"bits": 4, "group": group, "n": N, "offsets": False, "act": "int8_groups"}
    (y,) = check_op_sizes("gemm_nbits", _grouped_types(k, group, weights), attrs, [[x, xq, meta] + weights],
                          rtol=0, atol=0, targets=("c", AVX2))[0]
    assert np.array_equal(y, x @ (q.astype(np.float32) - 8))


def test_quantize_groups_against_reference():
    x = RNG.standard_normal((3, 192)).astype(np.float32)
    x[1, 64:128] = 0  # a zero group: scale 1, codes 0
    check_op_sizes("quantize_groups", [TensorType(("m", 192), "float32")], {"group": 64}, [[x], [x[:1]]],
                   rtol=0, atol=0, targets=("c", "python"))
    xq, meta = quantize_groups(x, 64)
    assert not xq[1, 64:128].any() and meta[1, 2] == 1
    assert np.array_equal(meta[:, 1::2], xq.reshape(3, 3, 64).sum(axis=2))
    back = dequantize_groups(xq, meta)
    assert np.all(np.abs(back - x) <= np.repeat(meta[:, ::2], 64, axis=1) / 2 * 1.0001)


def test_quantize_rows_against_reference():
    x = RNG.standard_normal((70, K)).astype(np.float32)
    x[5] = 0  # a zero row: scale 1, codes 128
    check_op_sizes("quantize_rows", [TensorType(("m", K), "float32")], {}, [[x], [x[:3]]], rtol=1e-5, atol=1e-5,
                   targets=("c", "python"))
    xq, meta = quantize_rows(x)
    assert np.all(xq[5] == 128) and meta[5, 0] == 1
    back = meta[:, :1] * (xq.astype(np.float32) - 128)
    assert np.abs(back - x).max() <= meta[:, 0].max() / 2 * 1.0001


def test_quantization_error_is_small():
    w = RNG.standard_normal((K, N)).astype(np.float32)
    for parts, bits, tol in ((quantize_int8(w) + (None,), 8, 0.01), (quantize_int4(w, 32, False), 4, 0.12),
                             (quantize_int4(w, 32, True), 4, 0.12)):
        codes, scales, offsets = parts
        back = dequantize(codes, scales, offsets, bits)[:, :N]
        assert np.linalg.norm(back - w) / np.linalg.norm(w) < tol


def test_packing_round_trips():
    q8 = RNG.integers(-128, 128, (K, N)).astype(np.int8)
    q4 = RNG.integers(0, 16, (K, N)).astype(np.uint8)
    assert np.array_equal(unpack(pack_int8(q8), 8)[:, :N], q8)
    assert np.array_equal(unpack(pack_int4(q4), 4)[:, :N], q4)
    assert not unpack(pack_int4(q4), 4)[:, N:].any()


def test_bad_inputs_are_op_type_errors():
    weights, attrs = _inputs(4, 32)
    types = [TensorType((1, K), "float32")] + [TensorType(p.shape, p.dtype.name) for p in weights]
    with pytest.raises(OpTypeError, match="group must be one of"):
        infer_types("gemm_nbits", types, {**attrs, "group": 48})
    with pytest.raises(OpTypeError, match="codes must be uint8"):
        infer_types("gemm_nbits", [types[0], TensorType(weights[0].shape, "int8")] + types[2:], attrs)
    with pytest.raises(OpTypeError, match="x must be float32"):
        infer_types("gemm_nbits", [TensorType((1, K), "float16")] + types[1:], attrs)
    weights8, attrs8 = _inputs(8)
    types8 = types[:1] + [TensorType(p.shape, p.dtype.name) for p in weights8]
    with pytest.raises(OpTypeError, match="offsets"):
        infer_types("gemm_nbits", types8, {**attrs8, "offsets": True})
    with pytest.raises(OpTypeError, match="act int8_groups takes .* per group of 32"):  # int8 per channel
        infer_types("gemm_nbits", types8[:1] + _grouped_types(K, 64, [])[1:] + types8[1:],
                    {**attrs8, "act": "int8_groups"})
    weights48, _ = _inputs(8, k=48)
    with pytest.raises(OpTypeError, match="act int8_groups takes .* divisible by 32"):  # 32 does not divide 48
        infer_types("gemm_nbits", _grouped_types(48, 16, weights48), {**attrs8, "act": "int8_groups"})
    with pytest.raises(OpTypeError, match="group must be one of"):
        infer_types("quantize_groups", [TensorType((1, K), "float32")], {"group": 48})
    with pytest.raises(OpTypeError, match="a multiple of 64"):
        infer_types("quantize_groups", [TensorType((1, 96), "float32")], {"group": 64})


@pytest.mark.parametrize("bits,group,zero_points", [(8, 0, False), (8, 32, False), (4, 64, True), (4, 128, False)])
def test_compiled_gemv_at_one_and_two_threads(bits, group, zero_points):
    """A decode step's GEMV as ember.compile builds it (on a machine with VNNI and VBMI: its row
    quantized per group, the int8 products; its 13 panels a parallel loop, the last partial) at one
    and two threads, against NumPy's float64 product of the same quantized row."""
    import ember
    from ember.graph import Graph
    from ember.ops.nodes import add_op
    from ember.passes.quantize_rows import GEMV_FEATURES

    k, n = 768, 403
    parts, attrs = _inputs(bits, group, zero_points, False, k, n)
    g = Graph()
    x = g.add_input("x", TensorType((1, k)))
    consts = [g.add_constant(p, f"w{i}") for i, p in enumerate(parts)]
    (y,) = add_op(g, "gemm_nbits", [x, *consts], {**attrs, "act": "auto"})
    g.set_outputs([y])
    model = ember.compile(g)
    rows = RNG.standard_normal((1, k)).astype(np.float32)
    dense = dequantize(*parts[:2], parts[2] if zero_points else None, bits)[:, :n].astype(np.float64)
    vnni = Target().features >= GEMV_FEATURES
    assert ("quantize_groups" in {node.op for node in model.graph.nodes}) == vnni
    ref = (dequantize_groups(*quantize_groups(rows, row_group(group, k))) if vnni else rows) @ dense
    for threads in (1, 2):
        model.num_threads = threads
        np.testing.assert_allclose(model(rows), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@settings(max_examples=5, deadline=None)
@given(bits=st.sampled_from([4, 8]), group=st.sampled_from([0, 32, 64, 128]), zero_points=st.booleans(),
       groups=st.integers(1, 5), n=st.integers(1, 70), m=st.integers(1, 3))
def test_gemv_on_vnni_over_shapes(bits, group, zero_points, groups, n, m):
    """act int8_groups over K (whole groups of x's row_group), N (a partial last panel) and rows of
    a decode step, int8 per channel or group and int4 symmetric or with zero points, on this
    machine's C against the reference's float64 product of the same quantized rows."""
    group = group or (0 if bits == 8 else 32)
    k = groups * (group or 32)
    weights, attrs = _inputs(bits, group, zero_points and bits == 4, True, k, n)
    x = RNG.standard_normal((m, k)).astype(np.float32)
    rows = row_group(group, k)
    check_op_sizes("gemm_nbits", _grouped_types(k, rows, weights), {**attrs, "act": "int8_groups"},
                   [[x, *quantize_groups(x, rows)] + weights], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("bits,zero_points", [(8, False), (4, True)])
def test_compiled_prefill_mlp_at_one_and_two_threads(bits, zero_points):
    """A LLaMA MLP's prefill as ember.compile builds it (on a machine with VNNI: the gate and up
    product with silu(gate) * up in its kernel, the down product with the residual in its), 70 and
    128 rows at one and two threads, against the graph's references, and within the rows' 8-bit
    rounding of float64's x + silu(x w_g) (x w_u) w_d on the codes' weights."""
    import ember
    from ember.graph import Graph
    from ember.ops.evaluate import evaluate
    from ember.ops.gemm_nbits import weight
    from ember.ops.nodes import add_op
    from ember.passes.quantize_rows import FEATURES
    from ember.passes.quantize_weights import WeightFormat, quantize_weights

    k, hidden = 64, 96
    g = Graph()
    x = g.add_input("x", TensorType(("seq", k)))
    w = [RNG.standard_normal(shape).astype(np.float32) / 8 for shape in ((k, 2 * hidden), (hidden, k))]
    (y,) = add_op(g, "gemm", [x, g.add_constant(w[0], "w_gate_up")])
    (y3,) = add_op(g, "reshape", [y], {"shape": (1, "seq", 2 * hidden)})
    gate, up = add_op(g, "split", [y3], {"axis": -1, "sizes": (hidden, hidden)})
    (act,) = add_op(g, "mul", [add_op(g, "silu", [gate])[0], up])
    (h,) = add_op(g, "reshape", [act], {"shape": ("seq", hidden)})
    (d,) = add_op(g, "gemm", [h, g.add_constant(w[1], "w_down")])
    (d3,) = add_op(g, "reshape", [d], {"shape": (1, "seq", k)})
    g.set_outputs(add_op(g, "add", [add_op(g, "reshape", [x], {"shape": (1, "seq", k)})[0], d3]))
    quantized = quantize_weights(g, WeightFormat.of(f"int{bits}", 32 if bits == 4 else None, zero_points))
    w = [weight([None, *(quantized.constants[v.name] for v in n.inputs[1:])], n.attrs)
         for n in quantized.nodes if n.op == "gemm_nbits"]  # the weights the codes hold
    model = ember.compile(quantized)
    products = [n for n in model.graph.nodes if n.op == "gemm_nbits"]
    if Target().features >= FEATURES:
        assert [(n.attrs["glu"], n.attrs["residual"]) for n in products] == [("silu", False), (None, True)]
        assert not {"silu", "add", "quantize_rows"} & {n.op for n in model.graph.nodes}
    for m in (70, 128):
        rows = RNG.standard_normal((m, k)).astype(np.float32)
        (want,) = evaluate(model.graph, rows)
        full = rows.astype(np.float64) @ w[0]
        exact = rows + (full[:, :hidden] / (1 + np.exp(-full[:, :hidden])) * full[:, hidden:]) @ w[1]
        for threads in (1, 2):
            model.num_threads = threads
            got = model(rows)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
            assert np.linalg.norm(got[0] - exact) / np.linalg.norm(exact) < 0.05


@pytest.mark.parametrize("activation,bits,group,zero_points,bias", [
    ("gelu_tanh", 8, 0, False, True), ("gelu_tanh", 4, 32, True, False), ("gelu", 4, 64, False, True)])
def test_gelu_of_the_product_in_the_kernel(activation, bits, group, zero_points, bias):
    """activation "gelu_tanh" (GPT-2's) and "gelu" on act int8_rows' products (a prefill: 3, 13,
    70 and 128 rows) and act int8_groups' (a decode step's GEMV: 1 row) over 75 columns (a partial
    panel), on VNNI, the interpreter and the scalar twin against the reference, and against torch's
    GELU (float64) of the product without it."""
    import torch

    op = get("gemm_nbits")
    approximate = "tanh" if activation == "gelu_tanh" else "none"
    weights, packed, types, attrs = _rows_case(bits, group, zero_points, bias, False)
    xgroup = row_group(group, K)
    grouped = {**attrs, "act": "int8_groups", "packed": False}
    cases = [(types, attrs, [[x, *packed] for x in (RNG.standard_normal((m, K)).astype(np.float32)
                                                    for m in (3, 13, 70, 128))]),
             (_grouped_types(K, xgroup, weights), grouped,
              [[x, *quantize_groups(x, xgroup), *weights] for x in [RNG.standard_normal((1, K)).astype(np.float32)]])]
    for case_types, case_attrs, sets in cases:
        runs = check_op_sizes("gemm_nbits", case_types, {**case_attrs, "activation": activation}, sets, rtol=1e-4,
                              atol=1e-4, targets=("c", "python", AVX2))
        for (y,), inputs in zip(runs, sets):
            (product,) = op.reference(inputs, op.bind_attrs(case_attrs))
            want = torch.nn.functional.gelu(torch.from_numpy(product.astype(np.float64)), approximate=approximate)
            np.testing.assert_allclose(y, want.numpy(), rtol=1e-4, atol=1e-5 * np.abs(product).max())


def test_an_activation_is_int8_rows_or_int8_groups_without_glu_or_residual():
    weights, packed, types, attrs = _rows_case(8, 0, False, False, True)
    with pytest.raises(OpTypeError, match="an activation .* without glu or residual"):
        infer_types("gemm_nbits", types, {**attrs, "activation": "gelu_tanh"})  # a residual
    with pytest.raises(OpTypeError, match="an activation"):
        infer_types("gemm_nbits", types[:-1], {**attrs, "residual": False, "activation": "relu"})
    plain = [TensorType(("m", K), "float32")] + [TensorType(p.shape, p.dtype.name) for p in weights]
    with pytest.raises(OpTypeError, match="an activation .* is act int8_rows' or int8_groups'"):
        infer_types("gemm_nbits", plain, {**attrs, "act": "float32", "packed": False, "residual": False,
                                          "activation": "gelu"})

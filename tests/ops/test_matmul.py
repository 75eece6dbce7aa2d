"""matmul and gemm (ember/ops/matmul.py) against their NumPy references and PyTorch on the C
target: NumPy's 1-D promotion and batch broadcasting, sizes the register tile does not divide,
columns that need padding, single-row products (GEMV and dot products), gemm's transposes, alpha,
beta and broadcast c; symbolic batch and row counts; tiny cases on the interpreter; an
elementwise epilogue fused after the product; and the errors of bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import ember
from ember import te
from ember.graph.core import TensorType
from ember.ops import OpTypeError, get, infer_types
from ember.schedules.apply import compute_node, node_kernel
from ember.schedules.cpu import schedule_for
from ember.schedules.cpu.matmul import row_block_of
from ember.target import Target
from ember.testing import assert_close, check_op, check_op_sizes
from ember.tir.functor import collect
from ember.tir.stmt import For

RNG = np.random.default_rng()
TOL = {"rtol": 1e-4, "atol": 1e-4}


def rand(*shape, dtype="float32") -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(dtype)


@pytest.mark.parametrize("a_shape, b_shape", [
    ((5, 7), (7, 9)),  # smaller than one tile
    ((37, 70), (70, 48)),  # a row tail
    ((40, 30), (30, 40)),  # columns padded to whole vectors
    ((20, 30), (30, 21)),
    ((1, 40), (40, 1024)),  # a GEMV row
    ((3, 16), (16, 64)),
    ((2, 1, 5, 7), (3, 7, 16)),  # batch broadcasting
    ((70,), (3, 70, 40)),  # 1-D operands
    ((3, 5, 70), (70,)),
    ((70,), (70,)),
    ((128, 256), (256, 192)),  # a moderate size
])
def test_matmul_against_torch(a_shape, b_shape):
    check_op("matmul", [rand(*a_shape), rand(*b_shape)], None, **TOL, torch_fn=torch.matmul)


def test_matmul_integers_and_float16():
    a, b = RNG.integers(-9, 9, (6, 10)).astype("int32"), RNG.integers(-9, 9, (10, 16)).astype("int32")
    check_op("matmul", [a, b], None, rtol=0, atol=0, torch_fn=torch.matmul)
    check_op("matmul", [rand(6, 32, dtype="float16"), rand(32, 16, dtype="float16")], None, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("shapes, attrs", [
    ([(33, 70), (40, 70), (40,)], {"trans_b": True, "alpha": 0.5, "beta": 2.0}),  # b packed, transposed
    ([(70, 33), (70, 40), (33, 1)], {"trans_a": True}),
    ([(3, 64), (40, 64), (40,)], {"trans_b": True}),  # a few rows: dot products along k
    ([(1, 64), (40, 64)], {"trans_b": True, "alpha": 2.0}),
    ([(9, 24), (40, 24), (1, 40)], {"trans_b": True, "beta": 0.5}),
    ([(16, 8), (8, 24), ()], {"trans_a": False}),
    ([(7, 12), (12, 32), (7, 32)], {"alpha": -1.0, "beta": 0.0}),
])
def test_gemm_against_torch(shapes, attrs):
    inputs = [rand(*s) for s in shapes]
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)

    def torch_fn(a, b, c=None):
        a = a.T if attrs.get("trans_a") else a
        b = b.T if attrs.get("trans_b") else b
        return alpha * (a @ b) + (beta * c if c is not None else 0)

    check_op("gemm", inputs, attrs, **TOL, torch_fn=torch_fn)


def test_linear_as_gemm():
    x, w, b = rand(2, 48), rand(24, 48), rand(24)
    check_op("gemm", [x, w, b], {"trans_b": True}, **TOL, torch_fn=F.linear)


@pytest.mark.parametrize("m, k, blocks", [
    (256, 768, [256]),  # a fits the L2 beside a panel: one block
    (257, 768, [136, 121]),  # a row past it: two even blocks, not 256 and 1
    (257, 3072, [56] * 4 + [33]),  # not 64 * 4 and 1
    (256, 3072, [64] * 4),
    (70, 3072, [40, 30]),
])
def test_row_blocks_even(m, k, blocks):
    """The row blocks of a product with b in panels (each block streams all of b from L3) are even:
    no small last block that streams b again for a few rows."""
    rows = row_block_of(m, 8, k, 1 << 20)
    got = [m] if rows is None else [min(rows, m - r) for r in range(0, m, rows)]
    assert got == blocks


def test_threads_share_each_row_block():
    """The row blocks of a product with b in panels are a serial loop around the parallel one, so
    that every thread takes a share of each block (a parallel loop over all the blocks gave each
    thread whole blocks: 257 rows in two left one thread 121 and the other 136, or 1 and 256)."""
    m, k, n, p = 257, 3072, 64, 32
    types = [TensorType((m, k)), TensorType((n // p, k, p)), TensorType((n,))]
    s, args = node_kernel("gemm", types, {"alpha": 1.0, "beta": 1.0, "trans_a": False, "trans_b": False,
                                          "b_panels": p, "tf32": False}, [TensorType((m, n))])
    func = ember.lower(s, args)
    rows = row_block_of(m, 8, k, Target().caches[1])
    outer = collect(func.body, lambda x: isinstance(x, For) and x.kind == "serial"
                    and any(f.kind == "parallel" for f in collect(x.body, lambda y: isinstance(y, For))))
    assert rows is not None and [f.extent.value for f in outer] == [-(-m // rows)], func


def test_symbolic_batch_and_rows():
    b = rand(30, 32)
    check_op_sizes("matmul", [TensorType(("batch", 20, 30)), TensorType(b.shape)], None,
                   [[rand(2, 20, 30), b], [rand(5, 20, 30), b]], **TOL, torch_fn=torch.matmul)
    check_op_sizes("matmul", [TensorType(("m", 30)), TensorType(b.shape)], None,
                   [[rand(3, 30), b], [rand(17, 30), b]], **TOL, torch_fn=torch.matmul)


@pytest.mark.parametrize("op, shapes, attrs", [
    ("matmul", [(3, 4), (4, 5)], None),
    ("matmul", [(2, 3, 8), (8, 16)], None),
    ("gemm", [(2, 16), (3, 16), (3,)], {"trans_b": True}),
    ("gemm", [(4, 2), (4, 3)], {"trans_a": True, "alpha": 3.0}),
])
def test_tiny_products_on_the_interpreter(op, shapes, attrs):
    check_op(op, [rand(*s) for s in shapes], attrs, **TOL, targets=("c", "python"))


@pytest.mark.parametrize("a_shape, b_shape", [((40, 24), (24, 64)), ((1, 24), (24, 64))])
def test_matmul_with_a_fused_bias_epilogue(a_shape, b_shape):
    a, b, bias = rand(*a_shape), rand(*b_shape), rand(b_shape[-1])
    in_types = [TensorType(a.shape), TensorType(b.shape)]
    attrs, out_types = infer_types("matmul", in_types)
    inputs, (mm,) = compute_node("matmul", in_types, attrs, out_types)
    c = te.placeholder(bias.shape, name="bias")
    out = te.compute(mm.shape, lambda i, j: mm[i, j] + c[j], name="biased")
    s = te.create_schedule(out.op)
    schedule_for(get("matmul"))(s, [out], Target())
    assert "matmul_local" in str(ember.lower(s, [*inputs, c, out]))  # the accumulator tile
    f = ember.build(s, [*inputs, c, out])
    result = np.empty(out_types[0].shape, "float32")
    f(a, b, bias, result)
    assert_close(result, a @ b + bias, **TOL, what="matmul + bias")


@pytest.mark.parametrize("op, shapes, attrs, message", [
    ("matmul", [(3, 4), (5, 6)], None, "contracted dimensions of (3, 4) @ (5, 6) differ"),
    ("matmul", [(), (4,)], None, "rank >= 1"),
    ("matmul", [(2, 3, 4), (3, 4, 5)], None, "do not broadcast"),
    ("gemm", [(2, 3, 4), (4, 5)], None, "a and b must be 2-D"),
    ("gemm", [(3, 4), (5, 4)], None, "contracted dimensions of a and b differ"),
    ("gemm", [(3, 4), (4, 5), (2, 5)], None, "c of shape (2, 5) does not broadcast"),
])
def test_product_errors(op, shapes, attrs, message):
    with pytest.raises(OpTypeError) as e:
        infer_types(op, [TensorType(s) for s in shapes], attrs)
    assert op in str(e.value) and message in str(e.value)


def test_product_dtype_errors():
    with pytest.raises(OpTypeError, match="matmul: inputs have different dtypes"):
        infer_types("matmul", [TensorType((2, 3)), TensorType((3, 2), "float16")])
    with pytest.raises(OpTypeError, match="gemm: bool operands"):
        infer_types("gemm", [TensorType((2, 3), "bool"), TensorType((3, 2), "bool")])

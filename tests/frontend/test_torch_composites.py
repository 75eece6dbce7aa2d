"""Composite operators that torch.export's trace keeps and Hugging Face models call (GPT-2's split
and its mask's diff, new_ones and &; LLaMA's contiguous; Gemma's type_as; the mixture-of-experts
layers' chunk and floor_divide): each converts without the decomposition
(ember.frontend.torch.direct), checked against NumPy on fresh random inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_torch_indexing import Fn

from ember.compiler import compile_graph
from ember.frontend.torch.direct import convertible
from ember.frontend.torch.module import import_program, trace
from ember.ops.evaluate import evaluate
from ember.testing import assert_close

rng = np.random.default_rng(0)


def direct(fn, *arrays, calls: set[str], dynamic_shapes=None) -> list[np.ndarray]:
    """fn traced on the arrays as tensors, converted as it is (its trace must call `calls`), run."""
    traced = trace(Fn(fn), tuple(torch.from_numpy(a) for a in arrays), dynamic_shapes)
    assert calls <= {str(n.target) for n in traced.graph.nodes if n.op == "call_function"}
    assert convertible(traced)
    return evaluate(import_program(traced), *arrays)


def check(outputs, expected) -> None:
    assert len(outputs) == len(expected)
    for k, (a, e) in enumerate(zip(outputs, expected)):
        assert a.dtype == e.dtype and a.shape == e.shape, (k, a.dtype, a.shape, e.dtype, e.shape)
        assert_close(a, e, 1e-6, 1e-6, f"output {k}")


def test_split_and_chunk_with_a_shorter_last_piece():
    x = rng.standard_normal((7, 5), dtype=np.float32)
    got = direct(lambda x: (*x.split(3), *x.split(2, dim=1), *x.chunk(3, dim=-1), *x[:6].chunk(4), *x.split(7)),
                 x, calls={"aten.split.Tensor", "aten.chunk.default"})
    check(got, [*np.split(x, [3, 6]), *np.split(x, [2, 4], axis=1), *np.split(x, [2, 4], axis=1),
                *np.split(x[:6], 3), x])  # (4 chunks of 6 rows: torch makes 3 of 2)


@pytest.mark.parametrize("n, dim, pads", [(1, -1, False), (2, 0, True), (5, 1, False), (0, 0, True)])
def test_diff(n, dim, pads):
    x = rng.standard_normal((3, 4), dtype=np.float32)
    ints = rng.integers(-9, 9, (3, 4))
    bools = rng.random((3, 4)) < 0.5
    side = tuple(np.swapaxes(rng.standard_normal((2, 4 if dim % 2 == 0 else 3)), 0, dim % 2).astype(a.dtype)
                 for a in (x, ints, bools) for _ in range(2)) if pads else ()

    def fn(x, ints, bools, *side):
        extra = [dict(prepend=side[2 * k], append=side[2 * k + 1]) if side else {} for k in range(3)]
        return tuple(torch.diff(a, n, dim, **e) for a, e in zip((x, ints, bools), extra))

    got = direct(fn, x, ints, bools, *side, calls={"aten.diff.default"})
    extra = [dict(prepend=side[2 * k], append=side[2 * k + 1]) if side else {} for k in range(3)]
    check(got, [np.diff(a, n, dim, **e) for a, e in zip((x, ints, bools), extra)])


def test_logic_operators_on_bools_and_integers():
    p, q = rng.random((4, 5)) < 0.5, rng.random((4, 5)) < 0.5
    i, j = rng.integers(-50, 50, (4, 5)), rng.integers(-50, 50, (4, 5))
    got = direct(lambda p, q, i, j: (p & q, p | q, p ^ q, i & j, i | 6, i ^ j), p, q, i, j,
                 calls={"aten.__and__.Tensor", "aten.__or__.Scalar", "aten.__xor__.Tensor"})
    check(got, [p & q, p | q, p ^ q, i & j, i | 6, i ^ j])


def test_creation_from_a_tensor_of_static_and_symbolic_shape():
    x = rng.standard_normal((3, 4), dtype=np.float32)

    def fn(x):
        return (x.new_ones(x.shape) + x, x.new_zeros((x.shape[0], 2)), x.new_full((2, x.shape[0]), 2.5),
                torch.ones_like(x) - x, torch.zeros_like(x, dtype=torch.int32), torch.empty_like(x).shape[0] * x)

    def expected(x):
        n = x.shape[0]
        return [1 + x, np.zeros((n, 2), np.float32), np.full((2, n), 2.5, np.float32), 1 - x,
                np.zeros(x.shape, np.int32), n * x]

    calls = {"aten.new_ones.default", "aten.new_zeros.default", "aten.new_full.default", "aten.ones_like.default",
             "aten.zeros_like.default"}
    check(direct(fn, x, calls=calls), expected(x))
    batch = (({0: torch.export.Dim("batch", min=2, max=16)},),)  # (Fn takes *args)
    traced = trace(Fn(lambda x: fn(x)[:4]), (torch.from_numpy(x),), batch)
    assert convertible(traced)
    compiled = compile_graph(import_program(traced))  # (the reference evaluator cannot expand to a symbolic size)
    for rows in (2, 5):
        y = rng.standard_normal((rows, 4), dtype=np.float32)
        check(compiled(y), expected(y)[:4])


def test_arithmetic_and_selection():
    x, y = rng.standard_normal((4, 6), dtype=np.float32), rng.standard_normal((4, 6), dtype=np.float32)
    i, j = rng.integers(-20, 20, (4, 6)), rng.integers(1, 5, (4, 6)) * np.where(rng.random((4, 6)) < 0.5, 1, -1)
    mask = rng.random((4, 6)) < 0.5
    got = direct(lambda x, y, i, j, mask: (
        i // j, torch.floor_divide(i, 3), x // 0.7, torch.max(x, y), torch.min(x, y),
        torch.where(mask, x, 0.5), torch.where(mask, -1.0, y), x.masked_fill(mask, -3.0),
        x.masked_fill(mask, y[0, 0]), i.type_as(x), x.t().contiguous()), x, y, i, j, mask,
        calls={"aten.floor_divide.default", "aten.where.ScalarOther", "aten.where.ScalarSelf", "aten.max.other",
               "aten.masked_fill.Scalar", "aten.masked_fill.Tensor", "aten.type_as.default", "aten.contiguous.default"})
    check(got, [np.floor_divide(i, j), np.floor_divide(i, 3), np.floor_divide(x, np.float32(0.7)), np.maximum(x, y),
                np.minimum(x, y), np.where(mask, x, np.float32(0.5)), np.where(mask, np.float32(-1), y),
                np.where(mask, np.float32(-3), x), np.where(mask, y[0, 0], x), i.astype(np.float32),
                np.ascontiguousarray(x.T)])


def test_squeeze_pad_and_pool1d():
    x = rng.standard_normal((2, 1, 9), dtype=np.float32)
    got = direct(lambda x: (x.squeeze(1), x.squeeze(), torch.nn.functional.pad(x, (2, 1), value=0.5),
                            torch.nn.functional.adaptive_avg_pool1d(x, 3)), x,
                 calls={"aten.squeeze.dim", "aten.squeeze.default", "aten.pad.default",
                        "aten.adaptive_avg_pool1d.default"})
    check(got, [x[:, 0], x[:, 0], np.pad(x, ((0, 0), (0, 0), (2, 1)), constant_values=0.5),
                x.reshape(2, 1, 3, 3).mean(-1)])

"""Helpers of the graph-pass tests: run a graph before and after a pass on the same fresh random
inputs (ember.ops.evaluate, the NumPy references) and compare with explicit tolerances."""

from __future__ import annotations

import numpy as np

from ember.graph import Graph
from ember.graph.verify import verify
from ember.ops import infer_types
from ember.ops.evaluate import evaluate
from ember.testing import random_array

RTOL = 1e-5  # fp32: passes reassociate (batch-norm folding) but never change the math
ATOL = 1e-5


def check_same(before: Graph, after: Graph, rtol: float = RTOL, atol: float = ATOL) -> None:
    """`after` is a valid graph with `before`'s signature that computes the same outputs."""
    verify(after, infer_types)
    assert [(v.name, v.type) for v in after.inputs] == [(v.name, v.type) for v in before.inputs]
    assert [(v.name, v.type) for v in after.outputs] == [(v.name, v.type) for v in before.outputs]
    inputs = [random_array(v.shape, v.dtype) for v in before.inputs]
    for k, (want, got) in enumerate(zip(evaluate(before, *inputs), evaluate(after, *inputs), strict=True)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"output {k}")


def ops(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes]

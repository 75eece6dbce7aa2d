"""Property: any subset of the fp32 graph passes (FP32_PASSES), in any order (repeats allowed), leaves the results of
every zoo model (reduced size) unchanged within fp32 tolerance and the graph valid. Both graphs
run on the NumPy references (ember.ops.evaluate), not compiled, on fresh random inputs: floats
in [-1, 1), token ids below the largest of the model's example ids (so within its vocabulary)."""

import functools
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ember.frontend.torch import import_module
from ember.graph import Graph
from ember.graph.verify import verify
from ember.ops import infer_types
from ember.ops.evaluate import evaluate
from ember.passes.pipeline import FP32_PASSES, PASSES
from ember.testing import random_array

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.models import ZOO  # noqa: E402

RTOL = ATOL = 1e-4  # fp32: batch-norm folding reassociates


@functools.cache
def zoo_graph(name: str) -> tuple[Graph, tuple[int, ...]]:
    """The reduced-size model's graph, and for each input the bound of its token ids (0: floats)."""
    model, example = ZOO[name](small=True)
    bounds = tuple(0 if x.is_floating_point() else int(x.max()) + 1 for x in example)
    return import_module(model, example), bounds


def random_inputs(graph: Graph, bounds: tuple[int, ...], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, bound, v.shape).astype(v.dtype) if bound else random_array(v.shape, v.dtype, rng)
            for v, bound in zip(graph.inputs, bounds)]


@pytest.mark.parametrize("name", sorted(ZOO))
@settings(max_examples=8, deadline=None)
@given(order=st.lists(st.sampled_from(FP32_PASSES), max_size=8), seed=st.integers(0, 2**32 - 1))
@example(order=["pack_weights", "layout"], seed=0)  # packed conv weights are not OIHW: layout leaves them
@example(order=["pack_weights", "trim_taps"], seed=0)  # and so does trim_taps
def test_any_passes_in_any_order_keep_a_zoo_models_results(name, order, seed):
    graph, bounds = zoo_graph(name)
    out = graph
    for p in order:
        out = PASSES[p](out)
    verify(out, infer_types)
    assert [(v.name, v.type) for v in out.inputs] == [(v.name, v.type) for v in graph.inputs]
    assert [(v.name, v.type) for v in out.outputs] == [(v.name, v.type) for v in graph.outputs]
    inputs = random_inputs(graph, bounds, seed)
    for k, (want, got) in enumerate(zip(evaluate(graph, *inputs), evaluate(out, *inputs), strict=True)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{name} after {order}: output {k}")

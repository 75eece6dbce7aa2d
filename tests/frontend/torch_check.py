"""Checking the PyTorch frontend against torch eager: `check_import` imports a module with
torch.export, runs the ember graph on the reference evaluator and compares every output with
the module's own (flattened as torch.export flattens them).

The ember graph runs on the reference evaluator (`run_ember`): the one place to switch when
compiled models should be checked too.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils._pytree import tree_flatten

from ember.frontend.torch import import_module
from ember.graph.core import Graph
from ember.ops.evaluate import evaluate
from ember.testing import assert_close


def run_ember(graph: Graph, inputs) -> list[np.ndarray]:
    return evaluate(graph, *[x.numpy() for x in inputs])


def expected_outputs(model: torch.nn.Module, inputs) -> list[np.ndarray]:
    with torch.no_grad():
        out = model.eval()(*inputs)
    return [t.numpy() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def check_import(model: torch.nn.Module, *inputs: torch.Tensor, rtol: float = 1e-4, atol: float = 1e-4,
                 dynamic_shapes=None) -> Graph:
    """Import `model`, check every output against eager at the given tolerances; returns the graph."""
    graph = import_module(model, inputs, dynamic_shapes=dynamic_shapes)
    expected = expected_outputs(model, inputs)
    actual = run_ember(graph, inputs)
    assert len(actual) == len(expected), f"{len(actual)} outputs, torch has {len(expected)}"
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert a.dtype == e.dtype, f"output {k}: dtype {a.dtype}, torch gives {e.dtype}"
        assert_close(a, e, rtol, atol, f"output {k} of {type(model).__name__}")
    return graph

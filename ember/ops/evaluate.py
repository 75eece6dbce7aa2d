"""The reference evaluator: `evaluate(graph, *inputs)` runs a graph with every operator's NumPy
reference, the oracle that frontends, passes and compiled models are checked against.

Inputs are checked against the graph's input types first (count, dtype, rank, static
dimensions; a symbolic dimension takes its size from the first input that has it and must
agree everywhere else), and every node's outputs against the node's output types, so that a
graph whose types say one thing while its operators do another is caught at the node. A value's
array is dropped after its last use. A control-flow node runs its regions with this same
evaluator (ember.ops.control.run_regions).
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentTypeError, ShapeError
from ..graph.core import Graph, TensorType, Value
from .control import run_regions
from .registry import UnsupportedOpError, exists, get


def evaluate(graph: Graph, *inputs) -> list[np.ndarray]:
    missing = [(n.op, n.name) for n in graph.nodes if not exists(n.op)]
    if missing:
        raise UnsupportedOpError(missing)
    if len(inputs) != len(graph.inputs):
        names = ", ".join(f"%{v.name}" for v in graph.inputs)
        raise ArgumentTypeError(f"graph {graph.name} takes {len(graph.inputs)} input(s) ({names}), got {len(inputs)}")
    sizes: dict[str, tuple[int, str]] = {}  # symbol -> (size, the value that bound it)
    env: dict[Value, np.ndarray] = {}
    for v, x in zip(graph.inputs, inputs):
        x = np.asarray(x)
        if x.dtype.name != v.dtype:
            raise ArgumentTypeError(f"input %{v.name} must be {v.dtype}, got {x.dtype.name}")
        _check_shape(x, v.type, f"input %{v.name}", sizes)
        env[v] = x
    for name, data in graph.constants.items():
        env[graph.value(name)] = data

    last_use = {v: k for k, n in enumerate(graph.nodes) for v in n.inputs}
    for v in graph.outputs:
        last_use[v] = len(graph.nodes)
    for k, node in enumerate(graph.nodes):
        op = get(node.op)
        args = [env[v] for v in node.inputs]
        outs = run_regions(node.op, args, op.bind_attrs(node.attrs), node.regions, evaluate) if node.regions \
            else op.reference(args, op.bind_attrs(node.attrs))
        if len(outs) != len(node.outputs):
            raise ShapeError(f"node {node.name} ({node.op}): the reference gives {len(outs)} output(s), "
                             f"the node has {len(node.outputs)}")
        for j, (v, out) in enumerate(zip(node.outputs, outs)):
            out = np.asarray(out)
            what = f"node {node.name} ({node.op}): output {j} %{v.name}"
            if out.dtype.name != v.dtype:
                raise ArgumentTypeError(f"{what} is {out.dtype.name} but its type says {v.dtype}")
            _check_shape(out, v.type, what, sizes)
            env[v] = out
        for v in node.inputs:
            if last_use[v] == k:
                env.pop(v, None)
    return [env[v] for v in graph.outputs]


def _check_shape(x: np.ndarray, t: TensorType, what: str, sizes: dict[str, tuple[int, str]]) -> None:
    if x.ndim != t.rank:
        raise ShapeError(f"{what} must have rank {t.rank} ({t}), got shape {x.shape}")
    for axis, (d, n) in enumerate(zip(t.shape, x.shape)):
        if isinstance(d, str):
            bound, by = sizes.setdefault(d, (n, what))
            if bound != n:
                raise ShapeError(f"{what}: dimension {axis} is {d!r} = {n}, but {by} set {d!r} = {bound}")
        elif d != n:
            raise ShapeError(f"{what} must have shape {t}, got {x.shape} (dimension {axis})")

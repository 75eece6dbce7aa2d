"""GELU's tanh form as the operators a torch trace leaves of it (transformers' NewGELUActivation,
GPT-2's "gelu_new", which calls no gelu):

    0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))

x^3 a mul of x * x by x (as ember.passes.algebraic leaves pow(x, 3)) or pow(x, 3) itself; a mul's
or an add's operands in either order; the constants scalars within float32 rounding.

    gelu_tanh(graph, node) -> (x, nodes)   # the x whose GELU `node` computes, and the formula's
                                           # operators (node among them); None where it is no GELU
"""

from __future__ import annotations

import math

from ..graph.core import Graph, Node, Value

X = "x"
CUBE = "x^3"
FORMULA = ("mul", ("mul", X, 0.5),
           ("add", ("tanh", ("mul", ("add", X, ("mul", CUBE, 0.044715)), math.sqrt(2 / math.pi))), 1.0))
CUBES = (("mul", ("mul", X, X), X), ("pow", X, 3.0))
COMMUTATIVE = ("add", "mul")


def gelu_tanh(graph: Graph, node: Node) -> tuple[Value, list[Node]] | None:
    """The x of which `node` computes GELU's tanh form by FORMULA, and the formula's nodes; else None."""
    bound: dict[str, Value] = {}
    nodes: list[Node] = []
    if not _match(graph, node.outputs[0], FORMULA, bound, nodes):
        return None
    return bound[X], nodes


def _match(graph: Graph, v: Value, pattern, bound: dict, nodes: list) -> bool:
    """Whether v is `pattern` (an operator's tuple, X, CUBE or a scalar constant), X bound to one
    value throughout; on success, `bound` and `nodes` take the match's."""
    if pattern == X:
        return bound.setdefault(X, v) is v
    if isinstance(pattern, float):
        data = graph.constants.get(v.name) if graph.is_constant(v) else None
        return data is not None and data.size == 1 and math.isclose(float(data.reshape(())), pattern, rel_tol=1e-6)
    if pattern == CUBE:
        return any(_attempt(graph, [v], [cube], bound, nodes) for cube in CUBES)
    node = v.node
    if node is None or node.op != pattern[0] or len(node.inputs) != len(pattern) - 1:
        return False
    orders = [node.inputs, node.inputs[::-1]] if pattern[0] in COMMUTATIVE else [node.inputs]
    if any(_attempt(graph, list(ins), list(pattern[1:]), bound, nodes) for ins in orders):
        nodes.append(node)
        return True
    return False


def _attempt(graph: Graph, values: list[Value], patterns: list, bound: dict, nodes: list) -> bool:
    """Whether every value matches its pattern, in one try whose bindings are kept only if it succeeds."""
    trial_bound, trial_nodes = dict(bound), []
    if not all(_match(graph, v, p, trial_bound, trial_nodes) for v, p in zip(values, patterns)):
        return False
    bound.update(trial_bound)
    nodes += trial_nodes
    return True

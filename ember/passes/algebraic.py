"""Algebraic simplification: a table of local rewrites, keyed by operator, applied in one walk in
topological order. Each rule looks at a node (its inputs already simplified, so chains collapse
in the same walk) and returns the values that replace its outputs, or None.

    x * 1, 1 * x, x + 0, 0 + x, x - 0, x / 1  -> x   (only when the result's type is x's type:
                                                      a broadcast is not lost)
    identity(x), cast(x) to x's dtype,
    reshape(x) to x's shape, transpose(x) by the identity permutation  -> x
    reshape(reshape(x))                       -> reshape(x), or x when that has the shape
    transpose(transpose(x, p), q)             -> transpose(x, p∘q), or x when that is the identity
    transpose(x, p) moving only axes of size 1 -> reshape(x)   (the same bytes in the same order:
                                                      a view, where the transpose was a copy;
                                                      nn.MultiheadAttention's (1, L, E) <-> (L, 1, E))
    pow(x, 2), pow(x, 3)                      -> x * x, x * x * x   (float32/64 x, a scalar exponent
                                                      constant: a multiplication or two instead of
                                                      the vector pow's e^{3 log|x|} in double; GPT-2's
                                                      GELU cubes its input; within one rounding)

Nodes made dead by a rewrite (the inner reshape or transpose) are left to dce.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..graph.core import Graph, Node, Value
from .rewrite import Rewriter, rebuild

Rule = Callable[[Rewriter, Node, list[Value]], list[Value] | None]


def simplify(graph: Graph) -> Graph:
    return rebuild(graph, _simplify)


def _simplify(rw: Rewriter, node: Node, inputs: list[Value]) -> list[Value] | None:
    rule = RULES.get(node.op)
    return None if rule is None else rule(rw, node, inputs)


def _is_all(rw: Rewriter, v: Value, k: float) -> bool:
    data = rw.constant_data(v)
    return data is not None and bool(np.all(data == k))


def _neutral(k: float, commutative: bool) -> Rule:
    """x op k -> x (and k op x -> x when commutative), where k is op's neutral element."""

    def rule(rw, node, inputs):
        x, y = inputs
        out = node.outputs[0].type
        if _is_all(rw, y, k) and x.type == out:
            return [x]
        if commutative and _is_all(rw, x, k) and y.type == out:
            return [y]
        return None

    return rule


def _same(rw, node, inputs):
    """identity(x), a cast to x's dtype, a reshape to x's shape -> x."""
    x = inputs[0]
    return [x] if x.type == node.outputs[0].type else None


def _reshape(rw, node, inputs):
    x = inputs[0]
    merged = x.node is not None and x.node.op == "reshape"
    if merged:
        x = x.node.inputs[0]
    if x.type == node.outputs[0].type:
        return [x]
    return rw.copy(node, [x]) if merged else None


def _transpose(rw, node, inputs):
    x = inputs[0]
    perm = _perm(node)
    if x.node is not None and x.node.op == "transpose":
        inner = _perm(x.node)
        x, perm = x.node.inputs[0], tuple(inner[p] for p in perm)
    if perm == tuple(range(len(perm))):
        return [x]
    out = node.outputs[0]
    moved = [p for p in perm if x.type.shape[p] != 1]
    if moved == sorted(moved) and all(isinstance(d, int) for d in out.shape):
        return rw.emit("reshape", [x], {"shape": tuple(out.shape)}, hint=node.name, out_names=[out.name])
    if x is inputs[0]:
        return None
    return rw.copy(node, [x], {"perm": perm})


def _pow(rw, node, inputs):
    x, y = inputs
    data = rw.constant_data(y)
    if data is None or data.size != 1 or x.type.dtype not in ("float32", "float64") or x.type != node.outputs[0].type:
        return None  # narrower floats would round each product
    power = float(data.reshape(()))
    if power not in (2.0, 3.0):
        return None
    named = {"hint": node.name, "out_names": [node.outputs[0].name]}  # a graph output keeps its name
    if power == 2.0:
        return rw.emit("mul", [x, x], **named)
    (square,) = rw.emit("mul", [x, x], hint=f"{node.name}_square")
    return rw.emit("mul", [square, x], **named)


def _perm(node: Node) -> tuple[int, ...]:
    rank = len(node.outputs[0].shape)
    return tuple(p % rank for p in node.attrs["perm"])


RULES: dict[str, Rule] = {
    "mul": _neutral(1, commutative=True),
    "add": _neutral(0, commutative=True),
    "sub": _neutral(0, commutative=False),
    "div": _neutral(1, commutative=False),
    "identity": _same,
    "cast": _same,
    "reshape": _reshape,
    "transpose": _transpose,
    "pow": _pow,
}

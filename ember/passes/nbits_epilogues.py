"""What follows a prefill's weight-only quantized product is done by the product's kernel as it
writes its rows (gemm_nbits' act int8_rows), as float32 products fuse their epilogues
(ember.passes.fuse): a transformer layer's residual adds and a LLaMA MLP's silu(gate) * up are
then no parallel regions of their own, nor passes over the activations.

    y = gemm_nbits(x, ...; act="int8_rows")                 y: (M, n)
    add(reshape(y, (B..., M', n)), r)   (or add(r, ...))    r: the reshape's shape, float32
      -> reshape(gemm_nbits(x, ..., reshape(r, (M, n)); act="int8_rows", residual=True), (B..., M', n))

    gate, up = split(reshape(y, (B..., M', n)), last axis, (n / 2, n / 2))
    mul(silu(gate), up)   (or mul(up, silu(gate)))
      -> reshape(gemm_nbits(x, ...; act="int8_rows", glu="silu"), (B..., M', n / 2))

    gelu(reshape(y, ...); approximate)    (or torch's tanh formula in ten operators, GPT-2's NewGELU:
    0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), x^3 as x x x or pow(x, 3), operands in either order)
      -> reshape(gemm_nbits(x, ...; activation="gelu" | "gelu_tanh"), ...)

The activation is also a decode step's GEMV's (act int8_groups), whose kernel applies it to the
columns it writes: a GPT-2 layer's GELU is then no kernel of its own in the prefill nor in the step.

Conditions: every value between the product and the add or mul read there alone (GELU's x by its
formula's operators alone); r of the sum's own shape (no broadcast); n / 2 a multiple of the panels'
32 columns (the up projection's columns start a panel). The reshapes are views. What is left
behind goes to dce.
"""

from __future__ import annotations

from ..graph.core import Graph, Node, Value
from ..tir.nbits import PANEL
from .gelu_pattern import gelu_tanh
from .rewrite import Rewriter, rebuild

ACTIVATED = ("int8_rows", "int8_groups")  # the acts that take an activation (the residual and glu: int8_rows)


def nbits_epilogues(graph: Graph) -> Graph:
    if not any(n.op == "gemm_nbits" and n.attrs["act"] in ACTIVATED for n in graph.nodes):
        return graph
    users = graph.users()
    for v in graph.outputs:  # an output is read by the caller too
        users.setdefault(v, []).append(None)
    return rebuild(graph, lambda rw, node, ins: _epilogue(rw, node, ins, users))


def _epilogue(rw: Rewriter, node: Node, ins: list[Value], users: dict) -> list[Value] | None:
    if node.outputs[0].dtype != "float32":
        return None
    if node.op == "add":
        return _residual(rw, node, ins, users)
    if node.op == "mul":
        return _silu_mul(rw, node, users) or _gelu(rw, node, users)
    if node.op == "gelu":
        return _gelu(rw, node, users)
    return None


def _gelu(rw: Rewriter, node: Node, users: dict) -> list[Value] | None:
    """The gelu op, or torch's operators of its tanh form, on a product's reshaped output."""
    if node.op == "gelu":
        x, nodes, activation = node.inputs[0], [node], "gelu_tanh" if node.attrs["approximate"] == "tanh" else "gelu"
    else:
        found = gelu_tanh(rw.old, node)
        if found is None:
            return None
        (x, nodes), activation = found, "gelu_tanh"
    inside = {id(n) for n in nodes}
    read = [u for n in nodes if n is not node for u in users.get(n.outputs[0], ())] + users.get(x, [])
    if any(u is None or id(u) not in inside for u in read):  # the formula's values read by it alone
        return None
    product = _product(x, users, acts=ACTIVATED, alone=False)
    if product is None:
        return None
    (z,) = rw.emit("gemm_nbits", [rw.value(v) for v in product.inputs], {**product.attrs, "activation": activation},
                   hint=product.name)
    return rw.emit("reshape", [z], {"shape": node.outputs[0].shape}, hint=node.name, out_names=[node.outputs[0].name])


def _silu_mul(rw: Rewriter, node: Node, users: dict) -> list[Value] | None:
    for side in (0, 1):
        silu, up = node.inputs[side].node, node.inputs[1 - side]
        if silu is None or silu.op != "silu" or not _alone(node.inputs[side], users) or not _alone(up, users):
            continue
        split, gate = silu.inputs[0].node, silu.inputs[0]
        if split is None or split.op != "split" or list(split.outputs) != [gate, up] or not _alone(gate, users):
            continue
        half, rank = split.attrs["sizes"][0], gate.type.rank
        if split.attrs["axis"] % rank != rank - 1 or split.attrs["sizes"][1] != half or not isinstance(half, int) \
                or half % PANEL:
            continue
        product = _product(split.inputs[0], users)
        if product is not None:
            (z,) = rw.emit("gemm_nbits", [rw.value(v) for v in product.inputs], {**product.attrs, "glu": "silu"},
                           hint=product.name)
            return rw.emit("reshape", [z], {"shape": node.outputs[0].shape}, hint=node.name,
                           out_names=[node.outputs[0].name])
    return None


def _alone(v: Value, users: dict) -> bool:
    """Whether v is read by one node alone (and is no output)."""
    return len(users.get(v, ())) == 1


def _residual(rw: Rewriter, node: Node, ins: list[Value], users: dict) -> list[Value] | None:
    for side in (0, 1):
        product = _product(node.inputs[side], users)
        residual = ins[1 - side]
        if product is not None and residual.type == node.outputs[0].type:
            y = product.outputs[0]
            flat = rw.emit("reshape", [residual], {"shape": y.shape}, hint=f"{node.name}_rows")
            (z,) = rw.emit("gemm_nbits", [*(rw.value(v) for v in product.inputs), *flat],
                           {**product.attrs, "residual": True}, hint=product.name)
            return rw.emit("reshape", [z], {"shape": node.outputs[0].shape}, hint=node.name,
                           out_names=[node.outputs[0].name])
    return None


def _product(v: Value, users: dict, acts: tuple[str, ...] = ("int8_rows",), alone: bool = True) -> Node | None:
    """The gemm_nbits of one of `acts` (no epilogue yet) whose output v reshapes, read by v's
    reader alone (`alone`: the caller has checked v's readers); else None."""
    reshape = v.node
    if reshape is None or reshape.op != "reshape" or (alone and not _alone(v, users)):
        return None
    y = reshape.inputs[0]
    product = y.node
    if product is None or product.op != "gemm_nbits" or product.attrs["act"] not in acts or \
            product.attrs["residual"] or product.attrs["glu"] or product.attrs["activation"] or not _alone(y, users):
        return None
    return product

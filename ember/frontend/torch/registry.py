"""The table from core ATen operators to their handlers.

A handler converts one FX node: `handler(b, *args, **kwargs)` gets the `Builder` and the node's
arguments as the ATen schema names them (see node.py for what an argument can be) and returns
the node's result: a `Value`, a `Const`, or a tuple of them for an operator with several outputs
(`Unavailable` for an output ember does not compute). The handlers are in converters/, one module
per family.

    @handles("relu.default", "relu_.default")
    def relu(b, x):
        return b.op("relu", [b.v(x)])
"""

from __future__ import annotations

from collections.abc import Callable

from torch._ops import OpOverload

HANDLERS: dict[str, Callable] = {}


def handles(*overloads: str, namespace: str = "aten"):
    """Register a handler for ATen overloads named as torch prints them without "aten.": "add.Tensor"
    (`namespace=""`: operators torch prints without one, its higher-order operators: "cond")."""
    def register(fn):
        for name in overloads:
            key = f"{namespace}.{name}" if namespace else name
            if key in HANDLERS:
                raise ValueError(f"{key} has two handlers: {HANDLERS[key].__name__} and {fn.__name__}")
            HANDLERS[key] = fn
        return fn

    return register


def lookup(target) -> Callable | None:
    """The operator's handler; an in-place operator (relu_) takes its out-of-place one's (relu):
    the importer sees one only in a trace converted undecomposed, where it writes into a tensor
    nothing else reads (ember.frontend.torch.direct)."""
    name = str(target)
    handler = HANDLERS.get(name)
    if handler is None and isinstance(target, OpOverload) and target._schema.is_mutable:
        namespace, op, overload = name.split(".")
        if op.endswith("_") and not op.endswith("__"):
            handler = HANDLERS.get(f"{namespace}.{op[:-1]}.{overload}")
    return handler


class Unavailable:
    """An output of an ATen operator that ember does not compute (the
    saved mean of native_layer_norm): using it is an error."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self):
        return f"Unavailable({self.reason})"

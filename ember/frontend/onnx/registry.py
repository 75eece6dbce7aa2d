"""The table from ONNX op types (default domain) to their converters.

A converter converts one ONNX node: `fn(cx: NodeContext) -> list[Tensor | None]` (see node.py),
one entry per ONNX output (None for an output it does not produce). It is registered with the
op types it converts:

    @converts("Relu")
    def _relu(cx):
        return [cx.op("relu", [cx.input(0)])]
"""

from __future__ import annotations

from collections.abc import Callable

CONVERTERS: dict[str, Callable] = {}


def converts(*op_types: str):
    """Register the decorated function as the converter of these ONNX op types."""
    def register(fn):
        for op_type in op_types:
            if op_type in CONVERTERS:
                raise ValueError(f"ONNX op type {op_type} has two converters")
            CONVERTERS[op_type] = fn
        return fn

    return register


def lookup(op_type: str) -> Callable | None:
    return CONVERTERS.get(op_type)

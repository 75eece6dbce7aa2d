"""The table from ONNX op types and operator versions to their converters.

A converter converts one ONNX node: `fn(cx: NodeContext) -> list[Tensor | None]` (see node.py),
one entry per ONNX output (None for an output it does not produce). It is registered with the
op types it converts:

    @converts("Relu")
    def _relu(cx):
        return [cx.op("relu", [cx.input(0)])]

and converts every version of them, unless a range of operator versions (the `since_version` of
an operator's schema, onnx.defs.get_schema(op_type, opset).since_version) is given for a form
that differs, e.g. Slice before version 10, which takes its starts and ends as attributes:

    @converts("Slice", versions=range(1, 10))
    def _slice_1(cx):
        return cx.convert_as(10, [cx.input(0), starts, ends, axes], {})

An operator of another domain than the default one is registered with its domain,
`@converts("Binarizer", domain="ai.onnx.ml")`, and converts every version of it.

A ranged converter takes precedence over the plain one within its range; two plain converters
of one op type, or two ranges that overlap, are an error. A version bump that only adds types
needs nothing: the plain converter takes it.
"""

from __future__ import annotations

from collections.abc import Callable

from .functions import DEFAULT_DOMAINS

EVERY_VERSION = range(1, 1 << 30)

# op type ('domain.OpType' outside the default domain) -> ((versions, converter), ...), the ranged ones first
CONVERTERS: dict[str, tuple[tuple[range, Callable], ...]] = {}


def converts(*op_types: str, versions: range | None = None, domain: str = ""):
    """Register the decorated function as the converter of these ONNX op types (of `domain`), of
    every version or of the operator versions in `versions`."""
    def register(fn):
        for op_type in (_key(op, domain) for op in op_types):
            entries = CONVERTERS.get(op_type, ())
            for other, _ in entries:
                plain = other is EVERY_VERSION and versions is None
                if plain or (versions is not None and other is not EVERY_VERSION
                             and max(other.start, versions.start) < min(other.stop, versions.stop)):
                    raise ValueError(f"ONNX op type {op_type} has two converters for versions "
                                     f"{_versions(other)} and {_versions(versions or EVERY_VERSION)}")
            entry = (versions or EVERY_VERSION, fn)
            CONVERTERS[op_type] = tuple(sorted((*entries, entry), key=lambda e: e[0] is EVERY_VERSION))
        return fn

    return register


def lookup(op_type: str, version: int, domain: str = "") -> Callable | None:
    """The converter of version `version` of `op_type` (of `domain`); None when ember has none."""
    return next((fn for versions, fn in CONVERTERS.get(_key(op_type, domain), ()) if version in versions), None)


def _key(op_type: str, domain: str) -> str:
    return op_type if domain in DEFAULT_DOMAINS else f"{domain}.{op_type}"


def _versions(r: range) -> str:
    return "all" if r is EVERY_VERSION else f"{r.start} to {r.stop - 1}"

"""The graph IR: a typed SSA dataflow graph of tensor operations.

A `Graph` has named inputs, constants (NumPy arrays: the weights), nodes in topological order,
and outputs. A `Node` applies an operator (by name, see ember/ops) to input values with
immutable attributes and defines output values; every `Value` has a `TensorType(shape, dtype)`
whose dimensions are ints or symbolic sizes (str: a symbol, or a polynomial of symbols such as
"past + 1", kept in one canonical form: ember.dims), e.g. ("batch", 3, 224, 224).

Graphs are built with `Graph.add_input`, `add_constant` and `add_node`, and rewritten by passes
that build new graphs; str() of a graph is its text (printer.py, which the package imports,
attaches it). Values are compared by identity; names are unique within a graph and
are what the printer, parser and serializer use.

Control flow: a node may hold `regions`, graphs of their own that it runs (the branches of `if`,
the body of `loop`: ember/ops/control.py). A region is isolated from above, as MLIR's
IsolatedFromAbove regions and a Relay function without free variables: it reads nothing but its
own inputs and constants, and every outer value it uses (a capture) is an input of the node, passed
to a region input. Passes and the compiler therefore treat each region as a graph on its own.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from ..dims import canonical
from ..errors import EmberError

Dim = int | str


class GraphError(EmberError, ValueError):
    """A malformed graph: a value used before it is defined, a duplicate name, a bad type."""


@dataclass(frozen=True)
class TensorType:
    shape: tuple[Dim, ...]
    dtype: str = "float32"

    def __post_init__(self):
        shape = tuple(int(d) if isinstance(d, np.integer) else canonical(d) for d in self.shape)
        object.__setattr__(self, "shape", shape)
        for d in self.shape:
            if not (isinstance(d, str) or (isinstance(d, int) and not isinstance(d, bool) and d >= 0)):
                raise GraphError(f"dimension {d!r} must be a non-negative int or a symbolic size (a symbol name "
                                 "or an expression of symbols)")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def numel(self) -> int | None:
        return int(np.prod(self.shape)) if self.is_static else None

    def __str__(self):
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


class Value:
    """One tensor in the graph: a graph input, a constant, or an output of a node."""

    __slots__ = ("name", "type", "node", "index")

    def __init__(self, name: str, type: TensorType, node: Node | None = None, index: int = 0):
        self.name, self.type, self.node, self.index = name, type, node, index

    @property
    def shape(self) -> tuple[Dim, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    def __repr__(self):
        return f"%{self.name}: {self.type}"


def freeze_attr(v):
    """Attributes are immutable: lists become tuples, arrays are rejected (use constants)."""
    if isinstance(v, list | tuple):
        return tuple(freeze_attr(x) for x in v)
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, bool | int | float | str) or v is None:
        return v
    raise GraphError(f"attribute value {v!r} of type {type(v).__name__} is not allowed; "
                     "attributes are numbers, strings, None and tuples of them")


class Attrs(Mapping):
    """An immutable, hashable mapping of attribute names to values."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping | Iterable = ()):
        d = dict(items)
        self._items = tuple(sorted((k, freeze_attr(v)) for k, v in d.items()))

    def __getitem__(self, k):
        for key, v in self._items:
            if key == k:
                return v
        raise KeyError(k)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self):
        return hash(self._items)

    def __eq__(self, other):
        return isinstance(other, Attrs) and self._items == other._items

    def __repr__(self):
        return "{" + ", ".join(f"{k}={v!r}" for k, v in self._items) + "}"


@dataclass(eq=False)
class Node:
    op: str
    inputs: tuple[Value, ...]
    attrs: Attrs
    outputs: tuple[Value, ...] = ()
    name: str = ""
    regions: tuple[Graph, ...] = ()  # the graphs it runs (control flow), isolated from above

    def __repr__(self):
        outs = ", ".join(f"%{o.name}" for o in self.outputs)
        ins = ", ".join(f"%{i.name}" for i in self.inputs)
        regions = f" [{', '.join(r.name for r in self.regions)}]" if self.regions else ""
        return f"{outs} = {self.op}({ins}){'' if not self.attrs else ' ' + repr(self.attrs)}{regions}"


@dataclass(eq=False)
class Graph:
    name: str = "main"
    inputs: list[Value] = field(default_factory=list)
    constants: dict[str, np.ndarray] = field(default_factory=dict)  # value name -> data
    nodes: list[Node] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    # symbol -> (min, max or None): the sizes a compiled model accepts (a torch.export.Dim's range)
    ranges: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    _values: dict[str, Value] = field(default_factory=dict, repr=False)
    _counter: Iterator[int] = field(default_factory=itertools.count, repr=False)

    # -- building ---------------------------------------------------------------------------
    def fresh_name(self, hint: str = "v") -> str:
        hint = hint or "v"
        if hint not in self._values:
            return hint
        while True:
            name = f"{hint}_{next(self._counter)}"
            if name not in self._values:
                return name

    def _define(self, value: Value) -> Value:
        if value.name in self._values:
            raise GraphError(f"value name {value.name!r} is defined twice")
        self._values[value.name] = value
        return value

    def add_input(self, name: str, type: TensorType) -> Value:
        v = self._define(Value(name, type))
        self.inputs.append(v)
        return v

    def add_constant(self, data, name: str = "const") -> Value:
        """A constant of `data` as it is where it is dense in C or Fortran order (a linear layer's
        weight transposed, a view of the model's parameter: ember.frontend.torch.node.borrowed),
        else copied in C order. NumPy reads either by index; what needs C order (a compiled
        model's weights, a file) copies it there."""
        arr = np.asarray(data)
        if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
            arr = np.asarray(arr, order="C")  # (np.ascontiguousarray would make a scalar 1-D)
        v = self._define(Value(self.fresh_name(name), TensorType(arr.shape, arr.dtype.name)))
        self.constants[v.name] = arr
        return v

    def add_node(self, op: str, inputs: Iterable[Value], attrs: Mapping | None = None,
                 out_types: Iterable[TensorType] = (), name: str = "", out_names: Iterable[str] = (),
                 regions: Iterable[Graph] = ()) -> Node:
        """Append a node; its outputs get the given types (type inference is the caller's: see
        ember.ops.infer_types). `regions`: the graphs a control-flow node runs."""
        inputs = tuple(inputs)
        for v in inputs:
            if self._values.get(v.name) is not v:
                raise GraphError(f"node {name or op}: input %{v.name} is not a value of this graph")
        node = Node(op, inputs, attrs if isinstance(attrs, Attrs) else Attrs(attrs or {}), (), name, tuple(regions))
        names = list(out_names)
        outs = []
        for k, t in enumerate(out_types):
            hint = names[k] if k < len(names) else (name or op)
            outs.append(self._define(Value(self.fresh_name(hint), t, node, k)))
        node.outputs = tuple(outs)
        node.name = name or (outs[0].name if outs else self.fresh_name(op))
        self.nodes.append(node)
        return node

    def set_outputs(self, values: Iterable[Value]) -> None:
        self.outputs = list(values)

    # -- reading ----------------------------------------------------------------------------
    def value(self, name: str) -> Value:
        return self._values[name]

    def is_constant(self, v: Value) -> bool:
        return v.name in self.constants

    def users(self) -> dict[Value, list[Node]]:
        out: dict[Value, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(v, []).append(n)
        return out

    def all_constants(self, prefix: str = "") -> Iterator[tuple[str, np.ndarray]]:
        """Every constant, those of the regions too, by a key unique in the whole graph: its name,
        in a region `<node>/<region index>/<name>` (what the serializer stores them by)."""
        for name, data in self.constants.items():
            yield prefix + name, data
        for n in self.nodes:
            for k, region in enumerate(n.regions):
                yield from region.all_constants(region_key(prefix, n.name, k))

    def share_constants(self, arrays: Mapping[str, np.ndarray], prefix: str = "") -> None:
        """Replace each constant keyed (as all_constants keys it) in `arrays` by that array, of
        its dtype and shape: a compiled model's graph then holds its weights' own buffers, not a
        second copy of every weight."""
        for name, data in self.constants.items():
            new = arrays.get(prefix + name)
            if new is not None and new is not data:
                if new.dtype != data.dtype or new.shape != data.shape:
                    raise GraphError(f"constant {prefix + name} is {data.dtype}{list(data.shape)}, cannot share "
                                     f"{new.dtype}{list(new.shape)}")
                self.constants[name] = new
        for n in self.nodes:
            for k, region in enumerate(n.regions):
                region.share_constants(arrays, region_key(prefix, n.name, k))

    def op_histogram(self) -> dict[str, int]:
        hist: dict[str, int] = {}
        for n in self.nodes:
            hist[n.op] = hist.get(n.op, 0) + 1
        return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))



def region_key(prefix: str, node: str, k: int) -> str:
    """The prefix of the constants' keys in region k of a node (see Graph.all_constants)."""
    return f"{prefix}{node}/{k}/"

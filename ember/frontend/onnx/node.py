"""One ONNX node being converted: what a converter sees (`NodeContext`).

A converter is `fn(cx: NodeContext) -> list[Tensor | None]`, one entry per ONNX output (None for
an output it does not produce), registered with `@converts("Relu", ...)` (registry.py). It reads
the node's inputs and attributes from `cx` and adds ember operators with `cx.op`. `cx.version`
is the node's operator version (Slice-1 in an opset-9 model); `cx.convert_as` converts the node
as another version's form (an old form's attributes given as the newer form's inputs), and a
function op's converter may `raise cx.expand_instead()` to leave a form to the op's ONNX body.

A `Tensor` is either a graph `Value` or a NumPy array: a constant that is not (yet) in the
graph. Initializers, Constant nodes and everything computed from constants alone stay arrays:
`cx.op` on array inputs folds (ember.frontend.fold: the operator's NumPy reference runs instead
of adding a node), which is how shape arithmetic (Shape -> Gather -> Concat -> Reshape) reaches
the attributes ember needs as plain numbers. An array becomes a graph constant the first time a
node that is not folded uses it.

The shape of a tensor with symbolic dimensions is a *symbolic shape*: an int64 array of dtype
object that holds ints, symbol names and expressions of them. It folds through the operators that only move data
(fold.SHAPE_OPS: gather, concat, slice, ...), integer casts and integer arithmetic (add, sub,
mul, exact division: ember.frontend.symbolic, whose expressions such as batch * 8 may cancel
again), so `x.view(x.size(0), -1)` and `x.view(x.size(0) * 4 // 4, -1)` work with a symbolic
batch. A symbolic shape that another operator reads (a position computed from the cache's
length, cast to float for a rotary embedding) becomes a tensor at run time: each symbolic element
an ember `size` node, which reads the dimension from a graph input that has its symbols
(ember.ops.sizes), as torch's sym_size is imported; a symbol no graph input has is an
OnnxImportError.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from ... import dims
from ...errors import EmberError
from ...graph.core import Dim, Graph, TensorType, Value
from ...ops import UnsupportedOpError
from ...ops.nodes import add_op
from ...tir import dtype as dt
from ..fold import SHAPE_OPS, array_type, fold, is_symbolic
from ..symbolic import ARITHMETIC, fold_arithmetic, fold_selection, is_dim
from .registry import lookup

Tensor = Value | np.ndarray


class OnnxImportError(EmberError, ValueError):
    """A model ember cannot import as given: an opset newer than onnx knows, an input without a shape,
    a data type ember lacks, an attribute value it cannot take."""


class ConstantInputError(OnnxImportError):
    """An input that ember needs as a constant (a shape, axes, pads) is computed at run time:
    from `value`, a graph value; `inputs`: the ONNX names of the graph inputs it is computed from
    (set by the importer), the runtime-valued inputs a compiled model specializes on."""

    def __init__(self, message: str, value: Value):
        super().__init__(message)
        self.value = value
        self.inputs: tuple[str, ...] = ()


class ExpandInstead(Exception):  # noqa: N818  (a signal, not an error)
    """Raised by a converter of a function op for a form it leaves to the op's ONNX function body
    (`raise cx.expand_instead()`): the importer expands the node instead."""


def sanitize(name: str) -> str:
    """An ONNX tensor name as an ember value name (letters, digits, '_' and '.')."""
    return re.sub(r"[^A-Za-z0-9_.]+", "_", name).strip("_") or "v"


def to_dtype(elem_type: int, where: str) -> str:
    """The ember dtype of an ONNX TensorProto element type."""
    try:
        name = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        name = onnx.TensorProto.DataType.Name(elem_type).lower()
    if name not in dt.SCALAR_DTYPES:
        raise OnnxImportError(f"{where}: data type {name} is not supported; ember knows {', '.join(dt.SCALAR_DTYPES)}")
    return name


def decode_attribute(attr: onnx.AttributeProto):
    """An ONNX attribute as a Python value: strings decoded, tensors as NumPy arrays."""
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    return value


@functools.cache
def op_version(op_type: str, opset: int) -> int:
    """The version of ONNX operator `op_type` (default domain) in effect at `opset`: the
    since_version of its schema (Slice in opset 9 is Slice-1, in opset 13 Slice-13)."""
    try:
        return onnx.defs.get_schema(op_type, opset, "").since_version
    except onnx.defs.SchemaError:  # an op type onnx does not know: the checker has let it through
        return opset


def tensor_type(t: Tensor) -> TensorType:
    return t.type if isinstance(t, Value) else array_type(t)


@dataclass
class Importer:
    """What one import builds up: the graph, the ONNX names of arrays, and the arrays already
    added to the graph as constants; `scope`, the tensors by ONNX name, which the subgraphs of
    control-flow nodes read (converters/control.py)."""

    graph: Graph
    opset: int
    scope: Mapping[str, Tensor] = field(default_factory=dict)
    _names: dict[int, str] = field(default_factory=dict)
    _materialized: dict[int, tuple[np.ndarray, Value]] = field(default_factory=dict)

    def name_array(self, data: np.ndarray, name: str) -> None:
        """Call the constant that `data` becomes `name` (its initializer's, or the output's that
        folded to it) rather than after its first user."""
        self._names.setdefault(id(data), sanitize(name))
        self._materialized.setdefault(id(data), (data, None))  # keeps the array, and so its id

    def value(self, t: Tensor, hint: str) -> Value:
        """`t` as a graph value (an array is added as a constant once)."""
        if isinstance(t, Value):
            return t
        v = self._materialized.get(id(t), (t, None))[1]
        if v is None:  # the array is kept in _materialized, so its id stays unique
            v = self._sizes(t, hint) if is_symbolic(t) else \
                self.graph.add_constant(t, name=self._names.get(id(t), hint))
            self._materialized[id(t)] = (t, v)
        return v

    def _sizes(self, t: np.ndarray, hint: str) -> Value:
        """A symbolic shape as an int64 tensor of its shape computed at run time: its symbolic
        elements `size` nodes bound to the graph inputs that have their symbols as dimensions."""
        parts = []
        for d in t.reshape(-1).tolist():
            if isinstance(d, int | np.integer):
                parts.append(self.graph.add_constant(np.array([d], np.int64), name=f"{hint}_dim"))
                continue
            d = dims.canonical(str(d))  # a symbol or an expression of symbols (ember.frontend.symbolic's Expr)
            carriers, bind = [], []
            for sym in dims.symbols_of(d):
                found = next(((v, axis) for v in self.graph.inputs for axis, x in enumerate(v.type.shape)
                              if x == sym), None)
                if found is None:
                    raise OnnxImportError(f"the size {d!r} is used as a tensor at run time, but no graph input has "
                                          f"{sym!r} as a dimension (import_onnx(..., input_shapes=...) can make it "
                                          "static)")
                if found[0] not in carriers:
                    carriers.append(found[0])
                bind.append((sym, carriers.index(found[0]), found[1]))
            (size,) = add_op(self.graph, "size", carriers, {"dim": d, "bind": tuple(bind)})
            parts += add_op(self.graph, "reshape", [size], {"shape": (1,)})
        flat = parts[0] if len(parts) == 1 else add_op(self.graph, "concat", parts, {"axis": 0})[0]
        return add_op(self.graph, "reshape", [flat], {"shape": t.shape}, out_names=[hint])[0]

    def add_node(self, op: str, inputs: Sequence[Tensor], attrs: Mapping | None, names: Sequence[str]) -> list[Value]:
        """A node of ember operator `op` whose outputs are named after `names` (arrays among the
        inputs become constants)."""
        return add_op(self.graph, op, [self.value(t, names[0]) for t in inputs], attrs, out_names=names)


@dataclass
class NodeContext:
    """The node under conversion: its inputs (None where an optional one is left out), its
    attributes (decoded to Python values), the default-domain opset it is read in (the model's,
    or a function body's) and its operator version there, and helpers that add ember operators."""

    importer: Importer
    node: onnx.NodeProto
    inputs: list[Tensor | None]
    attrs: dict[str, object]
    opset: int | None = None  # (None: the model's)
    version: int | None = None  # (None: the version of the node's op type at `opset`)

    def __post_init__(self):
        if self.opset is None:
            self.opset = self.importer.opset
        if self.version is None:
            self.version = op_version(self.node.op_type, self.opset)

    @property
    def where(self) -> str:
        return f"{self.node.op_type} node {self.node.name or self.node.output[0]!r}"

    @property
    def out_names(self) -> list[str]:
        """Names for the values this node's ember operators define: its outputs' names."""
        return [sanitize(o) for o in self.node.output if o] or [sanitize(self.node.op_type)]

    @property
    def num_outputs(self) -> int:
        return len(self.node.output)

    def wants_output(self, k: int) -> bool:
        return k < len(self.node.output) and bool(self.node.output[k])

    # -- reading the node -------------------------------------------------------------------
    def input(self, k: int) -> Tensor:
        t = self.optional(k)
        if t is None:
            raise OnnxImportError(f"{self.where}: input {k} is required")
        return t

    def optional(self, k: int) -> Tensor | None:
        return self.inputs[k] if k < len(self.inputs) else None

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)

    def const(self, k: int, what: str, symbolic: bool = False) -> np.ndarray | None:
        """The data of input k, which must be a constant (None when the input is left out), and
        numbers unless `symbolic` allows a symbolic shape."""
        t = self.optional(k)
        if is_symbolic(t) and not symbolic:
            raise self.error(f"input {k} ({what}) is {t.tolist()}, with symbolic dimensions; ember needs numbers "
                             "here (import_onnx(..., input_shapes=...) can make them static)")
        if t is None or isinstance(t, np.ndarray):
            return t
        raise ConstantInputError(f"{self.where}: input {k} ({what}) must be a constant (an initializer or "
                                 f"computed from constants), but it is computed at run time from %{t.name}", t)

    def const_ints(self, k: int, what: str) -> list[int] | None:
        data = self.const(k, what)
        return None if data is None else [int(v) for v in data.reshape(-1)]

    def const_dims(self, k: int, what: str) -> list[Dim] | None:
        """A shape input: ints and, from a symbolic shape, symbols or expressions of them (a
        cache's "past + 1": ember.dims)."""
        data = self.const(k, what, symbolic=True)
        if data is None:
            return None
        return [v if isinstance(v, str) else int(v) if is_dim(v) else dims.canonical(str(v)) for v in data.flat]

    def type(self, t: Tensor) -> TensorType:
        return tensor_type(t)

    def static_shape(self, t: Tensor, what: str) -> tuple[int, ...]:
        shape = tensor_type(t).shape
        if not all(isinstance(d, int) for d in shape):
            raise OnnxImportError(f"{self.where}: {what} needs the static shape of its input, got {shape}")
        return shape

    def convert_as(self, version: int, inputs: Sequence[Tensor | None], attrs: Mapping,
                   op_type: str | None = None) -> list[Tensor | None]:
        """Convert this node as the form of its op (or of `op_type`) at operator version
        `version`, with these inputs and attributes: how an old form (axes as an attribute) is
        read as a newer one (axes as an input)."""
        node = self.node
        if op_type is not None:
            node = onnx.NodeProto()
            node.CopyFrom(self.node)
            node.op_type = op_type
        converter = lookup(node.op_type, version)
        if converter is None:  # (no converter of the newer form: the op is missing altogether)
            raise UnsupportedOpError([(node.op_type, self.where)])
        return converter(replace(self, node=node, inputs=list(inputs), attrs=dict(attrs), version=version))

    def expand_instead(self) -> ExpandInstead:
        """For a function op's converter: `raise cx.expand_instead()` to have this node expanded
        from its ONNX function body, for a form the converter leaves to it."""
        return ExpandInstead(self.where)

    def unsupported(self, detail: str) -> UnsupportedOpError:
        """The error to raise for a form of this op that ember lacks: `raise cx.unsupported(...)`."""
        return UnsupportedOpError([(f"{self.node.op_type}({detail})", self.where)])

    def error(self, message: str) -> OnnxImportError:
        return OnnxImportError(f"{self.where}: {message}")

    # -- adding operators -------------------------------------------------------------------
    def op(self, name: str, inputs: Sequence[Tensor | None], attrs: Mapping | None = None) -> Tensor:
        """Apply the one-output ember operator `name` (see docs/operators.md)."""
        (out,) = self.ops(name, inputs, attrs)
        return out

    def ops(self, name: str, inputs: Sequence[Tensor | None], attrs: Mapping | None = None) -> list[Tensor]:
        """Apply ember operator `name`; trailing None inputs are left out. On constants alone it is
        folded (ember.frontend.fold): its outputs are arrays, unless folding would grow the
        constants, and a constant larger than the machine's memory is a CompileError."""
        inputs = list(inputs)
        while inputs and inputs[-1] is None:
            inputs.pop()
        if any(t is None for t in inputs):
            raise OnnxImportError(f"{self.where}: ember's {name} cannot leave out an input before a given one")
        if not all(isinstance(t, np.ndarray) for t in inputs) or \
                (name == "gather" and is_symbolic(inputs[1]) and not is_symbolic(inputs[0])):
            # (a table gathered at a symbolic position, a position embedding's row: read at run time)
            return self.importer.add_node(name, inputs, attrs, self.out_names)
        if any(is_symbolic(t) for t in inputs) and name not in SHAPE_OPS:
            if name == "cast" and np.dtype(dict(attrs)["dtype"]).kind in "iu":
                return [inputs[0]]  # (a symbolic shape stays typed int64)
            folded = fold_arithmetic(name, inputs)
            folded = fold_selection(name, inputs) if folded is None else folded
            if folded is not None:
                return [folded]
            if name in ARITHMETIC:  # (an inexact division)
                shapes = [t.tolist() for t in inputs if is_symbolic(t)]
                raise self.error(f"{name} of the symbolic shape(s) {shapes}: ember folds add, sub, mul and exact "
                                 "division of symbolic shapes, not this (import_onnx(..., input_shapes=...) can make "
                                 "them static)")
            return self.importer.add_node(name, inputs, attrs, self.out_names)  # the sizes read at run time
        outs = fold(name, inputs, attrs, self.where)
        return self.importer.add_node(name, inputs, attrs, self.out_names) if outs is None else outs

    def scalar(self, v, like: Tensor) -> np.ndarray:
        """A 0-d constant in the dtype of `like`."""
        return np.asarray(v, dtype=tensor_type(like).dtype)

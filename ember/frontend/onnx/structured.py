"""ONNX sequences and optionals, resolved at import: ember's graph IR holds tensors only.

A sequence whose length is known at import is a `TensorSequence`, a tuple of tensors (graph
values or arrays); an optional is its value when present and `ABSENT` when not. The sequence
operators (converters/sequence.py) work on these Python structures, so SequenceAt of a constant
position is one element, ConcatFromSequence one concat, SplitToSequence one split: what reaches
the graph is tensor operators only. Loops that carry a sequence are unrolled, and If's whose
branches give one are resolved, at import (converters/control.py).

A graph input that is a sequence or an optional is imported for a given *structure*: the length
of the sequence and the shape of each element, whether the optional is present
(`import_onnx(..., input_shapes={"seq": [(2, 3), (4, 3)], "opt": None})`); each element is a
graph input of its own (`seq_0`, `seq_1`, ...). Without one, the import is a
StructureError naming those inputs: ember.compile then specializes the model on the
structure of each call's arguments (ember.runtime.specialized). A sequence output is one graph
output per element, an absent optional none; the output layout (`Layout`, from import_graph)
says how to regroup them, and import_onnx, which returns a Graph alone, refuses such outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import onnx

from ...graph.core import Dim, TensorType
from .node import OnnxImportError, Tensor, to_dtype


@dataclass(frozen=True)
class TensorSequence:
    """An ONNX sequence of known length: its tensors, in order."""

    items: tuple[Tensor, ...]

    def __len__(self):
        return len(self.items)


@dataclass(frozen=True)
class Absent:
    """The value of an ONNX optional that holds nothing (Optional() with only a type)."""


ABSENT = Absent()
Structured = TensorSequence | Absent

# per ONNX graph output: "tensor" (one graph output), None (an absent optional: no graph output)
# or n (a sequence: n graph outputs, its elements in order)
Layout = tuple[str | int | None, ...]

# the operators that take sequences or optionals as inputs (the others take tensors only)
TAKES_STRUCTURED = frozenset({
    "Identity", "If", "Loop", "SequenceConstruct", "SequenceInsert", "SequenceErase", "SequenceAt", "SequenceLength",
    "ConcatFromSequence", "SequenceMap", "Optional", "OptionalHasElement", "OptionalGetElement"})

KINDS = ("tensor", "sequence", "optional", "optional sequence")


class StructureError(OnnxImportError):
    """What a Graph alone cannot say: graph inputs that are sequences or optionals were given no
    structure (input_shapes; `inputs`, their ONNX names), or outputs are sequences or optionals
    (import_graph gives their layout). ember.compile specializes the model on the structure of
    each call's arguments, and regroups its outputs."""

    def __init__(self, message: str, inputs: Sequence[str] = ()):
        super().__init__(message)
        self.inputs = tuple(inputs)

    @classmethod
    def of_inputs(cls, inputs: Sequence[str]) -> StructureError:
        return cls(f"graph input(s) {list(inputs)} are sequences or optionals; ember imports a model for the length "
                   "and element shapes of each sequence and whether each optional is present: give them with "
                   "import_onnx(..., input_shapes={name: [shape, ...] for a sequence, None or a shape for an "
                   "optional}) (ember.compile does this at each call)", inputs)


def is_structured(t) -> bool:
    return isinstance(t, TensorSequence | Absent)


def describe(t) -> str:
    """What a structured value is, for messages."""
    return f"a sequence of {len(t)}" if isinstance(t, TensorSequence) else "an absent optional"


def kind(tp: onnx.TypeProto, where: str) -> str:
    """One of KINDS for an ONNX type; other types (maps, nested sequences) are an OnnxImportError."""
    match tp.WhichOneof("value"):
        case "tensor_type":
            return "tensor"
        case "sequence_type" if tp.sequence_type.elem_type.WhichOneof("value") == "tensor_type":
            return "sequence"
        case "optional_type":
            inner = kind(tp.optional_type.elem_type, where)
            if inner in ("tensor", "sequence"):
                return "optional" if inner == "tensor" else "optional sequence"
    raise OnnxImportError(f"{where} is of type {onnx.helper.printable_type(tp)}; ember takes tensors, sequences "
                          "of tensors and optionals of those")


def element_type(tp: onnx.TypeProto, where: str) -> tuple[str, tuple[Dim, ...] | None]:
    """The element type of a tensor, sequence or optional type: its dtype, and its declared
    shape (None when it declares none); a dim_param or unnamed dimension is the string '?'."""
    while tp.WhichOneof("value") != "tensor_type":
        tp = tp.sequence_type.elem_type if tp.HasField("sequence_type") else tp.optional_type.elem_type
    tt = tp.tensor_type
    dtype = to_dtype(tt.elem_type, where)
    if not tt.HasField("shape"):
        return dtype, None
    return dtype, tuple(d.dim_value if d.HasField("dim_value") else "?" for d in tt.shape.dim)


def element(name: str, declared: tuple[Dim, ...] | None, dtype: str, shape, where: str) -> TensorType:
    """The type of one tensor of a structured input: `shape`, if it agrees with the declared one."""
    shape = tuple(shape)
    if declared is not None and (len(shape) != len(declared) or
                                 any(isinstance(d, int) and d != s for d, s in zip(declared, shape))):
        raise OnnxImportError(f"input_shapes gives {where} the shape {shape}, but the model declares "
                              f"{declared} for the elements of {name!r}")
    return TensorType(shape, dtype)

"""A model compiled once per value of its runtime-valued inputs (and per structure of its
sequence and optional inputs): `SpecializedModel`.

Some inputs decide what the code is, not only what it computes on: an ONNX graph input that
gives the `axes` of a reduction, TopK's `k`, Pad's `pads`, Resize's `scales` or a Reshape target
(ember.frontend.onnx.values). Kernels are specialized for such values, so the model is compiled
per value: a call reads those inputs on the host, looks their values up (the guard: dtype, shape
and bytes compared before any native code runs), and runs the CompiledModel compiled for them,
compiling it on the first call with a new value. The build cache keeps the native library, so
the same value in a new process recompiles no C. At most `limit` values are compiled for (the
max_specializations option, EMBER_MAX_SPECIALIZATIONS); one more is a CompileError, since a
value that changes with every call would otherwise compile on every call.

Structured inputs are specialized on their structure, not their values: an ONNX sequence input
takes a list of arrays, an optional one None or an array (or a list, an optional sequence), and
the model is compiled per structure, the length of each list and the dtype and shape of every
array in them (the guard compares those; the arrays themselves are inputs of the compiled model,
each list's elements in order, a None none), and the shapes of its other inputs, which may share
the symbols of the elements' declared shapes. Outputs regroup by the specialization's layout: per
output "tensor", None (the call returns None there) or n (a list of the next n outputs).

The runtime knows nothing of ONNX: `build(arguments, names)` (given by ember.compile) returns the
CompiledModel for the values and structures of the call's arguments (by name; the structured ones
as lists or None), the names of the inputs it specialized on the values of (more than `names`
when the import found more), and the layout of its outputs (None: every output a tensor).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..errors import ArgumentTypeError, ArtifactError, CompileError, ShapeError
from .model import CompiledModel
from .spec import TensorSpec

Layout = tuple[str | int | None, ...]
Build = Callable[[dict[str, object], tuple[str, ...]], tuple[CompiledModel, tuple[str, ...], Layout | None]]


class SpecializedModel:
    """`model(*inputs)` with the model's inputs, in order; the runtime-valued ones are read on the
    host. Attributes: `inputs` (TensorSpec of each input), `value_inputs` (the names specialized
    on), `structured` (the structured inputs by name, with their kind: "sequence", "optional"
    or "optional sequence"; for them `inputs` gives the dtype of their arrays),
    `specializations` (value and structure key -> CompiledModel), `compiles` and `hits` (calls
    that compiled, and that found their specialization), `limit`. Calls from several threads are
    safe (a compile holds a lock)."""

    def __init__(self, name: str, inputs: Sequence[TensorSpec], value_inputs: Sequence[str], build: Build,
                 limit: int, structured: Mapping[str, str] | None = None):
        self.name, self.inputs, self.value_inputs = name, tuple(inputs), tuple(value_inputs)
        self.structured = dict(structured or {})
        self.limit, self._build = limit, build
        self.specializations: dict[tuple, CompiledModel] = {}
        self._layouts: dict[tuple, Layout | None] = {}
        self.compiles = self.hits = 0
        self._lock = threading.Lock()

    def __call__(self, *inputs):
        if len(inputs) != len(self.inputs):
            names = ", ".join(t.name for t in self.inputs)
            raise ArgumentTypeError(f"model '{self.name}' takes {len(self.inputs)} input(s) ({names}), got "
                                    f"{len(inputs)}")
        given = dict(zip((t.name for t in self.inputs), inputs))
        value_inputs = self.value_inputs
        key = self._key(given, value_inputs)
        model = self.specializations.get(key)
        if model is None:
            model, value_inputs, key = self._specialize(given)
        else:
            self.hits += 1
        out = model(*(a for t, x in zip(self.inputs, inputs) if t.name not in value_inputs
                       for a in (flatten(x) if t.name in self.structured else [x])))
        layout = self._layouts[key]
        return out if layout is None else group(layout, out)

    def _specialize(self, given: dict) -> tuple[CompiledModel, tuple[str, ...], tuple]:
        with self._lock:
            key = self._key(given, self.value_inputs)
            if key in self.specializations:  # (compiled by another thread meanwhile)
                self.hits += 1
                return self.specializations[key], self.value_inputs, key
            if len(self.specializations) >= self.limit:
                structures = key[len(key) - len(self.structured):]
                shown = ", ".join([*(f"{n}={_host(self._spec(n), given[n]).tolist()}" for n in self.value_inputs),
                                   *(f"{n}={_shown(s)}" for n, s in zip(self.structured, structures))])
                raise CompileError(
                    f"model '{self.name}': {self._specialized_on()} take a value or structure it was not compiled for "
                    f"({shown}), and it has {self.limit} specialization(s) already, the limit "
                    "(the max_specializations= keyword of ember.compile, or EMBER_MAX_SPECIALIZATIONS); raise it, or "
                    "make these inputs constants (initializers) if they do not change")
            arguments = {t.name: self._argument(t, given[t.name]) for t in self.inputs}
            model, names, layout = self._build(arguments, self.value_inputs)
            self.value_inputs = names
            key = self._key(given, names)
            self.specializations[key], self._layouts[key] = model, layout
            self.compiles += 1
            return model, names, key

    def _key(self, given: dict, names: tuple[str, ...]) -> tuple:
        """The values of the inputs `names`, as they are compared (dtype, shape and bytes), then the
        structures of the structured inputs (None, or the dtype and shape of each array)."""
        out = []
        for n in names:
            a = _host(self._spec(n), given[n])
            out.append((a.dtype.str, a.shape, a.tobytes()))
        if self.structured:  # (the other inputs' shapes too: they may share the elements' symbols)
            out.extend(_host(self._spec(n), x).shape for n, x in given.items()
                       if n not in names and n not in self.structured)
        for n in self.structured:
            x = self._argument(self._spec(n), given[n])
            out.append(None if x is None else
                       tuple((a.dtype.str, a.shape) for a in x) if isinstance(x, list) else (x.dtype.str, x.shape))
        return tuple(out)

    def _argument(self, spec: TensorSpec, x):
        """An argument on the host: an array, or for a structured input a list of arrays or None,
        as its kind allows."""
        kind = self.structured.get(spec.name)
        if kind is None:
            return _host(spec, x)
        if x is None and kind.startswith("optional"):
            return None
        if isinstance(x, list | tuple) and kind.endswith("sequence"):
            return [_host(spec, e, rank=False) for e in x]
        if kind == "optional" and x is not None and not isinstance(x, list | tuple):
            return _host(spec, x, rank=False)
        takes = {"sequence": "a list of arrays", "optional": "None or an array",
                 "optional sequence": "None or a list of arrays"}[kind]
        raise ArgumentTypeError(f"input '{spec.name}' is an ONNX {kind}: it takes {takes}, got {type(x).__name__}")

    def _spec(self, name: str) -> TensorSpec:
        return next(t for t in self.inputs if t.name == name)

    def _specialized_on(self) -> str:
        return " and ".join([f"the runtime-valued input(s) {list(self.value_inputs)}"] * bool(self.value_inputs) +
                            [f"the sequence or optional input(s) {list(self.structured)}"] * bool(self.structured)) \
            or "its outputs (sequences or optionals, regrouped)"

    def compile_report(self) -> str:
        """The compile report of each specialization compiled so far (they compile on call)."""
        reports = [m.compile_report() for m in self.specializations.values() if hasattr(m, "compile_report")]
        return "\n".join([f"model '{self.name}' compiles on call, once per value or structure of "
                           f"{self._specialized_on()}: {len(reports)} compiled so far", *reports])

    def save(self, path):
        raise ArtifactError(f"model '{self.name}' is compiled per value or structure of {self._specialized_on()}; "
                            "save one of its specializations (model.specializations)")

    def __repr__(self):
        ins = ", ".join(str(t) for t in self.inputs)
        structures = f" and the structure of {list(self.structured)}" if self.structured else ""
        return (f"<SpecializedModel {self.name}({ins}), specialized on {list(self.value_inputs)}{structures}: "
                f"{len(self.specializations)} of at most {self.limit} compiled>")


def flatten(argument) -> list:
    """The arrays of a structured argument, as the compiled model takes them: a list's elements
    in order, an array itself, None none."""
    return [] if argument is None else list(argument) if isinstance(argument, list | tuple) else [argument]


def group(layout: Layout, out) -> object:
    """A compiled model's outputs (one, or a tuple) regrouped by `layout`: one entry per output,
    "tensor", None, or n (a list of the next n); one output as it is, more as a tuple."""
    flat = iter(out if isinstance(out, tuple) else (out,))
    grouped = tuple(next(flat) if entry == "tensor" else None if entry is None else [next(flat) for _ in range(entry)]
                    for entry in layout)
    return grouped[0] if len(grouped) == 1 else grouped


def _shown(structure) -> str:
    if structure is None:
        return "None"
    if structure and isinstance(structure[0], tuple):
        return f"a list of {len(structure)}: [{', '.join(f'{np.dtype(d)}{list(s)}' for d, s in structure)}]"
    return f"{np.dtype(structure[0])}{list(structure[1])}"


def _host(spec: TensorSpec, x, rank: bool = True) -> np.ndarray:
    """A runtime-valued input (or an array of a structured one) as a NumPy array on the host, of
    its declared dtype and (unless not `rank`) rank."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    if not isinstance(x, np.ndarray):
        raise ArgumentTypeError(f"input '{spec.name}' must be a numpy.ndarray or a torch.Tensor, got "
                                f"{type(x).__name__}")
    if x.dtype != np.dtype(spec.dtype):
        raise ArgumentTypeError(f"input '{spec.name}' has dtype {x.dtype}, expected {spec.dtype}")
    if rank and x.ndim != len(spec.shape):
        raise ShapeError(f"input '{spec.name}' has {x.ndim} dimension(s), expected {len(spec.shape)}")
    return x

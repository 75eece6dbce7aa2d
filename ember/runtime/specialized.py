"""A model compiled once per value of its runtime-valued inputs: `SpecializedModel`.

Some inputs decide what the code is, not only what it computes on: an ONNX graph input that
gives the `axes` of a reduction, TopK's `k`, Pad's `pads`, Resize's `scales` or a Reshape target
(ember.frontend.onnx.values). Kernels are specialized for such values, so the model is compiled
per value: a call reads those inputs on the host, looks their values up (the guard: dtype, shape
and bytes compared before any native code runs), and runs the CompiledModel compiled for them,
compiling it on the first call with a new value. The build cache keeps the native library, so
the same value in a new process recompiles no C. At most `limit` values are compiled for (the
max_specializations option, EMBER_MAX_SPECIALIZATIONS); one more is a CompileError, since a
value that changes with every call would otherwise compile on every call.

The runtime knows nothing of ONNX: `build(arrays, names)` (given by ember.compile) returns the
CompiledModel for the values of the call's inputs `arrays` (by name) and the names of the inputs
it specialized on (more than `names` when the import found more).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import ArgumentTypeError, ArtifactError, CompileError, ShapeError
from .model import CompiledModel, TensorSpec

Build = Callable[[dict[str, np.ndarray], tuple[str, ...]], tuple[CompiledModel, tuple[str, ...]]]


class SpecializedModel:
    """`model(*inputs)` with the model's inputs, in order; the runtime-valued ones are read on the
    host. Attributes: `inputs` (TensorSpec of each input), `value_inputs` (the names specialized
    on), `specializations` (value key -> CompiledModel), `compiles` and `hits` (calls that
    compiled, and that found their specialization), `limit`. Calls from several threads are safe
    (a compile holds a lock)."""

    def __init__(self, name: str, inputs: Sequence[TensorSpec], value_inputs: Sequence[str], build: Build,
                 limit: int):
        self.name, self.inputs, self.value_inputs = name, tuple(inputs), tuple(value_inputs)
        self.limit, self._build = limit, build
        self.specializations: dict[tuple, CompiledModel] = {}
        self.compiles = self.hits = 0
        self._lock = threading.Lock()

    def __call__(self, *inputs):
        if len(inputs) != len(self.inputs):
            names = ", ".join(t.name for t in self.inputs)
            raise ArgumentTypeError(f"model {self.name} takes {len(self.inputs)} input(s) ({names}), got "
                                    f"{len(inputs)}")
        given = dict(zip((t.name for t in self.inputs), inputs))
        value_inputs = self.value_inputs
        model = self.specializations.get(self._key(given, value_inputs))
        if model is None:
            model, value_inputs = self._specialize(given)
        else:
            self.hits += 1
        return model(*(x for t, x in zip(self.inputs, inputs) if t.name not in value_inputs))

    def _specialize(self, given: dict) -> tuple[CompiledModel, tuple[str, ...]]:
        with self._lock:
            key = self._key(given, self.value_inputs)
            if key in self.specializations:  # (compiled by another thread meanwhile)
                self.hits += 1
                return self.specializations[key], self.value_inputs
            if len(self.specializations) >= self.limit:
                shown = ", ".join(f"{n}={_host(self._spec(n), given[n]).tolist()}" for n in self.value_inputs)
                raise CompileError(
                    f"model {self.name}: the runtime-valued input(s) {list(self.value_inputs)} take a value it was "
                    f"not compiled for ({shown}), and it has {self.limit} specialization(s) already, the limit "
                    "(the max_specializations= keyword of ember.compile, or EMBER_MAX_SPECIALIZATIONS); raise it, or "
                    "make these inputs constants (initializers) if they do not change")
            arrays = {t.name: _host(t, given[t.name]) for t in self.inputs}
            model, names = self._build(arrays, self.value_inputs)
            self.value_inputs = names
            self.specializations[self._key(given, names)] = model
            self.compiles += 1
            return model, names

    def _key(self, given: dict, names: tuple[str, ...]) -> tuple:
        """The values of the inputs `names`, as they are compared: dtype, shape and bytes."""
        out = []
        for n in names:
            a = _host(self._spec(n), given[n])
            out.append((a.dtype.str, a.shape, a.tobytes()))
        return tuple(out)

    def _spec(self, name: str) -> TensorSpec:
        return next(t for t in self.inputs if t.name == name)

    def save(self, path):
        raise ArtifactError(f"model {self.name} is compiled per value of its runtime-valued inputs "
                           f"{list(self.value_inputs)}; save one of its specializations (model.specializations)")

    def __repr__(self):
        ins = ", ".join(str(t) for t in self.inputs)
        return (f"<SpecializedModel {self.name}({ins}), specialized on {list(self.value_inputs)}: "
                f"{len(self.specializations)} of at most {self.limit} compiled>")


def _host(spec: TensorSpec, x) -> np.ndarray:
    """A runtime-valued input as a NumPy array on the host, of its declared dtype and rank."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    if not isinstance(x, np.ndarray):
        raise ArgumentTypeError(f"input '{spec.name}' must be a numpy.ndarray or a torch.Tensor, got "
                                f"{type(x).__name__}")
    if x.dtype != np.dtype(spec.dtype):
        raise ArgumentTypeError(f"input '{spec.name}' has dtype {x.dtype}, expected {spec.dtype}")
    if x.ndim != len(spec.shape):
        raise ShapeError(f"input '{spec.name}' has {x.ndim} dimension(s), expected {len(spec.shape)}")
    return x

"""A model run as compiled segments with host steps between them: `SegmentedModel`.

An operator whose output size depends on the data (nonzero, unique: ember.ops.dynamic) cannot be
a kernel of a memory plan laid out before the call, so the compiler cuts the model around it
(ember.passes.host_segments): each segment is a CompiledModel, each such node a host function
(its NumPy reference) that allocates its outputs at the size the data gives. A call runs the
steps in order over a table of values by name; a segment after a host step takes the host
step's output as an input, so its data-dependent size binds a symbol of that segment like any
input dimension. The runtime knows nothing of operators: each step is a callable.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ArgumentTypeError, ArtifactError, ShapeError
from .model import CompiledModel
from .spec import TensorSpec


@dataclass(frozen=True)
class RunStep:
    """`run(*arrays) -> list of arrays` on the values named `inputs`, giving those named `outputs`;
    `model` is the CompiledModel of a segment (None: a host step, `what` says which node)."""

    run: Callable[..., list[np.ndarray]]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    model: CompiledModel | None = None
    what: str = ""


class SegmentedModel:
    """`model(*inputs)`: the steps in order. Attributes: `inputs` (TensorSpec each), `outputs`
    (value names), `steps`, `segments` (the CompiledModel of each segment)."""

    def __init__(self, name: str, inputs: Sequence[TensorSpec], outputs: Sequence[str], steps: Sequence[RunStep],
                 constants: dict[str, np.ndarray]):
        self.name, self.inputs, self.outputs, self.steps = name, tuple(inputs), tuple(outputs), tuple(steps)
        self._constants = constants

    @property
    def segments(self) -> list[CompiledModel]:
        return [s.model for s in self.steps if s.model is not None]

    def __call__(self, *inputs):
        if len(inputs) != len(self.inputs):
            names = ", ".join(t.name for t in self.inputs)
            raise ArgumentTypeError(f"model '{self.name}' takes {len(self.inputs)} input(s) ({names}), got "
                                    f"{len(inputs)}")
        torch = sys.modules.get("torch")
        as_torch = torch is not None and any(isinstance(x, torch.Tensor) for x in inputs)
        values = dict(self._constants)
        values.update((t.name, _array(t, x)) for t, x in zip(self.inputs, inputs))
        for step in self.steps:
            outs = step.run(*(values[n] for n in step.inputs))
            values.update(zip(step.outputs, outs))
        outputs = [values[n] for n in self.outputs]
        if as_torch:
            outputs = [torch.from_numpy(np.ascontiguousarray(o)) for o in outputs]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def compile_report(self) -> str:
        """The compile report of each compiled segment (CompiledModel.compile_report)."""
        return "\n".join(m.compile_report() for m in self.segments)

    def save(self, path):
        raise ArtifactError(f"model '{self.name}' runs {len(self.segments)} compiled segments with host steps between "
                            "them, which one artifact does not hold; save a segment (model.segments)")

    def __repr__(self):
        ins = ", ".join(str(t) for t in self.inputs)
        hosts = ", ".join(s.what for s in self.steps if s.model is None)
        return f"<SegmentedModel {self.name}({ins}): {len(self.segments)} compiled segment(s), on the host: {hosts}>"


def segment_step(model: CompiledModel, inputs: tuple[str, ...], outputs: tuple[str, ...]) -> RunStep:
    def run(*arrays):
        out = model(*arrays)
        return list(out) if isinstance(out, tuple) else [out]

    return RunStep(run, inputs, outputs, model=model, what=model.name)


def _array(spec: TensorSpec, x) -> np.ndarray:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        if x.device.type != "cpu":
            raise ArgumentTypeError(f"input '{spec.name}' is on {x.device}; ember runs on the CPU, pass "
                                    f"{spec.name}.cpu()")
        x = x.detach().resolve_neg().resolve_conj().contiguous().numpy()
    if not isinstance(x, np.ndarray):
        raise ArgumentTypeError(f"input '{spec.name}' must be a numpy.ndarray or a CPU torch.Tensor, got "
                                f"{type(x).__name__}")
    if x.dtype != np.dtype(spec.dtype):
        raise ArgumentTypeError(f"input '{spec.name}' has dtype {x.dtype}, expected {spec.dtype}")
    if x.ndim != len(spec.shape) or any(isinstance(d, int) and d != n for d, n in zip(spec.shape, x.shape)):
        raise ShapeError(f"input '{spec.name}' has shape {x.shape}, expected ({', '.join(map(str, spec.shape))})")
    return x

"""What the runtime knows of a model: plain data, what an artifact's manifest holds.

`ModelSpec`: the model's inputs and outputs (`TensorSpec`: name, shape with symbols, dtype), the
order of the entry's `sizes` (symbols) and `weights` arrays, its kernels (`KernelInfo`) and the
target it was built for. The compiled models (ember.runtime.model), the contract a library embeds
(ember.runtime.contract) and the artifact (ember.runtime.artifact) all read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int | str, ...]
    dtype: str

    def __str__(self):
        return f"{self.name}: {self.dtype}[{', '.join(str(d) for d in self.shape)}]"


@dataclass(frozen=True)
class KernelInfo:
    """One kernel of the library: its C name, the operators it computes, the nodes that run it."""

    name: str
    ops: tuple[str, ...]
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class ModelSpec:
    """What the runtime knows of a model: its signature, the order of the entry function's
    `sizes` (symbols) and `weights` arrays, its kernels and the target it was built for."""

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    symbols: tuple[str, ...]
    weights: tuple[str, ...]
    kernels: tuple[KernelInfo, ...]
    target: Mapping[str, object] = field(default_factory=dict)
    ranges: Mapping[str, tuple[int, int | None]] = field(default_factory=dict)  # symbol -> (min, max or None)

    def to_json(self) -> dict:
        def tensors(ts):
            return [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in ts]

        return {
            "name": self.name, "inputs": tensors(self.inputs), "outputs": tensors(self.outputs),
            "symbols": list(self.symbols), "weights": list(self.weights),
            "kernels": [{"name": k.name, "ops": list(k.ops), "nodes": list(k.nodes)} for k in self.kernels],
            "target": dict(self.target),
            **({"ranges": {s: list(r) for s, r in self.ranges.items()}} if self.ranges else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping) -> ModelSpec:
        def tensors(ts):
            return tuple(TensorSpec(t["name"], tuple(t["shape"]), t["dtype"]) for t in ts)

        return cls(d["name"], tensors(d["inputs"]), tensors(d["outputs"]), tuple(d["symbols"]),
                   tuple(d["weights"]),
                   tuple(KernelInfo(k["name"], tuple(k["ops"]), tuple(k["nodes"])) for k in d["kernels"]),
                   dict(d["target"]), {s: tuple(r) for s, r in d.get("ranges", {}).items()})

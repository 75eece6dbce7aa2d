"""The operator registry: every operator is declared once, with everything the compiler needs.

An `OpDef` says, for an operator name:
- `attrs`: the attributes it takes and their defaults (None: required);
- `infer(in_types, attrs) -> out_types`: type inference (shapes may hold symbol names);
- `reference(inputs, attrs) -> outputs`: a NumPy implementation, the definition every kernel is
  tested against and what constant folding runs;
- `compute(in_tensors, attrs, out_types) -> out_tensors`: its tensor expression, from te
  placeholders of the input types to te tensors of the output types;
- `pattern`: its fusion pattern kind (PATTERNS); `takes_prologue`: whether an elementwise
  producer may fuse into it.

How its kernel is scheduled is not part of an operator: each target family keeps its schedules
apart (ember.schedules.cpu: a schedule declared for the operator's name, else the default for
its pattern kind).

Declare with `@register` on a small class or with `register(OpDef(...))`; look up with `get`.
Unknown names raise `UnsupportedOpError`, which lists every missing operator at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import EmberError
from ..graph.core import Attrs, TensorType

PATTERNS = ("elementwise", "broadcast", "injective", "reduction", "out_elementwise_fusable", "opaque")


class UnsupportedOpError(EmberError, NotImplementedError):
    """Operators ember does not know; lists every one of them with where it came from."""

    def __init__(self, missing: Iterable[tuple[str, str]]):
        self.missing = list(missing)
        lines = [f"  {op}" + (f"  (at {where})" if where else "") for op, where in self.missing]
        ops = sorted({op for op, _ in self.missing})
        super().__init__(f"{len(ops)} unsupported operator(s): {', '.join(ops)}\n" + "\n".join(lines))


class OpTypeError(EmberError, TypeError):
    """Inputs or attributes an operator cannot take (wrong rank, dtype, shape, attribute)."""


@dataclass(frozen=True)
class OpDef:
    name: str
    infer: Callable[[list[TensorType], Attrs], list[TensorType]]
    reference: Callable[..., list]
    compute: Callable[..., list]
    pattern: str
    attrs: Mapping[str, object] = field(default_factory=dict)
    num_inputs: tuple[int, int | None] = (1, 1)  # (min, max); max None: any number
    doc: str = ""
    # its compute sizes a packed layout to whole vectors: it reads attrs["lanes"] (fp32 lanes),
    # which the kernel's target binds (ember.schedules.apply), never a node's attribute
    lanes: bool = False
    # a GPU kernel whose compute chooses its Tensor Core intrinsic by the target GPU's architecture and
    # sizes its tiles to the shared memory a block of it may opt in to: it reads attrs["gpu_arch"] and
    # attrs["shared_opt_in"] (bytes; ember.target.GPU), which the kernel's target binds
    gpu_facts: bool = False
    # an elementwise producer of its inputs may be inlined into its kernel (fusion's prologue).
    # False where the compute reads each input element many times (a convolution: once per
    # output-channel block and kernel tap), so that an inlined prologue (a GELU, a batch norm's
    # scale and shift) would be recomputed as often
    takes_prologue: bool = True

    def __post_init__(self):
        if self.pattern not in PATTERNS:
            raise ValueError(f"op {self.name}: pattern {self.pattern!r} is not one of {PATTERNS}")

    def bind_attrs(self, attrs: Mapping | None) -> Attrs:
        """Defaults filled in; unknown and missing required attributes named."""
        attrs = dict(attrs or {})
        unknown = set(attrs) - set(self.attrs)
        if unknown:
            raise OpTypeError(f"{self.name}: unknown attribute(s) {sorted(unknown)}; it takes {sorted(self.attrs)}")
        out = {}
        for k, default in self.attrs.items():
            if k in attrs:
                out[k] = attrs[k]
            elif default is REQUIRED:
                raise OpTypeError(f"{self.name}: attribute {k!r} is required")
            else:
                out[k] = default
        return Attrs(out)

    def check_arity(self, n: int) -> None:
        lo, hi = self.num_inputs
        if n < lo or (hi is not None and n > hi):
            want = f"{lo}" if lo == hi else f"{lo} to {hi if hi is not None else 'any number of'}"
            raise OpTypeError(f"{self.name} takes {want} inputs, got {n}")


class _Required:
    def __repr__(self):
        return "REQUIRED"


REQUIRED = _Required()
_REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in _REGISTRY:
        raise ValueError(f"operator {op.name!r} is registered twice")
    _REGISTRY[op.name] = op
    return op


def get(name: str) -> OpDef:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnsupportedOpError([(name, "")]) from None


def exists(name: str) -> bool:
    return name in _REGISTRY


def all_ops() -> dict[str, OpDef]:
    return dict(_REGISTRY)


def infer_types(name: str, in_types: list[TensorType], attrs: Mapping | None = None,
                regions: Sequence = ()) -> tuple[Attrs, list[TensorType]]:
    """Bind an operator's attributes and infer its output types (a control-flow operator's from its
    regions too: its infer takes them as a third argument, ember.ops.control)."""
    op = get(name)
    op.check_arity(len(in_types))
    bound = op.bind_attrs(attrs)
    return bound, list(op.infer(list(in_types), bound, tuple(regions)) if regions else op.infer(list(in_types), bound))

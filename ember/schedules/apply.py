"""One operator application as a kernel for a target (ember.target): te placeholders for its input
types, its compute, and its schedule from the target's family (ember.schedules.<target.schedules>,
e.g. ember.schedules.cpu.schedule_for: the operator's own, or the default for its pattern kind).
An operator whose compute sizes a packed layout to whole vectors (OpDef.lanes) gets the target's
fp32 lanes as its attribute "lanes", a GPU kernel chosen by the GPU's architecture and sized to the
shared memory a block may opt in to (OpDef.gpu_facts) the target GPU's as "gpu_arch" and
"shared_opt_in"; the schedules get the target.

`group_kernel` does the same for a fused group of operator applications (ember.passes.fuse): the
nodes' computes chained on each other's te tensors, every intermediate inlined, and the schedule
of the group's anchor (its out_elementwise_fusable node, else its reduction, else its last node).

Symbolic dimensions become te size variables, one per name in a kernel (ember.ops.common.te_shape).
"""

from __future__ import annotations

import importlib

from ..errors import ScheduleError
from ..graph.core import Attrs, TensorType
from ..ops.common import te_shape
from ..ops.registry import OpDef, get
from ..target import Target
from ..te import placeholder
from ..te.schedule import TESchedule
from ..te.tensor import ComputeOp, Tensor
from ..te.tensor import compute as compute_stage
from ..tir.expr import as_int
from .rules import inline_intermediates


def placeholders(in_types: list[TensorType], names: list[str]) -> list[Tensor]:
    """te placeholders of a kernel's input types; inputs with a symbolic dimension of one name share
    its size variable."""
    inputs: list[Tensor] = []
    for t, name in zip(in_types, names):
        inputs.append(placeholder(te_shape(t, inputs), t.dtype, name=name))
    return inputs


def family(target: Target):
    """The schedule family of a target: the module ember.schedules.<target.schedules>, whose
    `schedule_for(op)` is `schedule(s, outputs, target)` and `default_schedule(s, outputs,
    pattern, target)` the one any kernel takes."""
    try:
        return importlib.import_module(f"{__package__}.{target.schedules}")
    except ModuleNotFoundError:
        raise ScheduleError(f"target {target.key!r} names the schedule family {target.schedules!r}, which "
                            f"ember.schedules does not have") from None


def compute(op: OpDef, inputs: list[Tensor], attrs: Attrs, out_types: list[TensorType], target: Target) -> list[Tensor]:
    """The output tensors of `op`'s compute (the target family's own where it writes one:
    Family.computes), given the target's lanes and GPU's architecture and opt-in shared memory
    when it asks (OpDef.lanes, OpDef.gpu_facts)."""
    if op.lanes:
        attrs = Attrs({**attrs, "lanes": target.lanes("float32")})
    if op.gpu_facts:
        if target.gpu is None:
            raise ScheduleError(f"{op.name} is a GPU kernel: target {target.kind!r} has no GPU to size it to; "
                                f"compile it for 'cuda'")
        attrs = Attrs({**attrs, "gpu_arch": target.gpu.arch, "shared_opt_in": target.gpu.shared_opt_in})
    return list(family(target).compute_for(op)(inputs, attrs, out_types))


def compute_node(op_name: str, in_types: list[TensorType], attrs: Attrs, out_types: list[TensorType],
                 names: list[str] | None = None, target: Target | None = None) -> tuple[list[Tensor], list[Tensor]]:
    """(input placeholders, output tensors) of one operator application for `target` (default:
    C on this machine)."""
    names = names or [f"in{k}" for k in range(len(in_types))]
    inputs = placeholders(in_types, names)
    return inputs, compute(get(op_name), inputs, attrs, out_types, target or Target())


def node_kernel(op_name: str, in_types: list[TensorType], attrs: Attrs, out_types: list[TensorType],
                names: list[str] | None = None, schedule: bool = True,
                target: Target | None = None) -> tuple[TESchedule, list[Tensor]]:
    """A scheduled te kernel for one operator application on `target` (default: C on this
    machine), and its arguments (inputs, outputs)."""
    from ..te import create_schedule

    target = target or Target()
    inputs, outputs = compute_node(op_name, in_types, attrs, out_types, names, target)
    s = create_schedule([t.op for t in outputs])
    if schedule:
        family(target).schedule_for(get(op_name))(s, outputs, target)
    return s, inputs + outputs


# One node of a group: (op, attributes, inputs, output types); an input is (-1, k) for the group's
# input k, or (j, i) for output i of the group's node j (an earlier one).
GroupNode = tuple[str, Attrs, tuple[tuple[int, int], ...], tuple[TensorType, ...]]


def group_kernel(in_types: list[TensorType], nodes: list[GroupNode], outputs: list[tuple[int, int]],
                 schedule: bool = True, target: Target | None = None) -> tuple[TESchedule, list[Tensor]]:
    """ONE scheduled te kernel for a group of operator applications on `target` (default: C on
    this machine), and its arguments (the
    group's inputs, then `outputs`: (j, i) is output i of node j). The nodes' output stages
    that are not kernel outputs are inlined, so they never reach memory; then the schedule of
    the node that leads (see the module doc) runs on the kernel's outputs. A schedule the
    group's shape does not fit (it raises ScheduleError) gives way to the default one."""
    from ..ops.shape import reshape_compute  # (shape imports ember.ops.common, not this module)
    from ..te import create_schedule

    target = target or Target()
    if len(nodes) == 1 and list(outputs) == [(0, i) for i in range(len(nodes[0][3]))]:
        op, attrs, refs, out_types = nodes[0]
        if list(refs) == [(-1, k) for k in range(len(in_types))]:
            return node_kernel(op, list(in_types), attrs, list(out_types), schedule=schedule, target=target)
    inputs = placeholders(in_types, [f"in{k}" for k in range(len(in_types))])
    tensors: list[list[Tensor]] = []
    for op, attrs, refs, out_types in nodes:
        args = [inputs[i] if j < 0 else tensors[j][i] for j, i in refs]
        tensors.append(compute(get(op), args, attrs, list(out_types), target))
    outs = [tensors[j][i] for j, i in outputs]
    lead = _lead([get(op).pattern for op, *_ in nodes])
    anchor = tensors[lead][0]
    if (get(nodes[lead][0]).pattern == "out_elementwise_fusable" and len(outs) == 1
            and [as_int(d) for d in outs[0].shape] != [as_int(d) for d in anchor.shape]):
        # an epilogue that adds or removes dimensions of size 1 (ember.passes.fuse) is written in
        # the anchor's shape (the same bytes), so that the anchor's schedule tiles its own loops
        outs = [reshape_compute(outs[0], anchor.shape, name=f"{outs[0].op.name}_reshaped")]
    elif (get(nodes[lead][0]).pattern == "reduction" and len(outs) == 1 and outs[0].op is not anchor.op
          and isinstance(anchor.op, ComputeOp) and anchor.op.attrs and _same_shape(outs[0], anchor)):
        # an epilogue of a reduction (a model's output cast) in a stage that keeps the reduction's
        # compute attributes (how its rows split: ember.ops.hints), so that its schedule takes it
        outs = [compute_like(outs[0], anchor.op.attrs)]
    s = create_schedule([t.op for t in outs])
    if not schedule:
        return s, inputs + outs
    schedules = family(target)
    try:
        _schedule_group(s, outs, tensors, schedules.schedule_for(get(nodes[lead][0])), target)
    except ScheduleError:
        s = create_schedule([t.op for t in outs])
        _schedule_group(s, outs, tensors, lambda s_, outs_, t_: schedules.default_schedule(s_, outs_, "injective", t_),
                        target)
    return s, inputs + outs


def compute_like(t: Tensor, attrs) -> Tensor:
    """t's elements in a stage of their own carrying `attrs`."""
    return compute_stage(t.shape, lambda *i: t[i], name=f"{t.op.name}_out", attrs=attrs)


def _same_shape(a: Tensor, b: Tensor) -> bool:
    return list(map(str, a.shape)) == list(map(str, b.shape))


def _lead(patterns: list[str]) -> int:
    """The node whose schedule a group takes: its anchor, else its reduction, else its last."""
    for kind in ("out_elementwise_fusable", "reduction"):
        if kind in patterns:
            return patterns.index(kind)
    return len(patterns) - 1


def _schedule_group(s, outs: list[Tensor], tensors: list[list[Tensor]], schedule, target: Target) -> None:
    """Inline the nodes' spatial outputs that are not kernel outputs, then `schedule`."""
    inline_intermediates(s.sch, among={t.op.name for ts in tensors for t in ts if isinstance(t.op, ComputeOp)})
    schedule(s, outs, target)

"""Tasks of a model: its kernels as the compiler cuts them (ember.lowering.partition; the kernels
of the regions of control flow too, ember.passes.plan_memory.kernel_graph), each the
unscheduled function of one fused group, deduplicated by structural hash and weighted by how
many kernels of the model run it (ResNet's repeated blocks are one task). The way back, the best
record of each kernel for `ember.compile(..., database=db)`, is `Database.schedules`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..frontend import import_model
from ..lowering import Workload, cut_regions, group_schedule, partition, unscheduled, workload_of
from ..passes.plan_memory import kernel_graph
from ..runtime.model import CompiledModel
from ..tir.functor import collect
from ..tir.schedule import Trace
from ..tir.stmt import CallRoutine
from .task import Task


def workload_task(workload: Workload, name: str = "kernel") -> Task:
    """The task of one compiler workload (ember.lowering.workload_of): the group's computation
    with its arguments in the kernel's call order, and the trace of the operators' own schedule."""
    s, args = group_schedule(workload)
    return Task(name, unscheduled(s, args), default_trace=Trace(list(s.sch.trace.instructions)))


def extract_tasks(model, example_inputs=None, *, opt_level: int = 2, disabled_passes: Sequence[str] = (),
                  precision: str = "fp32") -> list[Task]:
    """The tuning tasks of a model (a Graph, a torch.nn.Module with example inputs, an ONNX
    model, or a CompiledModel: its graph, ember.quantize's with its int8 products) compiled at
    `precision` (ember.compile's: "bf16" makes its linear layers bf16 tile products, which the
    design space tensorizes), heaviest first (operations x weight: an int8
    product's integer multiply-adds count, Task.flops). Kernels with symbolic dimensions, kernels
    that compute nothing (copies), and kernels that call a routine (ember.tir.stmt.CallRoutine:
    their loops are the routine's, not a schedule's) are left out."""
    graph = model.graph if isinstance(model, CompiledModel) else import_model(model, example_inputs)
    fused = partition(graph, opt_level, disabled_passes, precision=precision)
    groups = kernel_graph(fused, cut_regions(opt_level, disabled_passes)).kernels
    tasks: dict[str, Task] = {}
    counts: Counter = Counter()
    for workload, count in Counter(workload_of(g) for g in groups).items():
        if not workload.static:
            continue
        task = workload_task(workload, name=workload.name)
        if task.flops == 0 or collect(task.func.body, lambda s: isinstance(s, CallRoutine)):
            continue
        tasks.setdefault(task.key, task)
        counts[task.key] += count
    out = [Task(t.name, t.func, counts[k], t.default_trace) for k, t in tasks.items()]
    return sorted(out, key=lambda t: -t.flops * t.weight)

"""Tasks of a model: its kernels as the compiler cuts them (graph passes, then fusion), each the
unscheduled function of one fused group, deduplicated by structural hash and weighted by how
many kernels of the model run it (ResNet's repeated blocks are one task). And the way back: the
best record of each kernel, for `ember.compile(..., database=db)`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..tir.expr import as_int
from ..tir.params import bind_params
from ..tir.schedule import Trace
from .task import Task


def workload_task(workload, name: str = "kernel", default: bool = True) -> Task:
    """The task of one compiler workload (ember.compiler.workload_of): the group's computation
    with its arguments in the kernel's call order, and (default=True) the trace of the
    operators' own schedule."""
    from ..schedules.apply import group_kernel

    in_types, nodes, outputs = workload
    s, args = group_kernel(list(in_types), list(nodes), list(outputs), schedule=default)
    func = bind_params(s.sch.original, [a.buffer for a in args], "kernel")
    return Task(name, func, default_trace=Trace(list(s.sch.trace.instructions)) if default else None)


def extract_tasks(model, example_inputs=None, *, opt_level: int = 2, disabled_passes: Sequence[str] = ()) -> list[Task]:
    """The tuning tasks of a model (a Graph, a torch.nn.Module with example inputs, an ONNX
    model), heaviest first (flops x weight). Kernels with symbolic dimensions, and kernels that
    compute nothing (copies), are left out."""
    from ..compiler import _kernel_name, import_model, workload_of
    from ..passes.fuse import FUSE_LEVEL, fuse, unfused
    from ..passes.pipeline import disabled_passes_of, run_pipeline

    graph = run_pipeline(import_model(model, example_inputs), opt_level, disabled_passes=disabled_passes)
    fusing = opt_level >= FUSE_LEVEL and "fuse" not in disabled_passes_of(disabled_passes)
    groups = (fuse(graph) if fusing else unfused(graph)).groups
    tasks: dict[str, Task] = {}
    counts: Counter = Counter()
    for workload, count in Counter(workload_of(g) for g in groups).items():
        if not _static(workload):
            continue
        task = workload_task(workload, name=_kernel_name(workload))
        if task.flops == 0:
            continue
        tasks.setdefault(task.key, task)
        counts[task.key] += count
    out = [Task(t.name, t.func, counts[k], t.default_trace) for k, t in tasks.items()]
    return sorted(out, key=lambda t: -t.flops * t.weight)


def best_traces(workloads: list, database) -> list[str | None]:
    """The trace (JSON) of the best record of each workload on this machine's target, or None."""
    from .database import target_key

    target = target_key()
    out = []
    for w in workloads:
        record = database.best(workload_task(w, default=False).key, target) if _static(w) else None
        out.append(record.trace.to_json() if record is not None else None)
    return out


def _static(workload) -> bool:
    in_types, nodes, _ = workload
    types = list(in_types) + [t for node in nodes for t in node[3]]
    return all(isinstance(d, int) or as_int(d) is not None for t in types for d in t.shape)

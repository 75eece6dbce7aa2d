"""One lowering path: from a graph to its groups, and from a group to its kernel.

The compiler (ember.compiler.compile_graph) and the tuner's task extraction
(ember.tune.extract) both cut a graph with `partition` and describe each group as a `Workload`,
so the kernels a tuner measures are the kernels the compiler builds, and a tuned record's key
(`workload_key` of the group's unscheduled function) is found again at compile time.

- `partition(graph, opt_level, disabled_passes, target=...)`: the graph passes of the level for
  the target (ember.target), then fusion (at opt_level >= FUSE_LEVEL unless "fuse" is
  disabled; else one group per node: `cut_regions`, which cuts the regions of control flow too).
- `workload_of(group)`: what a group computes, as plain data (hashable, picklable): groups of the
  same operators on the same types with the same attributes share one lowering.
- `group_schedule(workload, target)`: the group's te schedule for the target, built once: it
  holds the unscheduled function (the tuning key, the tuner's starting point) and the operators'
  own schedule of the target's family, sized to its vectors.
- `lower_workload(workload, schedules, target)`: the lowered kernel, for the target's SIMD
  width, scheduled by the tuned trace that `schedules` (a lookup from workload key to trace,
  e.g. `Database.schedules(target.key)`) has for it, else by its operators' own schedule.
- `lower_groups(groups, jobs, schedules)`: every group's kernel, lowered in this process, the rest
  handed to worker processes once what is left would take PARALLEL_MIN_S (a worker's start costs
  its import of ember, a quarter to half a second of CPU); structurally equal kernels are one kernel, named
  after the operators of the first group that uses it (`conv2d_add_relu_3`).
- `LOWERED`: the kernels lowered in this process, by workload and target (every fact of the target
  is part of the key: a kernel lowered for 16 lanes is never reused for 8; for a GPU, the per-shape
  product choices in force too; an LRU of LOWERED_CACHE_SIZE kernels). A workload is the group's
  structure only (operators, attributes, types), never its constants' values, which reach a kernel
  as buffers; so a model compiled again, or a transformer block compiled once per layer's weights
  (torch.compile), lowers nothing again; its kernels are the same objects as before, whose C the
  code generator keeps (ember.codegen.c). Below it, the cache folder keeps lowered kernels for other
  processes (ember.runtime.kept, by `_disk_key`: the workload's key, the target's every fact and the
  GPU's product choices; EMBER_LOWERED_CACHE), so a process compiling what another one compiled
  lowers nothing (`Lowered.loaded`).
  Tuned compiles (a schedule lookup given) and compiles that print or verify the loop IR
  (EMBER_PRINT_LOWER, EMBER_DEBUG) lower every kernel, and read and keep none on disk.

Nothing here knows of tuning databases: the caller gives the lookup.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

from . import config
from .errors import CompileError
from .graph.core import Graph, TensorType
from .kernel import lower
from .passes.fuse import FUSE_LEVEL, FusedGraph, Group, fuse, unfused
from .passes.pipeline import PassReport, disabled_passes_of, printed_passes, run_pipeline
from .passes.quantize_weights import WeightFormat
from .runtime import kept
from .schedules.apply import GroupNode, group_kernel
from .target import Target, as_target
from .te.schedule import TESchedule
from .tir.expr import as_int
from .tir.params import bind_params
from .tir.schedule import Schedule, Trace
from .tir.stmt import PrimFunc
from .tir.structural import structural_hash
from .workers import Call, WorkerPool

PARALLEL_MIN_S = 2.0  # CPU seconds of lowering left, estimated, past which the rest goes to workers
MAX_NAME_OPS = 4  # operators named in a kernel's name
LOWERED_CACHE_SIZE = 512  # lowered kernels kept in a process (LOWERED), least recently used first out

# the tuned schedule of a workload key (ember.tune.Task.key), or None: the operators' own is used.
# Lowering in worker processes sends it to them, so it must pickle (Database.schedules does).
ScheduleLookup = Callable[[str], Trace | None]


@dataclass(frozen=True, eq=False)
class Workload:
    """What a group of operator applications computes (see ember.schedules.apply.group_kernel): its
    input types; its nodes (op, attributes, inputs, output types), an input being (-1, k) for
    the group's input k or (j, i) for output i of node j; and its outputs, as (j, i).

    Two workloads are equal when their `key`s are: Python's equality of attribute values would
    merge 1, 1.0 and True, or 0.0 and -0.0, which a kernel's code tells apart."""

    inputs: tuple[TensorType, ...]
    nodes: tuple[GroupNode, ...]
    outputs: tuple[tuple[int, int], ...]

    @functools.cached_property
    def key(self) -> tuple:
        """The workload with every attribute value tagged by its type and written as repr writes it."""
        nodes = tuple((op, tuple((k, _typed(v)) for k, v in attrs.items()), refs, out_types)
                      for op, attrs, refs, out_types in self.nodes)
        return self.inputs, nodes, self.outputs

    def __eq__(self, other):
        return isinstance(other, Workload) and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    @property
    def name(self) -> str:
        return kernel_name(op for op, *_ in self.nodes)

    @property
    def static(self) -> bool:
        """Every dimension is a number (only those are tuned)."""
        types = [*self.inputs, *(t for node in self.nodes for t in node[3])]
        return all(isinstance(d, int) or as_int(d) is not None for t in types for d in t.shape)


def _typed(v) -> Hashable:
    """An attribute value (a number, a string, None, or a tuple of them) as a key that equals
    another only when the two would be written alike in code."""
    if isinstance(v, tuple):
        return tuple(_typed(x) for x in v)
    return type(v).__name__, repr(v)


def kernel_name(ops: Iterable[str]) -> str:
    """The operators of a kernel, at most MAX_NAME_OPS of them, e.g. conv2d_add_relu (the
    compiler's kernel names add the number of the distinct kernel: conv2d_add_relu_3)."""
    return "_".join(list(dict.fromkeys(ops))[:MAX_NAME_OPS])


def partition(graph: Graph, opt_level: int = 2, disabled_passes: Sequence[str] = (), *, target: Target | None = None,
              print_ir: str | Sequence[str] | None = None, report: list[PassReport] | None = None,
              precision: str = "fp32", weights: WeightFormat | None = None,
              kv_cache: str | None = None) -> FusedGraph:
    """The graph after the passes of `opt_level` and `precision` for `target` (default: C on this
    machine; ember.passes.pipeline.run_pipeline: `print_ir`, `report`, `weights` and `kv_cache` as there),
    cut into the groups that become kernels."""
    graph = run_pipeline(graph, opt_level, disabled_passes=disabled_passes, target=target, print_ir=print_ir,
                         report=report, precision=precision, weights=weights, kv_cache=kv_cache)
    if cut_regions(opt_level, disabled_passes) is unfused:
        return unfused(graph)
    fused = fuse(graph)
    if "fuse" in printed_passes(print_ir):
        print(f"# after fuse ({len(graph.nodes)} nodes -> {len(fused.groups)} kernels)\n{fused}", file=sys.stderr)
    return fused


def cut_regions(opt_level: int = 2, disabled_passes: Sequence[str] = ()) -> Callable[[Graph], FusedGraph]:
    """How `partition` cuts a graph into groups at this level: `fuse`, or `unfused` (one group per
    node); the compiler cuts the regions of control-flow nodes the same way."""
    return unfused if opt_level < FUSE_LEVEL or "fuse" in disabled_passes_of(disabled_passes) else fuse


def workload_of(group: Group) -> Workload:
    """What a group computes, as plain data: its input types, its nodes, its outputs."""
    inputs = {id(v): k for k, v in enumerate(group.inputs)}
    made = {id(v): (j, i) for j, n in enumerate(group.nodes) for i, v in enumerate(n.outputs)}
    nodes = tuple((n.op, n.attrs, tuple(made.get(id(v)) or (-1, inputs[id(v)]) for v in n.inputs),
                   tuple(v.type for v in n.outputs)) for n in group.nodes)
    return Workload(tuple(v.type for v in group.inputs), nodes, tuple(made[id(v)] for v in group.outputs))


def group_schedule(w: Workload, target: Target | str | None = None) -> tuple[TESchedule, list]:
    """The group's te schedule with its operators' own schedule for `target` (default: C on this
    machine) applied, and its arguments (the group's inputs, then its outputs)."""
    return group_kernel(list(w.inputs), list(w.nodes), list(w.outputs), target=as_target(target or "c"))


def unscheduled(s: TESchedule, args: Sequence) -> PrimFunc:
    """The function `s` started from, its parameters the arguments in call order, named "kernel"."""
    return bind_params(s.sch.original, [a.buffer for a in args], "kernel")


def workload_key(func: PrimFunc) -> str:
    """The tuning key of an unscheduled function: its structural hash, whatever its name."""
    return structural_hash(dataclasses.replace(func, name="kernel"))


def lower_workload(w: Workload, schedules: ScheduleLookup | None = None, target: Target | str = "c") -> PrimFunc:
    """One group as a lowered function for `target` (named "kernel": names do not change the
    structural hash), scheduled by the trace `schedules` has for its key, else by its operators'
    own schedule."""
    s, args = group_schedule(w, target)
    trace = schedules(workload_key(unscheduled(s, args))) if schedules is not None and w.static else None
    if trace is None:
        return lower(s, args, name="kernel", target=target)
    sch = Schedule(unscheduled(s, args))
    trace.apply_to(sch)
    return lower(sch, name="kernel", target=target)


@dataclass(frozen=True)
class Lowered:
    """The kernels of a partition: for each group in run order, its own lowered function (which
    orders its size arguments: a shared kernel may have been lowered for other symbols in the
    same places) and the kernel it calls; the distinct kernels; how many workloads were lowered,
    in how many processes."""

    calls: tuple[tuple[Group, PrimFunc, PrimFunc], ...]
    kernels: tuple[PrimFunc, ...]
    lowered: int
    jobs: int
    reused: int = 0  # of the `lowered` workloads, those whose kernel came from LOWERED
    loaded: int = 0  # of the `lowered` workloads, those whose kernel came from the disk (ember.runtime.kept)


# a workload's lowered function, its structural hash, and the kernels made of it by name
Kept = tuple[PrimFunc, str, dict[str, PrimFunc]]


class LoweredCache:
    """Lowered kernels by (workload, target) (`Kept`), the `size` most recently used kept; `hits`
    and `misses` count lookups. Safe to share between threads."""

    def __init__(self, size: int):
        self.size, self.hits, self.misses = size, 0, 0
        self._entries: OrderedDict[tuple, Kept] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> Kept | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self.misses += 1
            else:
                self.hits += 1
                self._entries.move_to_end(key)
            return found

    def put(self, key: tuple, value: Kept) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)


LOWERED = LoweredCache(LOWERED_CACHE_SIZE)


def lower_groups(groups: Sequence[Group], jobs: int | None = None, schedules: ScheduleLookup | None = None,
                 target: Target | str = "c") -> Lowered:
    """The kernel of each group (see `Lowered`): distinct workloads lowered once, those not in
    LOWERED (see the module doc) in `jobs` worker processes (default: see `_lower_all`);
    structurally equal functions share one kernel, named after its first group's operators."""
    target = as_target(target)
    of_group = [workload_of(g) for g in groups]
    workloads = list(dict.fromkeys(of_group))
    memo = schedules is None and not config.get("print_lower") and not config.get("debug")
    found = {w: LOWERED.get(_memo_key(w, target)) for w in workloads} if memo else {}
    missing = [w for w in workloads if found.get(w) is None]
    reused = len(workloads) - len(missing)
    on_disk = memo and config.get("lowered_cache")
    for w in missing if on_disk else ():
        if (entry := kept.get("lowered", _disk_key(w, target))) is not None:
            found[w] = (*entry, {})
            LOWERED.put(_memo_key(w, target), found[w])
    missing = [w for w in missing if found.get(w) is None]
    if missing and target.gpu is not None and _choices_changed():
        jobs = 1  # (a worker would read product_choices' file, not the entries in force here)
    results, jobs = _lower_all(missing, schedules, target, jobs)
    for w, (func, key) in zip(missing, results):
        found[w] = func, key, {}
        if memo:
            LOWERED.put(_memo_key(w, target), found[w])
        if on_disk:
            kept.put("lowered", _disk_key(w, target), found[w][:2])
    kernels: dict[str, PrimFunc] = {}  # structural hash -> the kernel
    shared: dict[Workload, PrimFunc] = {}  # workload -> its kernel
    for w in workloads:
        func, key, named = found[w]
        if key not in kernels:  # named once per name, so that codegen finds the same object again
            name = f"{w.name}_{len(kernels)}"
            kernels[key] = named.get(name) or named.setdefault(name, dataclasses.replace(func, name=name))
        shared[w] = kernels[key]
    calls = tuple((g, found[w][0], shared[w]) for g, w in zip(groups, of_group))
    return Lowered(calls, tuple(kernels.values()), len(workloads), jobs, reused,
                   len(workloads) - reused - len(missing))


def _choices_changed() -> bool:
    from .schedules.gpu import product_choices

    return product_choices.changed()


def _memo_key(w: Workload, target: Target) -> tuple:
    """A workload's key in LOWERED: its structure, every fact of the target and, for a GPU, the
    product choices in force (ember.schedules.gpu.product_choices.entries: entries changed at
    run time, a benchmark's forced tiles, are another key, never answered by a kernel lowered
    under others)."""
    if target.gpu is None:
        return w, target, ""
    from .schedules.gpu import product_choices

    return w, target, product_choices.entries()


def _disk_key(w: Workload, target: Target) -> str:
    """A workload's key on disk: `_memo_key` as text (the file's own edits change ember's source,
    which every key on disk holds: ember.runtime.kept)."""
    return repr((w.key, *_memo_key(w, target)[1:]))


def lowered_and_hashed(w: Workload, schedules: ScheduleLookup | None, target: Target | str) -> tuple[PrimFunc, str]:
    """`lower_workload`, and the structural hash of its function: hashed where it was lowered, so
    that workers hash in parallel and the parent hashes nothing (a tenth of a lowering)."""
    func = lower_workload(w, schedules, target)
    return func, structural_hash(func)


def _lower_all(workloads: list[Workload], schedules: ScheduleLookup | None, target: Target | str,
               jobs: int | None) -> tuple[list[tuple[PrimFunc, str]], int]:
    """The lowered function of each workload and its structural hash, and the processes that
    lowered them: `jobs` worker processes when given (1: this one). By default this process lowers
    them in turn until the CPU time they took, per workload, times those left reaches
    PARALLEL_MIN_S; the rest then go to one worker per core. The time is this thread's: the
    process's would count other threads' (a compiled model's OpenMP threads spinning after a
    call). A worker costs its start (importing ember: 0.25 s of CPU on this project's 2-core
    machine with Python's bytecode cached, 0.45 s without; ResNet-18's 20 kernels take 0.55 s to
    lower), so only a long lowering gains by them."""
    if jobs is not None:
        jobs = max(1, min(jobs, len(workloads)))
        if jobs == 1:
            return [lowered_and_hashed(w, schedules, target) for w in workloads], 1
        return _in_workers(workloads, schedules, target, jobs), jobs
    cores, done, start = os.cpu_count() or 1, [], time.thread_time()
    for k, w in enumerate(workloads):
        left = len(workloads) - k
        if k and cores > 1 and left > 1 and (time.thread_time() - start) / k * left >= PARALLEL_MIN_S:
            jobs = min(cores, left)
            return done + _in_workers(workloads[k:], schedules, target, jobs), jobs
        done.append(lowered_and_hashed(w, schedules, target))
    return done, 1


def _in_workers(workloads: list[Workload], schedules: ScheduleLookup | None, target: Target | str,
                jobs: int) -> list[tuple[PrimFunc, str]]:
    """`lowered_and_hashed` of each workload in `jobs` worker processes of ember's own
    (ember.workers: they work from any script, thread or daemonic process). A lowering error is
    raised again here as it was raised there; a worker that dies raises CompileError."""
    with WorkerPool(jobs, preload=[__name__], name="ember-lower") as pool:
        outcomes = pool.run([Call(f"{__name__}:lowered_and_hashed", (w, schedules, target)) for w in workloads])
    for w, outcome in zip(workloads, outcomes):
        if outcome.status == "lost":
            raise CompileError(f"the worker process lowering a {w.name} kernel {outcome.value}; "
                               f"compile with jobs=1 to lower every kernel in this process")
    return [outcome.result() for outcome in outcomes]

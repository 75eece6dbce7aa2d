"""The driver: a graph (or a model a frontend turns into one) down to a CompiledModel.

`compile_graph(graph)`:
1. checks the graph (ember.checks: it has outputs, every operator is known, no tensor is larger
   than the machine's memory); after the graph passes of the optimization level
   (ember.passes.pipeline), every symbol must be a dimension of its own of some input (so each
   call can bind it), every other symbolic dimension an expression of those (ember.dims); the
   symbols' ranges (Graph.ranges) go into the spec, checked at each call;
2. groups the nodes into kernels and lowers one kernel per group (ember.lowering, the path the
   tuner's task extraction takes too: `partition` runs the passes and ember.passes.fuse;
   `lower_groups` makes each group's te with `ember.schedules.apply.group_kernel`, schedules it with
   a tuned trace from `schedules` or its operators' own schedule, and lowers it). Groups of the
   same operators on the same types with the same attributes share one lowering; lowered
   functions that are structurally equal share one kernel, so repeated blocks compile once.
   Distinct kernels are lowered in `jobs` worker processes (ember.workers) when there are many;
3. plans the workspace over the kernel graph (ember.passes.plan_memory: the steps the model runs,
   kernels and views, with the outputs each kernel may write in place; liveness, greedy by size;
   values inside a group never reach memory). A group of reshapes alone makes no kernel: its
   output is a view of its input's bytes. A model whose weights, workspace peak and outputs
   exceed the machine's memory is refused (CompileError);
4. renders every kernel (ember.codegen.c) and the entry function that calls them in order
   (ember.codegen.entry) as ONE C translation unit, built once by ember.runtime.build (cached by
   content hash: compiling the same model again compiles no C);
5. returns the CompiledModel (ember.runtime.model), whose `stats` holds the time of each phase
   (and the report of each graph pass).

On target "python" (ember.target), steps 1-3 are the same and step 4 renders no C: the kernels
run on the loop-IR interpreter, called by the entry function's Python twin
(ember.runtime.interpreted.InterpretedModel): slow, exact, no compiler.

`compile(obj)` dispatches a Graph, a torch.nn.Module (ember.frontend.torch) or an ONNX file or
ModelProto (ember.frontend.onnx); `load(path)` reads a saved artifact without lowering or
compiling anything.

Options read (ember.config): num_threads, checked, and through the build: cc, cflags, cache_dir.
The num_threads, cc and cflags keywords are checked (ember.config.resolve) before anything is
compiled.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import config, dims
from .checks import check_graph, check_model_fits
from .codegen.c import CRenderer
from .codegen.entry import Copy, KernelCall, Ref, SizeExpr, render_entry, render_spec
from .errors import ArgumentTypeError, ConfigError, ShapeError
from .frontend import import_model
from .graph.core import Graph, Value
from .lowering import ScheduleLookup, lower_groups, partition
from .passes.fuse import Group
from .passes.pipeline import PassReport
from .passes.plan_memory import KernelGraph, MemoryPlan, kernel_graph, plan_memory
from .runtime.build import build_library, is_cached
from .runtime.contract import contract, contract_text
from .runtime.model import CompiledModel, KernelInfo, ModelSpec, TensorSpec
from .target import Target, as_target


@dataclass(frozen=True)
class CompileStats:
    """Where the compile time went (seconds), and how much was shared or cached."""

    nodes: int
    kernels: int  # distinct kernels in the library
    lowered: int  # distinct operator applications lowered
    jobs: int  # processes that lowered them
    lower_s: float
    codegen_s: float
    build_s: float
    total_s: float
    cached: bool  # the library came from the build cache
    passes: tuple[PassReport, ...] = ()  # the graph passes run, in order

    def __str__(self):
        return (f"{self.nodes} nodes, {self.kernels} kernels ({self.lowered} lowered in {self.jobs} "
                f"process(es)): lower {self.lower_s:.2f} s, codegen {self.codegen_s:.2f} s, build "
                f"{self.build_s:.2f} s{' (cached)' if self.cached else ''}, total {self.total_s:.2f} s")


def compile_graph(graph: Graph, *, opt_level: int = 2, disabled_passes: Sequence[str] = (),
                  print_ir: str | Sequence[str] | None = None, name: str = "model", num_threads: int | None = None,
                  jobs: int | None = None, target: str | Target = "c", cc: str | None = None,
                  cflags: str | Sequence[str] | None = None, database=None,
                  schedules: ScheduleLookup | None = None, checked: bool | None = None) -> CompiledModel:
    """Compile a graph to a CompiledModel (see the module doc).

    opt_level, disabled_passes, print_ir: the graph passes to run, to skip, and to print the
        graph after (see ember.passes.pipeline.run_pipeline).
    num_threads: OpenMP threads of each call (default: the num_threads option; 0: OpenMP's own).
    jobs: processes that lower kernels (default: one per core when there are at least
        PARALLEL_MIN_KERNELS distinct kernels, else 1; see ember.workers).
    target: "c", "python" (the loop-IR interpreter runs every kernel), or an ember.target.Target:
        the code generator and builder, the SIMD width the kernels and the layout pass are made
        for, the key of tuned schedules.
    cc, cflags: the C compiler and its flags (default: the target's, else the options).
    database: an ember.tune.Database; each kernel with a record for the target takes the
        schedule of its best record (`database.schedules(target.key)` is the lookup used).
    schedules: the lookup of tuned schedules itself (ember.lowering.ScheduleLookup), instead of a
        database.
    checked: an integer division by zero raises ZeroDivisionError (default: the checked option);
        unchecked, x // 0 == x % 0 == 0 as in numpy (ember.ops.binary).
    """
    start = time.perf_counter()
    num_threads, target = config.threads(num_threads), as_target(target, cc=cc, cflags=cflags)
    if target.kind == "python" and checked:
        raise ConfigError("checked=True needs target 'c': the interpreter (target 'python') does not check divisions")
    check_graph(graph)
    if database is not None:
        if schedules is not None:
            raise ArgumentTypeError("compile_graph takes a database or its schedules, not both")
        schedules = database.schedules(target.key)
    passes: list[PassReport] = []
    fused = partition(graph, opt_level, disabled_passes, target=target, print_ir=print_ir, report=passes)
    ranges = graph.ranges
    graph = fused.graph
    symbols = _symbols(graph)

    steps = kernel_graph(fused)  # kernels, views, in-place writes
    lowered = lower_groups(steps.kernels, jobs, schedules, target)
    users: dict[str, list[Group]] = {}
    for g, _, k in lowered.calls:
        users.setdefault(k.name, []).append(g)
    lower_s = time.perf_counter() - start

    t = time.perf_counter()
    plan = plan_memory(steps)
    refs = _Refs(steps, plan, symbols)
    calls = [KernelCall(CRenderer.symbol(k), tuple(refs.of(v) for v in (*g.inputs, *g.outputs)),
                        tuple(Ref("size", symbols.index(s.name)) for s in own.size_vars),
                        "; ".join(repr(n) for n in g.nodes))
             for g, own, k in lowered.calls]
    copies = refs.copies()  # before the weights are listed: a copied output may be a weight
    checked = config.get("checked") if checked is None else bool(checked)
    copies = refs.copies()  # before the spec: an output that is a constant adds that constant to the weights
    spec = ModelSpec(
        name=name,
        inputs=tuple(_spec(v) for v in graph.inputs),
        outputs=tuple(_spec(v) for v in graph.outputs),
        symbols=tuple(symbols),
        ranges={s: ranges[s] for s in symbols if s in ranges},
        weights=tuple(refs.weights),
        kernels=tuple(KernelInfo(k.name, users[k.name][0].ops, tuple(n.name for g in users[k.name] for n in g.nodes))
                      for k in lowered.kernels),
        target=target.describe(),
    )
    weights = {w: graph.constants[w] for w in refs.weights}
    check_model_fits(graph.name, plan, weights, (v.type for v in graph.outputs))
    if target.kind == "python":
        return _interpreted(spec, lowered, calls, copies, weights, plan, graph, start, lower_s, t, passes)
    source = "\n".join([CRenderer(checked).render_unit(lowered.kernels),
                         render_entry(calls, copies, checked=checked),
                         render_spec(contract_text(contract(spec, plan.to_json(), weights))), ""])
    codegen_s = time.perf_counter() - t

    t = time.perf_counter()
    cached = is_cached(source, cc=target.cc, cflags=target.cflags)
    library = build_library(source, cc=target.cc, cflags=target.cflags)
    build_s = time.perf_counter() - t

    stats = CompileStats(len(graph.nodes), len(lowered.kernels), lowered.lowered, lowered.jobs, lower_s, codegen_s,
                         build_s, time.perf_counter() - start, cached, tuple(passes))
    return CompiledModel(spec, library, weights, plan, graph=graph,
                         source=source, num_threads=num_threads, stats=stats)


def _interpreted(spec, lowered, calls, copies, weights, plan, graph, start, lower_s, t, passes):
    """The model on the loop-IR interpreter: the same kernels, plan and calls (target "python")."""
    from .runtime.interpreted import InterpretedCall, InterpretedEntry, InterpretedModel

    def arg(ref: Ref, v: Value):
        return ref, tuple(_sizes(d, list(spec.symbols)) for d in v.shape), v.dtype

    entry = InterpretedEntry(lowered.kernels, [
        InterpretedCall(k.name, tuple(arg(ref, v) for ref, v in zip(call.args, (*g.inputs, *g.outputs))), call.sizes,
                        len(g.outputs), call.comment)
        for call, (g, _, k) in zip(calls, lowered.calls)], copies)
    codegen_s = time.perf_counter() - t
    stats = CompileStats(len(graph.nodes), len(lowered.kernels), lowered.lowered, lowered.jobs, lower_s, codegen_s,
                         0.0, time.perf_counter() - start, False, tuple(passes))
    return InterpretedModel(spec, entry, weights, plan, graph=graph, stats=stats)


def compile(model, example_inputs=None, *, dynamic_shapes=None, **options) -> CompiledModel:
    """Compile a Graph, a torch.nn.Module (traced with `example_inputs`; `dynamic_shapes` is
    torch.export's specification, e.g. ({1: torch.export.Dim("seq", min=1, max=512)},): one
    compile serves every size in range), or an ONNX model (a path or a ModelProto). Options:
    those of `compile_graph`."""
    return compile_graph(import_model(model, example_inputs, dynamic_shapes=dynamic_shapes), **options)


def load(path: str | Path, *, num_threads: int | None = None) -> CompiledModel:
    """A model saved with `CompiledModel.save`: its library is loaded as it is, nothing is
    traced, lowered or compiled; the graph is read when first asked for. A folder whose files
    do not match its manifest, or whose manifest does not match its library, is an ArtifactError
    (ember.runtime.artifact)."""
    from .runtime.artifact import read_artifact

    art = read_artifact(path)  # every file checked against the manifest, the manifest against the library
    return CompiledModel(art.spec, art.library, art.weights, MemoryPlan.from_json(art.workspace),
                         graph=art.read_graph if art.has_graph else None, source=art.source,
                         num_threads=config.threads(num_threads))


# -- checks -----------------------------------------------------------------------------------
def _symbols(graph: Graph) -> list[str]:
    """The symbols, in order of first appearance as an input dimension of their own (each call
    binds them there); every other dimension, of inputs and values alike, may be an expression of
    them only (ember.dims)."""
    symbols = list(dict.fromkeys(d for v in graph.inputs for d in v.shape if dims.is_symbol(d)))
    for v in [*graph.inputs, *(v for n in graph.nodes for v in n.outputs)]:
        unbound = [d for d in v.shape if any(s not in symbols for s in dims.symbols_of(d))]
        if unbound:
            where = f"node {v.node.name}: {v.node.op}" if v.node is not None else "an input"
            raise ShapeError(f"graph {graph.name}: %{v.name} ({where}) has dimension(s) {unbound} that no input has "
                             "(a symbol must be a dimension of its own of some input), so a call cannot bind them")
    return symbols


def _sizes(d, symbols: list[str]) -> int | Ref | SizeExpr:
    """A dimension as the entry function computes it from its `sizes` (the symbols' values)."""
    if dims.is_symbol(d):
        return Ref("size", symbols.index(d))
    if isinstance(d, str):
        return SizeExpr(tuple((tuple(symbols.index(s) for s in m), c) for m, c in dims.parse(d).terms))
    return int(d)


def _spec(v: Value) -> TensorSpec:
    return TensorSpec(v.name, tuple(d if isinstance(d, str) else int(d) for d in v.shape), v.dtype)



# -- where each value lives --------------------------------------------------------------------
class _Refs:
    """The entry function's reference of each value: an input, an output (or a value an output
    views), a weight (constants in order of first use), or a workspace tensor of the plan; a view
    outside the workspace refers to what it views."""

    def __init__(self, steps: KernelGraph, plan: MemoryPlan, symbols: list[str]):
        graph = steps.graph
        self.graph, self.symbols = graph, symbols
        self.viewed = {id(s.outputs[0]): s.inputs[0] for s in steps.steps if s.view}
        self.inputs = {id(v): k for k, v in enumerate(graph.inputs)}
        self.outputs: dict[int, int] = {}
        for k, v in enumerate(graph.outputs):
            self.outputs.setdefault(id(v), k)
        for v, k in steps.written_as:  # written as the output that views it
            self.outputs[id(v)] = k
        self.workspace = {t.name: k for k, t in enumerate(plan.tensors)}
        self.weights: dict[str, int] = {}
        self.produced = {id(v) for n in graph.nodes for v in n.outputs}

    def of(self, v: Value) -> Ref:
        if id(v) in self.inputs:
            return Ref("input", self.inputs[id(v)])
        if self.graph.is_constant(v):
            return Ref("weight", self.weights.setdefault(v.name, len(self.weights)))
        if id(v) in self.outputs:
            return Ref("output", self.outputs[id(v)])
        if v.name in self.workspace:
            return Ref("workspace", self.workspace[v.name])
        return self.of(self.viewed[id(v)])

    def copies(self) -> list[Copy]:
        """Outputs no kernel writes: inputs and constants returned as they are, repeated outputs."""
        out = []
        for k, v in enumerate(self.graph.outputs):
            if self.outputs[id(v)] == k and id(v) in self.produced:
                continue
            sizes = tuple(_sizes(d, self.symbols) for d in v.shape)
            out.append(Copy(Ref("output", k), self.of(v), sizes, np.dtype(v.dtype).itemsize))
        return out

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
   Lowered kernels are kept for the process (ember.lowering.LOWERED): a model compiled again,
   with other weights or not, lowers nothing again (its graph passes, which read the weights,
   and its weights' packing run again). Distinct kernels are lowered in `jobs` worker processes
   (ember.workers) when there are many;
3. plans the workspace over the kernel graph (ember.passes.plan_memory: the steps the model runs,
   kernels and views, with the outputs each kernel may write in place; liveness, greedy by size;
   values inside a group never reach memory). A group of reshapes alone makes no kernel: its
   output is a view of its input's bytes. A model whose weights, workspace peak and outputs
   exceed the machine's memory is refused (CompileError);
4. writes the call program (ember.program, made by ember.passes.call_program): the launch of
   each kernel on its buffers of the plan, in order, the copies of outputs no kernel writes, and
   a branch or a loop around the launches of the regions of each control-flow node
   (ember.ops.control), each region fused, lowered and planned with the rest;
5. hands the kernels and the program to the target's backend (ember.backends), which renders
   them (for "c": ONE library of every kernel and the entry function that runs the program, its
   source cut into units compiled in parallel when it is large), builds them (once: the build
   cache keys the source by content hash) and returns its compiled model (ember.runtime.model),
   whose `stats` (ember.compile_stats.CompileStats) holds the time of each phase (and the report
   of each graph pass), which `compile_report()` says in words.

A graph with nodes whose output size depends on the data (nonzero, unique: ember.ops.dynamic) is
cut around them first (ember.passes.host_segments): each segment between them goes through the
steps above as a model of its own, those nodes run on the host, and the result is a
SegmentedModel (ember.runtime.segmented).

On target "python" (ember.backends.python), steps 1-4 are the same and step 5 renders no C: the
kernels run on the loop-IR interpreter, and the program too (ember.runtime.interpreted), branches
and loops included: slow, exact, no compiler.
On target "cuda" (ember.backends.cuda), the kernels are the GPU family's, built by NVRTC, and the
program runs on the GPU (ember.cuda.model), or on the interpreter with GPU semantics for
Target("cuda", simulate=True).

`compile(obj)` dispatches a Graph, a torch.nn.Module (ember.frontend.torch, through the model
cache: ember.compile_module) or an ONNX file or ModelProto (ember.frontend.onnx); an ONNX model
with runtime-valued inputs (a graph input that gives axes, k, pads, a shape), or with sequences or
optionals among its inputs or outputs, becomes a SpecializedModel (ember.runtime.specialized),
which compiles on call one model per value of those inputs (per structure: the lengths and shapes
of the lists it is given);
`load(path)` reads a saved artifact without lowering or compiling anything.

Options read (ember.config): num_threads, checked, max_specializations, and through the build: cc, cflags, cache_dir.
The num_threads, cc and cflags keywords are checked (ember.config.resolve) before anything is
compiled.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from . import config, dims
from .checks import check_graph, check_model_fits
from .compile_module import compile_module, from_artifact
from .compile_stats import Clock, CompileStats, with_import
from .errors import ArgumentTypeError, CompileError, EmberError, ShapeError
from .frontend import import_model
from .graph.core import Graph, Value
from .lowering import ScheduleLookup, cut_regions, lower_groups, partition
from .ops import get as get_op
from .ops.dynamic import HOST_OPS
from .passes.bf16_weights import kept_fp32
from .passes.call_program import call_program
from .passes.host_segments import has_host_nodes, host_segments
from .passes.kv_cache import check_kv_cache
from .passes.pipeline import PassReport, pipeline_of
from .passes.plan_memory import kernel_graph, plan_memory
from .passes.quantize_weights import WeightFormat
from .program import Program
from .runtime.heap import release_free_memory
from .runtime.model import CompiledModel
from .runtime.segmented import RunStep, SegmentedModel, segment_step
from .runtime.spec import KernelInfo, ModelSpec, TensorSpec
from .runtime.specialized import SpecializedModel
from .runtime.summary import buffer_of
from .target import Target, aligned_copy, as_target


def compile_graph(graph: Graph, *, opt_level: int = 2, disabled_passes: Sequence[str] = (),
                  print_ir: str | Sequence[str] | None = None, name: str = "model", num_threads: int | None = None,
                  jobs: int | None = None, target: str | Target = "c", cc: str | None = None,
                  cflags: str | Sequence[str] | None = None, database=None,
                  schedules: ScheduleLookup | None = None,
                  checked: bool | None = None, precision: str = "fp32", weights=None, group_size: int | None = None,
                  zero_points: bool = False, kv_cache: str = "float32",
                  host: Mapping[str, Callable] | None = None) -> CompiledModel | SegmentedModel:
    """Compile a graph to a CompiledModel (see the module doc).

    opt_level, disabled_passes, print_ir: the graph passes to run, to skip, and to print the
        graph after (see ember.passes.pipeline.run_pipeline).
    num_threads: OpenMP threads of each call (default: the num_threads option; 0: OpenMP's own).
    jobs: processes that lower kernels (default: this one, the rest handed to one worker per core
        once what is left would take lowering.PARALLEL_MIN_S; see ember.workers).
    target: "c", "python" (the loop-IR interpreter runs every kernel), "cuda" (the GPU), or an
        ember.target.Target (Target("cuda", simulate=True): GPU kernels on the interpreter):
        its backend (ember.backends: renderers, builder, compiled-model class), the SIMD width the
        kernels and the layout pass are made for, the key of tuned schedules.
    cc, cflags: the C compiler and its flags (default: the target's, else the options).
    database: an ember.tune.Database; each kernel with a record for the target takes the
        schedule of its best record (`database.schedules(target.key)` is the lookup used).
    schedules: the lookup of tuned schedules itself (ember.lowering.ScheduleLookup), instead of a
        database.
    checked: an integer division by zero raises ZeroDivisionError (default: the checked option);
        unchecked, x // 0 == x % 0 == 0 as in numpy (ember.ops.binary).
    precision: "fp32", or "bf16": the weights of linear layers stored in bf16 and their products
        on the target's bf16 unit (AMX, else AVX512-BF16; without one, the same bf16 products on
        fp32 vectors) summed in fp32, all else fp32 (ember.passes.bf16_weights). For target
        "cuda" (its backend's precisions): "fp16" or "bf16", every weight and activation stored
        in that type, sums in fp32, inputs and outputs converted at the boundary
        (ember.passes.half_precision); "tf32", the products' operands rounded to tf32
        (ember.passes.tf32_products).
    weights: "int8" or "int4": the linear layers' constant weights quantized, weight-only
        (ember.passes.quantize_weights: int8 per output channel; int4 per group of `group_size`
        rows, 32, 64 or 128 (default 128), symmetric or with `zero_points`); None: float32; a
        mapping of weights quantized already (ember.frontend.gguf.load_gguf's `weights`): those
        take their own codes, the others stay float32. group_size or zero_points with weights
        other than "int4" is a ConfigError (they would be dropped).
    kv_cache: "float32", "bf16" or "int8": a decode step's key/value cache read in place (the graph
        inputs that only appended attentions read as keys and values, ember.passes.kv_cache)
        taken in bfloat16, half the bytes a step reads at a long context; the caller's cache
        buffers are then bfloat16 (ml_dtypes'), the step's own rows still float32 outputs. "int8":
        a quarter of the bytes, each row (a position of a head) int8 codes and a float32 scale,
        (..., E + 4) int8 buffers whose rows the caller writes with ember.tir.kv_int8.quantize_rows.
    host: node name -> a function `run(*arrays) -> list of arrays` that computes that node instead
        of a kernel: the graph is cut around those nodes as around data-dependent ones, and the
        result is a SegmentedModel (ember.quantize's offload of products to an accelerator).
    """
    clock = Clock()
    fmt = WeightFormat.of(weights, group_size, zero_points)
    kv_dtype = check_kv_cache(kv_cache)
    num_threads, target = config.threads(num_threads), as_target(target, cc=cc, cflags=cflags)
    backend = target.backend
    backend.check_options(checked=checked, precision=precision, weights=weights)
    pipeline_of(opt_level, precision, target)  # (a bad level or precision named before anything runs)
    target.check_runs_here()  # the model is built to run here
    check_graph(graph)
    if host or has_host_nodes(graph):  # (nonzero, unique, `host`: compiled around, computed on the host)
        return _segmented(graph, name, host or {}, dict(
            opt_level=opt_level, disabled_passes=disabled_passes, print_ir=print_ir, num_threads=num_threads, jobs=jobs,
            target=target, database=database, schedules=schedules, checked=checked, precision=precision,
            weights=weights, group_size=group_size, zero_points=zero_points, kv_cache=kv_cache))
    if database is not None:
        if schedules is not None:
            raise ArgumentTypeError("compile_graph takes a database or its schedules, not both")
        schedules = database.schedules(target.key)
    given = {id(b): b for b in map(buffer_of, (a for _, a in graph.all_constants()))}  # (the caller's)
    passes: list[PassReport] = []
    fused = partition(graph, opt_level, disabled_passes, target=target, print_ir=print_ir, report=passes,
                      precision=precision, weights=fmt, kv_cache=kv_dtype)
    ranges = graph.ranges
    graph = fused.graph
    _check_loops(graph)
    symbols = _symbols(graph)
    backend.check_graph(graph, symbols)
    steps = kernel_graph(fused, cut_regions(opt_level, disabled_passes), target.align)  # kernels, views, in place
    passes_s, passes_cpu = clock.lap()

    lowered = lower_groups(steps.kernels, jobs, schedules, target)
    lower_s, lower_cpu = clock.lap()

    plan = plan_memory(steps, target.align)
    program = call_program(steps, plan, lowered.calls, lowered.kernels, symbols)
    spec = _model_spec(name, graph, symbols, ranges, program, lowered.calls, target)
    constants = dict(graph.all_constants())
    weights = {w: _model_weight(constants[w], given, target.align) for w in program.weights}
    graph.share_constants({k: np.array(a) for k, a in constants.items()  # (the rest of the caller's: small)
                           if k not in weights and id(buffer_of(a)) in given})
    check_model_fits(graph.name, plan, weights, (v.type for v in graph.outputs))
    checked = config.get("checked") if checked is None else bool(checked)
    rendered = backend.render(program, spec, plan, weights, checked=checked, target=target)
    codegen_s, codegen_cpu = clock.lap()

    built, cached = backend.build(rendered, target)
    build_s, build_cpu = clock.lap()

    model = backend.model(spec, built, weights, plan, graph=graph, source=rendered.source, num_threads=num_threads,
                          own_weights=True)
    load_s, load_cpu = clock.lap()
    model.stats = CompileStats(len(graph.nodes), len(lowered.kernels), lowered.lowered, lowered.jobs, lower_s,
                               codegen_s, build_s, passes_s + lower_s + codegen_s + build_s + load_s, cached,
                               tuple(passes), lowered.reused, lowered.loaded, passes_s=passes_s, load_s=load_s,
                               cpu={"passes": passes_cpu, "lowering": lower_cpu, "codegen": codegen_cpu,
                                    "C compiler": build_cpu, "load": load_cpu},
                               kept_fp32=tuple(kept_fp32(graph)) if any(r.name == "bf16_weights" for r in passes)
                               else ())
    return model


def _model_weight(a: np.ndarray, given: Mapping[int, object], align: int) -> np.ndarray:
    """A weight as the model holds it: the compile's own array where it made one aligned (a
    packed weight: no one else holds it), made read-only; else an aligned copy (the caller's
    constants, which the caller may change)."""
    if id(buffer_of(a)) in given or not a.flags.c_contiguous or a.ctypes.data % align:
        return aligned_copy(a, align)
    a.flags.writeable = False
    return a


def _model_spec(name: str, graph: Graph, symbols: list[str], ranges, program: Program, calls,
                target: Target) -> ModelSpec:
    """What the runtime knows of the model: its signature, the program's weights, each kernel with
    the operators it computes and the nodes that run it (`calls`: (group, function, kernel))."""
    users: dict[str, list] = {}
    for g, _, k in calls:
        users.setdefault(k.name, []).append(g)
    return ModelSpec(
        name=name,
        inputs=tuple(_spec(v) for v in graph.inputs),
        outputs=tuple(_spec(v) for v in graph.outputs),
        symbols=tuple(symbols),
        ranges={s: ranges[s] for s in symbols if s in ranges},
        weights=program.weights,
        kernels=tuple(KernelInfo(k.name, users[k.name][0].ops, tuple(n.name for g in users[k.name] for n in g.nodes))
                      for k in program.kernels),
        target=target.describe(),
    )


def _segmented(graph: Graph, name: str, host: Mapping[str, Callable], options: dict) -> SegmentedModel:
    """A graph with nodes whose output size depends on the data, or nodes `host` computes: its
    segments between them compiled, those nodes run on the host with their function in `host`,
    else their NumPy reference (ember.runtime.segmented)."""
    steps = []
    for k, step in enumerate(host_segments(graph, lambda n: n.op in HOST_OPS or n.name in host)):
        if step.graph is not None:
            steps.append(segment_step(compile_graph(step.graph, name=f"{name}_{k}", **options), step.inputs,
                                      step.outputs))
        else:
            run = host.get(step.node.name) or _host_function(step.node)
            steps.append(RunStep(run, step.inputs, step.outputs,
                                 what=f"{step.node.op} ({step.node.name})"))
    return SegmentedModel(name, [_spec(v) for v in graph.inputs], [v.name for v in graph.outputs], steps,
                          graph.constants)


def _host_function(node):
    """The node's NumPy reference, its outputs in the node's dtypes."""
    op = get_op(node.op)

    def run(*arrays):
        return [np.asarray(o).astype(v.dtype, copy=False) for o, v in zip(op.reference(list(arrays), node.attrs),
                                                                         node.outputs)]

    return run


def compile(model, example_inputs=None, *, dynamic_shapes=None, max_specializations: int | None = None,
            report: bool = False, cache: str = "module", **options) -> CompiledModel | SpecializedModel:
    """Compile a Graph, a torch.nn.Module (traced with `example_inputs`; `dynamic_shapes` is
    torch.export's specification, e.g. ({1: torch.export.Dim("seq", min=1, max=512)},): one
    compile serves every size in range), or an ONNX model (a path or a ModelProto). Options:
    those of `compile_graph`. An ONNX model with runtime-valued
    inputs (a graph input giving axes, k, pads, scales, a shape) is a SpecializedModel, compiled on
    call for each value of those, for at most `max_specializations` values (default: the
    max_specializations option). report=True prints where the time went to stderr
    (`CompileStats.report`; the model's `compile_report()` returns it).
    cache: how the model cache (ember.runtime.model_cache) finds a torch module compiled before:
    "module" by its key before tracing (ember.frontend.module_key: its classes' code, attributes,
    weights and the inputs' specs), else by its trace; "trace" by its trace only (torch.export
    runs: for a forward that reads state the module's key cannot see, see that module). Given for
    a model they mean nothing for (cache for a Graph or an ONNX model, max_specializations for a
    Graph or a torch module), they are an ArgumentTypeError, not dropped."""
    check_option_names(options, "ember.compile", ("dynamic_shapes", "max_specializations", "report", "cache"))
    if cache not in ("module", "trace"):
        raise ArgumentTypeError(f"ember.compile: cache is 'module' or 'trace', got {cache!r}")
    torch = sys.modules.get("torch")
    module = torch is not None and isinstance(model, torch.nn.Module)
    if cache != "module" and not module:  # (options that mean nothing for this model: refused, not dropped)
        raise ArgumentTypeError(f"ember.compile: cache={cache!r} says how the model cache finds a torch.nn.Module; "
                                f"a {type(model).__name__} is not cached")
    if max_specializations is not None and (module or isinstance(model, Graph)):
        raise ArgumentTypeError("ember.compile: max_specializations bounds the compiles of an ONNX model with "
                                f"runtime-valued inputs; a {type(model).__name__} compiles once")
    limit = config.resolve("max_specializations", max_specializations)
    clock = Clock()
    if module and example_inputs is not None:
        compiled = compile_module(model, example_inputs, dynamic_shapes, options, clock, cache, compile_graph)
        release_free_memory()  # (the import's copies and what the passes freed: glibc keeps them otherwise)
        if report:
            print(compiled.compile_report(), file=sys.stderr)
        return compiled
    try:
        graph = import_model(model, example_inputs, dynamic_shapes=dynamic_shapes)
    except EmberError as e:
        value_inputs = _runtime_valued(e)
        if not value_inputs and not _structured(e):
            raise
        compiled = _specialized(model, value_inputs, limit, options)
    else:
        import_s, import_cpu = clock.lap()
        compiled = compile_graph(graph, **options)
        if isinstance(compiled, CompiledModel) and graph is not model:
            compiled.stats = with_import(compiled.stats, import_s, import_cpu)
        del graph  # (its constants, unpacked)
    release_free_memory()
    if report:
        print(compiled.compile_report(), file=sys.stderr)
    return compiled


def check_option_names(options: Mapping, caller: str, more: Sequence[str] = ()) -> None:
    """Refuse a keyword compile_graph does not take before anything is traced or calibrated (a
    misspelt option failed as compile_graph's TypeError only once the model was imported)."""
    known = [n for n in inspect.signature(compile_graph).parameters if n != "graph"]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ArgumentTypeError(f"{caller}: unknown option(s) {', '.join(map(repr, unknown))}; the options are "
                                f"{', '.join(sorted([*known, *more]))}")


def _runtime_valued(e: EmberError) -> tuple[str, ...]:
    """The graph inputs an ONNX import needed the values of (a ConstantInputError's), else ()."""
    onnx_frontend = sys.modules.get("ember.frontend.onnx")  # (loaded, if it raised the error)
    return e.inputs if onnx_frontend is not None and isinstance(e, onnx_frontend.ConstantInputError) else ()


def _structured(e: EmberError) -> bool:
    """An ONNX import needed the structure of sequence or optional inputs (StructureError)."""
    onnx_frontend = sys.modules.get("ember.frontend.onnx")
    return onnx_frontend is not None and isinstance(e, onnx_frontend.StructureError)


def _specialized(model, value_inputs: tuple[str, ...], limit: int, options: dict) -> SpecializedModel:
    """The ONNX model compiled per value of its runtime-valued inputs and per structure of its
    sequence and optional inputs (ember.runtime.specialized)."""
    from .frontend.onnx import load_model
    from .frontend.onnx.values import graph_inputs, specialize, structured_inputs

    proto = load_model(model)
    config.threads(options.get("num_threads"))  # (the keywords checked now, not at the first call)
    as_target(options.get("target", "c"), cc=options.get("cc"), cflags=options.get("cflags"))
    structured = structured_inputs(proto)

    def build(arguments: dict[str, object], names: tuple[str, ...]):
        s = specialize(proto, arguments, names)
        compiled = compile_graph(s.graph, **options) if s.graph.outputs else _no_outputs
        layout = s.outputs if structured or any(entry != "tensor" for entry in s.outputs) else None
        return compiled, s.constant, layout

    inputs = [TensorSpec(n, tuple(t.shape), t.dtype) for n, t in graph_inputs(proto)]
    return SpecializedModel(options.get("name", "model"), inputs, value_inputs, build, limit, structured)


def _no_outputs(*inputs) -> tuple:
    """A specialization whose outputs are all empty sequences or absent optionals: nothing to run."""
    return ()


def load(path: str | Path, *, num_threads: int | None = None) -> CompiledModel:
    """A model saved with `CompiledModel.save`: its library is loaded as it is, nothing is
    traced, lowered or compiled; the graph is read when first asked for. A folder whose files
    do not match its manifest, or whose manifest does not match its library, is an ArtifactError
    (ember.runtime.artifact).

    Loading runs native code: the folder's library is dlopened, which runs its constructors
    before ember can ask it anything, and the sha256 checks catch damage, not someone who
    re-records them. Load only models you trust, as with torch.load and TVM's
    load_module."""
    from .runtime.artifact import backend_of, read_artifact

    backend = backend_of(path)
    if backend is not None:  # a folder in a backend's own format (a GPU model's cubins)
        from .backends import get

        return get(backend).load_model(path)
    return from_artifact(read_artifact(path), num_threads)  # every file checked, the manifest against the library


# -- checks -----------------------------------------------------------------------------------
def _symbols(graph: Graph) -> list[str]:
    """The symbols, in order of first appearance as an input dimension of their own (each call
    binds them there); every other dimension, of inputs and values alike (in regions too), may be
    an expression of them only (ember.dims)."""
    symbols = list(dict.fromkeys(d for v in graph.inputs for d in v.shape if dims.is_symbol(d)))

    def check(g: Graph, values) -> None:
        for v in values:
            unbound = [d for d in v.shape if any(s not in symbols for s in dims.symbols_of(d))]
            if unbound:
                where = f"node {v.node.name}: {v.node.op}" if v.node is not None else "an input"
                raise ShapeError(f"graph {graph.name}: %{v.name} ({where}) has dimension(s) {unbound} that no input "
                                 "has (a symbol must be a dimension of its own of some input), so a call cannot "
                                 "bind them")
        for n in g.nodes:
            for r in n.regions:
                check(r, [v for m in r.nodes for v in m.outputs])
    check(graph, [*graph.inputs, *(v for n in graph.nodes for v in n.outputs)])
    return symbols


def _check_loops(graph: Graph) -> None:
    """A loop with scan outputs runs as many iterations as they have entries: its trip count is
    that constant, its condition True and never changed by its body (CompileError otherwise: the
    reference evaluator runs such loops, the compiled model writes its outputs in place)."""
    for n in graph.nodes:
        for r in n.regions:
            _check_loops(r)
        if n.op != "loop" or len(n.outputs) == n.attrs["carried"]:
            continue
        trips, cond = (graph.constants.get(v.name) for v in n.inputs[:2])
        body = n.regions[0]
        if (trips is None or cond is None or int(trips.reshape(())) != n.attrs["length"]
                or not bool(cond.reshape(())) or body.outputs[0] is not body.inputs[1]):
            raise CompileError(f"loop {n.name}: its scan outputs have as many entries as the iterations it runs, "
                               "known only at run time here (a trip count that is not a constant, or a condition "
                               "that may stop it early); ember compiles loops whose scan outputs have a static "
                               "length (ember.ops.evaluate runs the others)")


def _spec(v: Value) -> TensorSpec:
    return TensorSpec(v.name, tuple(d if isinstance(d, str) else int(d) for d in v.shape), v.dtype)

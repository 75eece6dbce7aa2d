"""The PyTorch frontend: an nn.Module to an ember graph, through torch.export.

    graph = import_module(model, (x,))
    graph = import_module(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))

torch.export traces the module in eval mode; `run_decompositions` lowers it to the core ATen
operator set, except for the composite operators that ember implements directly (`KEEP`:
linear, matmul, layer_norm, attention, ...), which stay whole: the graph is smaller and each
maps to one ember operator. Parameters, buffers and lifted constants become the graph's
constants (a sparse one densified): read-only views of the tensors as the importer makes them,
not copies (`node.borrowed`, `import_views`: ember.compile's graph lives only while it compiles, and
the model keeps copies of its own), copied by `import_module`, whose graph does not change when the
model does;
user inputs become its inputs, with the example's dtypes and, for dimensions made dynamic,
symbols named after the `torch.export.Dim`s, whose min and max become the graph's `ranges` (the
compiled model checks them at each call); a dimension torch derives from them ("s0 + 1") is an
expression of those symbols (ember.dims). A sparse example is an ArgumentTypeError. The FX graph
is then converted by ember.frontend.torch.importer.

`first_trace` is the module's trace: recorded by one eager run of its forward where it can be
(ember.frontend.torch.record: torch.export's first call in a process imports Dynamo), else
`trace` (torch.export, not decomposed), with the reason; it is what the model cache keys
a module by (ember.frontend.torch.digest). `import_traced` converts it, as it is where it can
(ember.frontend.torch.direct: the decomposition traces the whole program again), else decomposed. ember's own traces
record no stack traces (a fifth of the trace's time): a trace that fails to convert is traced again
with them, so that the error names the model's lines.

Threads: torch's tracing machinery (torch.export, make_fx, Dynamo) keeps its state in process
globals, so two traces at once corrupt each other ("ProxyTorchDispatchMode slot already
occupied"). Every trace ember starts, and the switch of the model to eval mode around it, holds
`trace_lock()`: ember's own lock, then Dynamo's compile lock (a process-wide RLock, taken the same
way by Inductor for work it does outside Dynamo's frame compilation), so ember's traces never
overlap each other nor Dynamo compiling a frame in another thread; a recording takes Dynamo's
lock where Dynamo is loaded (ember.frontend.torch.record.traces_lock). Converting the traced
graph runs unlocked.
"""

from __future__ import annotations

import contextlib
import inspect

import numpy as np
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils import _pytree as pytree

from ... import config
from ...errors import ArgumentTypeError, EmberError
from ...graph.core import Graph
from .direct import convertible, graph_convertible
from .importer import import_fx
from .node import Const, FrontendError
from .record import NotRecorded, Recorded, record, traces_lock

aten = torch.ops.aten

KEEP = (  # composite operators ember implements directly: not decomposed
    aten.linear.default, aten.matmul.default, aten.scaled_dot_product_attention.default,
    aten.layer_norm.default, aten.group_norm.default, aten.instance_norm.default, aten.rms_norm.default,
    aten.silu.default, aten.hardswish.default, aten.hardsigmoid.default, aten.softplus.default,
    aten.std.correction, aten.std_mean.correction,
    aten.lstm.input, aten.gru.input, aten.rnn_tanh.input, aten.rnn_relu.input,
)


def trace_lock():
    """The process-wide lock around torch's tracing machinery (see the module's docstring):
    ember's own (ember.frontend.torch.record.traces_lock), then Dynamo's, imported here as
    torch.export imports it at its first call anyway."""
    import torch._dynamo.convert_frame  # noqa: F401

    return traces_lock()


def decompositions() -> dict:
    """The decomposition table: torch.export's default (to core ATen) without KEEP."""
    table = torch.export.default_decompositions()
    for op in KEEP:
        table.pop(op, None)
    return table


def export(model: torch.nn.Module, example_inputs: tuple, dynamic_shapes=None) -> ExportedProgram:
    """torch.export of the model in eval mode (its mode is restored after), lowered to core ATen
    (KEEP excepted); under `trace_lock()`."""
    return decompose(trace(model, example_inputs, dynamic_shapes))


def trace(model: torch.nn.Module, example_inputs: tuple, dynamic_shapes=None, *,
          stack_traces: bool = True) -> ExportedProgram:
    """torch.export of the model in eval mode (its mode is restored after), not yet decomposed
    (what the model cache keys a module by: the decomposition re-traces the whole program, the
    larger half of the frontend's time); under `trace_lock()`. stack_traces=False: its nodes
    record no stack trace (torch.fx.config.do_not_emit_stack_traces, set under the lock; a
    fifth of the trace's time), so its errors cannot name the model's lines."""
    with trace_lock(), _stack_traces(stack_traces):
        training = model.training
        try:
            with torch.no_grad():
                return torch.export.export(model.eval(), _distinct(example_inputs), dynamic_shapes=dynamic_shapes)
        finally:
            model.train(training)


def _distinct(example_inputs) -> tuple:
    """The example inputs, each tensor that shares memory with an earlier one cloned: torch.export
    traces inputs that alias as one input read twice, so a model compiled from `(x, c, c)` would
    read its second argument for its third when called with two different tensors."""
    seen = set()

    def own(x):
        if isinstance(x, torch.Tensor) and x.numel():
            storage = x.untyped_storage().data_ptr()
            if storage in seen:
                return x.clone()
            seen.add(storage)
        return x

    return tuple(pytree.tree_map(own, tuple(example_inputs)))


def decompose(ep: ExportedProgram) -> ExportedProgram:
    """A traced program lowered to core ATen (KEEP excepted); under `trace_lock()`. Its nodes keep
    the stack traces of the nodes they come from, and record none of their own."""
    with trace_lock(), _stack_traces(False), torch.no_grad():
        return ep.run_decompositions(decompositions())


@contextlib.contextmanager
def _stack_traces(on: bool):
    """torch's tracers record each node's stack trace, or not (restored after; under the lock). A
    torch without the switch (before 2.12) records them always."""
    config = torch.fx.config
    if not hasattr(config, "do_not_emit_stack_traces"):
        yield
        return
    before, config.do_not_emit_stack_traces = config.do_not_emit_stack_traces, not on
    try:
        yield
    finally:
        config.do_not_emit_stack_traces = before


def import_module(model: torch.nn.Module, example_inputs: tuple, dynamic_shapes=None) -> Graph:
    """An nn.Module as an ember graph (see the module's docstring) that holds its own copies of
    the module's tensors: it does not change when the module does."""
    graph = import_views(model, example_inputs, dynamic_shapes)
    graph.share_constants({k: np.array(a, order="C") for k, a in graph.all_constants() if not a.flags.writeable})
    return graph


def import_views(model: torch.nn.Module, example_inputs: tuple, dynamic_shapes=None) -> Graph:
    """`import_module`'s graph with its constants read-only views of the module's tensors
    (`node.borrowed`), for a caller that compiles it while the module stays as it is: the
    compiled model keeps copies of its own, and the weights are not held twice meanwhile."""
    example_inputs = checked_inputs(example_inputs)
    traced, _ = first_trace(model, example_inputs, dynamic_shapes)
    return import_traced(traced, model, example_inputs, dynamic_shapes)


def first_trace(model: torch.nn.Module, example_inputs: tuple,
                dynamic_shapes=None) -> tuple[Recorded | ExportedProgram, str]:
    """The module's trace: recorded by one eager run where it can be (static shapes; a graph the
    importer takes undecomposed; the record_trace option on: ember.frontend.torch.record), else
    torch.export's (`trace`, without stack traces); and why it is torch.export's ("" where recorded)."""
    why = "dynamic shapes" if dynamic_shapes is not None else "" if config.get("record_trace") else \
        "EMBER_RECORD_TRACE is off"
    if not why:
        try:
            rec = record(model, _distinct(example_inputs))
        except NotRecorded as e:
            why = str(e)
        else:
            if graph_convertible(rec.gm.graph, set(rec.weights)):
                return rec, ""
            why = "an operator the importer takes only decomposed"
    return trace(model, example_inputs, dynamic_shapes, stack_traces=False), why


def checked_inputs(example_inputs) -> tuple:
    """The example inputs as a tuple, each tensor dense (ArgumentTypeError otherwise)."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    for k, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor) and x.layout != torch.strided:
            raise ArgumentTypeError(f"example input {k + 1} has layout {x.layout}; ember compiles dense (strided) "
                                    f"tensors, pass x.to_dense()")
    return tuple(example_inputs)


def import_traced(traced: Recorded | ExportedProgram, model: torch.nn.Module, example_inputs: tuple,
                  dynamic_shapes=None) -> Graph:
    """The graph of a module's `first_trace`: a recording converted as it is, or, where that
    fails, the module traced by torch.export and imported as below; torch.export's trace
    converted as it is where it can be, else decomposed first. Its constants are read-only views
    of the module's tensors (ember.frontend.torch.node.borrowed). A trace without stack traces
    that does not import is traced again with them, so that the error names the model's lines."""
    if isinstance(traced, Recorded):
        try:
            return import_fx(traced.gm, {p: Const(t, name) for p, (name, t) in traced.weights.items()},
                             name=type(model).__name__)
        except EmberError:
            traced = trace(model, example_inputs, dynamic_shapes, stack_traces=False)
    try:
        return _imported(traced, model, example_inputs, dynamic_shapes)
    except EmberError as e:
        error = e
    if any("stack_trace" in n.meta for n in traced.graph.nodes if n.op == "call_function"):
        raise error
    try:
        _imported(trace(model, example_inputs, dynamic_shapes), model, example_inputs, dynamic_shapes)
    except EmberError as located:
        raise located from None
    raise error


def _imported(traced: ExportedProgram, model: torch.nn.Module, example_inputs: tuple, dynamic_shapes) -> Graph:
    """The trace converted as it is where it can be (ember.frontend.torch.direct: no second trace),
    else, or where that conversion fails, decomposed first (so an error is the decomposed one's)."""
    if convertible(traced):
        try:
            return _converted(traced, model, example_inputs, dynamic_shapes)
        except EmberError:
            pass
    return _converted(decompose(traced), model, example_inputs, dynamic_shapes)


def _converted(ep: ExportedProgram, model: torch.nn.Module, example_inputs: tuple, dynamic_shapes) -> Graph:
    names = symbol_names(ep, model, example_inputs, dynamic_shapes)
    graph = import_program(ep, symbols=names, name=type(model).__name__)
    graph.ranges.update(_ranges(ep, names))
    return graph


def import_program(ep: ExportedProgram, *, symbols=None, name: str = "main", state_dict=None) -> Graph:
    """An ExportedProgram (of core ATen operators) as an ember graph; `state_dict` gives other
    values of some of its parameters and buffers (by name: one program over other weights)."""
    sig = ep.graph_signature
    unknown = sorted(set(state_dict or {}) - set(ep.state_dict))
    if unknown:
        raise ArgumentTypeError(f"import_program: the program has no parameters or buffers {unknown}; it has "
                                f"{sorted(ep.state_dict)}")
    state = {**ep.state_dict, **(state_dict or {})}
    constants: dict[str, Const] = {}
    for spec in sig.input_specs:
        match spec.kind:
            case InputKind.PARAMETER | InputKind.BUFFER | InputKind.CONSTANT_TENSOR:
                data = state[spec.target] if spec.target in state else ep.constants[spec.target]
                constants[spec.arg.name] = Const(data, spec.target)
            case InputKind.USER_INPUT:
                pass
            case _:
                raise FrontendError(f"input {spec.arg.name} of kind {spec.kind.name} is not supported")
    mutated = [s.target for s in sig.output_specs if s.kind != OutputKind.USER_OUTPUT]
    if mutated:
        raise FrontendError(f"the model writes to {', '.join(map(str, mutated))} while it runs; ember compiles "
                            "inference graphs without side effects (call model.eval(), avoid in-place state)")
    return import_fx(ep.graph_module, constants, name=name, symbols=symbols)


def symbol_names(ep: ExportedProgram, model: torch.nn.Module, example_inputs: tuple,
                  dynamic_shapes) -> dict[str, str]:
    """torch's symbol of each dynamic dimension (s0) -> the name of its torch.export.Dim.
    dynamic_shapes is a tuple (one spec per positional input) or a dict by argument name, nested
    as the inputs are (a list of tensors takes a list of specs); a tensor's spec is a dict
    {axis: Dim} or a sequence of Dim | None."""
    if dynamic_shapes is None:
        return {}
    arguments, grouped, k = [], [], 0  # forward's arguments, the example inputs as they bind them
    for p in inspect.signature(model.forward).parameters.values():
        if k >= len(example_inputs):
            break
        arguments.append(p.name)
        if p.kind == p.VAR_POSITIONAL:  # *args: one tuple, as torch.export's specification has it
            grouped.append(tuple(example_inputs[k:]))
            k = len(example_inputs)
        else:
            grouped.append(example_inputs[k])
            k += 1
    if isinstance(dynamic_shapes, dict):  # by argument name
        dynamic_shapes = [dynamic_shapes.get(n) for n in arguments]
    users = [s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    specs: list = []
    _align(tuple(grouped), tuple(dynamic_shapes), specs)
    names: dict[str, str] = {}
    for name, spec in zip(users, specs):
        val = nodes[name].meta.get("val")
        if spec is None or not isinstance(val, torch.Tensor):
            continue
        for axis, dim in (spec.items() if isinstance(spec, dict) else enumerate(spec)):
            size = val.shape[axis]
            if dim is not None and isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                names[str(size.node.expr)] = getattr(dim, "__name__", str(size.node.expr))
    return names


def _align(example, spec, out: list) -> None:
    """One spec per tensor of `example`, in torch's flattening order, appended to `out`."""
    if isinstance(example, torch.Tensor):
        out.append(spec)
    elif isinstance(example, list | tuple):
        for k, x in enumerate(example):
            _align(x, None if spec is None else spec[k], out)
    elif isinstance(example, dict):
        for key, x in example.items():
            _align(x, None if spec is None else spec.get(key), out)


def _ranges(ep: ExportedProgram, names: dict[str, str]) -> dict[str, tuple[int, int | None]]:
    """The range of each named symbol (its Dim's min and max; None: no upper bound, which torch
    writes as its integer infinity int_oo, whose sympy `is_finite` is true)."""
    from torch.utils._sympy.numbers import int_oo  # (sympy: imported where a shape is dynamic)

    out = {}
    for sym, vr in ep.range_constraints.items():
        if str(sym) in names:
            upper = vr.upper
            out[names[str(sym)]] = (int(vr.lower), None if upper == int_oo or not upper.is_finite else int(upper))
    return out

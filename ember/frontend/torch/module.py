"""The PyTorch frontend: an nn.Module to an ember graph, through torch.export.

    graph = import_module(model, (x,))
    graph = import_module(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))

torch.export traces the module in eval mode; `run_decompositions` lowers it to the core ATen
operator set, except for the composite operators that ember implements directly (`KEEP`:
linear, matmul, layer_norm, attention, ...), which stay whole: the graph is smaller and each
maps to one ember operator. Parameters, buffers and lifted constants become the graph's
constants (copied, so the graph does not change when the model does; a sparse one densified);
user inputs become its inputs, with the example's dtypes and, for dimensions made dynamic,
symbols named after the `torch.export.Dim`s (a sparse example is an ArgumentTypeError). The FX
graph is then converted by ember.frontend.torch.importer.

Threads: torch's tracing machinery (torch.export, make_fx, Dynamo) keeps its state in process
globals, so two traces at once corrupt each other ("ProxyTorchDispatchMode slot already
occupied"). Every trace ember starts, and the switch of the model to eval mode around it, holds
`trace_lock()`: Dynamo's own compile lock (a process-wide RLock, taken the same way by Inductor
for work it does outside Dynamo's frame compilation), so ember's traces never overlap each other
nor Dynamo compiling a frame in another thread. Converting the traced graph runs unlocked.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from ...errors import ArgumentTypeError
from ...graph.core import Graph
from .importer import import_fx
from .node import Const, FrontendError

aten = torch.ops.aten

KEEP = (  # composite operators ember implements directly: not decomposed
    aten.linear.default, aten.matmul.default, aten.scaled_dot_product_attention.default,
    aten.layer_norm.default, aten.group_norm.default, aten.instance_norm.default, aten.rms_norm.default,
    aten.silu.default, aten.hardswish.default, aten.hardsigmoid.default, aten.softplus.default,
    aten.std.correction, aten.std_mean.correction,
    aten.lstm.input, aten.gru.input, aten.rnn_tanh.input, aten.rnn_relu.input,
)


def trace_lock():
    """The process-wide lock around torch's tracing machinery (see the module's docstring);
    imported when first needed, as torch.export imports Dynamo only when it first runs."""
    from torch._dynamo.convert_frame import compile_lock

    return compile_lock


def decompositions() -> dict:
    """The decomposition table: torch.export's default (to core ATen) without KEEP."""
    table = torch.export.default_decompositions()
    for op in KEEP:
        table.pop(op, None)
    return table


def export(model: torch.nn.Module, example_inputs: tuple, dynamic_shapes=None) -> ExportedProgram:
    """torch.export of the model in eval mode (its mode is restored after), lowered to core ATen
    (KEEP excepted); under `trace_lock()`."""
    with trace_lock():
        training = model.training
        try:
            with torch.no_grad():
                ep = torch.export.export(model.eval(), tuple(example_inputs), dynamic_shapes=dynamic_shapes)
                return ep.run_decompositions(decompositions())
        finally:
            model.train(training)


def import_module(model: torch.nn.Module, example_inputs: tuple, dynamic_shapes=None) -> Graph:
    """An nn.Module as an ember graph (see the module's docstring)."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    for k, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor) and x.layout != torch.strided:
            raise ArgumentTypeError(f"example input {k + 1} has layout {x.layout}; ember compiles dense (strided) "
                                    f"tensors, pass x.to_dense()")
    ep = export(model, example_inputs, dynamic_shapes)
    return import_program(ep, symbols=_symbol_names(ep, dynamic_shapes), name=type(model).__name__)


def import_program(ep: ExportedProgram, *, symbols=None, name: str = "main") -> Graph:
    """An ExportedProgram (of core ATen operators) as an ember graph."""
    sig = ep.graph_signature
    constants: dict[str, Const] = {}
    for spec in sig.input_specs:
        match spec.kind:
            case InputKind.PARAMETER | InputKind.BUFFER | InputKind.CONSTANT_TENSOR:
                data = ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target]
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


def _symbol_names(ep: ExportedProgram, dynamic_shapes) -> dict[str, str]:
    """torch's symbol of each dynamic dimension (s0) -> the name of its torch.export.Dim.
    dynamic_shapes is a tuple (one spec per positional input) or a dict by argument name; a
    spec is a dict {axis: Dim} or a sequence of Dim | None."""
    if dynamic_shapes is None:
        return {}
    users = [s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    if isinstance(dynamic_shapes, dict):
        pairs = [(nodes[name], dynamic_shapes.get(name)) for name in users]
    else:
        pairs = list(zip((nodes[name] for name in users), dynamic_shapes))
    names: dict[str, str] = {}
    for node, spec in pairs:
        if spec is None or not isinstance(node.meta.get("val"), torch.Tensor):
            continue
        for axis, dim in (spec.items() if isinstance(spec, dict) else enumerate(spec)):
            size = node.meta["val"].shape[axis]
            if dim is not None and isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                names[str(size.node.expr)] = getattr(dim, "__name__", str(size.node.expr))
    return names

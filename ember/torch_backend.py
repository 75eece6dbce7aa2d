"""The torch.compile backend "ember": `torch.compile(model, backend="ember")`, for inference.

Registered by name through the `torch_dynamo_backends` entry point (pyproject.toml). Dynamo
hands over each graph it captures (an FX GraphModule of torch calls) with example inputs; the
backend returns a function that Dynamo calls with the graph's arguments:

1. the arguments are sorted into user inputs and frozen tensors: the module's parameters and
   buffers, which Dynamo passes as arguments too. Frozen tensors become constants of the ember
   graph (as Inductor's freezing does), so passes can fold and repack weights. A frozen tensor
   is checked on every call, by identity, version counter and data pointer: another module's
   weights, weights changed in place (`p.copy_` under no_grad, an optimizer's step,
   `load_state_dict`) or given new data (`p.data = t`) compile again rather than run with stale
   values. Writes that PyTorch does not count in the version counter (through `p.data`, or
   through NumPy) leave no trace a check could read without comparing every value on every call:
   `options={"freeze": False}` keeps every tensor a run-time input, read on each call.
2. the graph is lowered as torch.export lowers a module (ember.frontend.torch.export: core ATen,
   ember's composite operators kept), with the frozen tensors as the module's buffers, and
   converted by the shared importer (ember.frontend.torch.importer); ember.compiler.compile_graph
   compiles it, for the GPU (target "cuda": its inputs and outputs CUDA tensors used in place) when
   the graph's tensors are on one, else for the CPU.
3. each compiled model is cached by the arguments' shapes and dtypes, then by the frozen
   tensors' identities and versions: when Dynamo recompiles for new shapes, or hands over a
   graph with symbolic sizes, each concrete shape is compiled once, on its first call (a static
   example is compiled at once, so that errors show at compile time). One graph may serve many
   weight sets: Dynamo traces a transformer's block once and calls it with each layer's
   parameters. Each set gets its own model, up to WEIGHT_SETS of them per shape; past that the
   shape gets one more model that takes the weights as run-time inputs and serves every set not
   cached (a cache that let sets go would compile again on every call, a layer evicting the next).
   What does not depend on the weights' values is done once: the graph is exported once per
   argument shapes (the frozen tensors' included), each further set imported from that program
   with its own values, and the compiler lowers each kernel once per process
   (ember.lowering.LOWERED); what reads the values (the importer's and the passes' folding, the
   packing of weights) runs per set.
If ember cannot compile a graph (an unsupported operator, or any other error), the backend
warns (EmberFallbackWarning, naming the reason) and that graph runs in PyTorch. So does a graph
that returns a view of one of its arguments (`x.t()`, a reshape): eager's result shares the
argument's memory, and writing into it writes into the argument; ember's outputs are new tensors.

Threads: a compiled module may be first called from several threads at once; each shape is
compiled once (a lock per Dynamo graph), and the tracing itself holds the frontend's process-wide
`trace_lock()`. The name "ember" is looked up by torch's backend registry, which checks, loads
the entry point and registers without a lock: threads looking the name up for the first time at
once each load the entry point and register it, and all but the first fail ("duplicate name:
ember"), whether or not `import ember` ran, as each has checked the name before loading. Loading
the entry point is the only ember code those threads run, so importing this module (as loading
it does) registers the backend in a table of torch's registry where ember's entry reads as not
registered yet (_Registry): each thread's registration after the first writes the same function
again instead of failing.

Inference only: the results carry no autograd history. A call in grad mode with an argument that
requires grad (an input, or the module's parameters outside `torch.no_grad()`) runs the graph in
PyTorch instead, with an EmberFallbackWarning, so that `backward()` gets eager's gradients rather
than none through ember's outputs. The lowering goes through torch.export rather than AOT
autograd directly (torch.export runs AOT autograd's functionalization and decompositions
underneath), so that both PyTorch paths share one lowering and one importer.
"""

from __future__ import annotations

import threading
import warnings

import torch
from torch._dynamo.source import is_from_unspecialized_param_buffer_source
from torch.export import ExportedProgram

from .compiler import compile_graph
from .errors import ArgumentTypeError, ConfigError
from .frontend.torch import export, import_program, trace_lock

NAME = "ember"


class EmberFallbackWarning(UserWarning):
    """ember could not compile a graph torch.compile gave it; PyTorch runs that graph."""


def ember_backend(gm: torch.fx.GraphModule, example_inputs, *, options: dict | None = None, **_):
    """The torch.compile backend (see the module's docstring). options: {"freeze": bool}."""
    unknown = sorted(set(options or {}) - {"freeze"})
    if unknown:  # (they were ignored: options={"precision": "bf16"} compiled in float32)
        raise ConfigError(f"torch.compile(backend='ember'): unknown option(s) {', '.join(map(repr, unknown))}; "
                          "the backend takes 'freeze'")
    fn = EmberFunction(gm, freeze=bool((options or {}).get("freeze", True)))
    if all(isinstance(x, int | float | bool) or (isinstance(x, torch.Tensor) and not _is_fake(x))
           for x in example_inputs):  # a static example (no SymInt): compile now
        fn.entry(list(example_inputs))
    return fn


class EmberFunction:
    """What the backend returns for one Dynamo graph: ember models by argument shapes, and for
    each shape by the identity and version of the frozen tensors (WEIGHT_SETS of them; then one
    model with the weights as inputs serves the others)."""

    WEIGHT_SETS = 64

    def __init__(self, gm: torch.fx.GraphModule, *, freeze: bool):
        self.gm = gm
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.names = [n.name for n in placeholders]
        self.frozen = [freeze and _is_weight(n) for n in placeholders]
        self.cache: dict[tuple, dict[tuple, _Entry]] = {}  # shapes -> frozen tensors -> entry
        self.shared: dict[tuple, _Entry] = {}  # shapes -> the entry taking weights as inputs
        self.programs: dict[tuple, ExportedProgram] = {}  # every argument's shape, what is frozen -> its export
        self._compiling = threading.Lock()  # one compile at a time, so each key is compiled once

    def __call__(self, *args):
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            warnings.warn("ember computes without autograd: a graph of torch.compile called in grad mode with "
                          "tensors that require grad runs in PyTorch (call it under torch.no_grad() or "
                          "torch.inference_mode() for ember to run it)", EmberFallbackWarning, stacklevel=2)
            return self.gm(*args)
        return self.entry(list(args)).run(args)

    def entry(self, args: list) -> _Entry:
        shapes = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else (type(a), a)
                       for a, f in zip(args, self.frozen) if not f)
        weights = tuple((id(a), a._version, a.data_ptr()) for a, f in zip(args, self.frozen) if f)
        found = self.cache.get(shapes, {}).get(weights) or self.shared.get(shapes)
        if found is not None:
            return found
        with self._compiling:
            entries = self.cache.setdefault(shapes, {})
            if weights in entries:  # compiled by another thread while this one waited
                return entries[weights]
            ids = tuple(i for i, *_ in weights)
            for stale in [w for w in entries if tuple(i for i, *_ in w) == ids]:  # these weights, since changed
                del entries[stale]
            if len(entries) < self.WEIGHT_SETS:
                entries[weights] = self._compile(args, self.frozen)
                return entries[weights]
            if shapes not in self.shared:
                self.shared[shapes] = self._compile(args, [False] * len(args))
            return self.shared[shapes]

    def entries(self) -> list[_Entry]:
        return [e for by_weights in self.cache.values() for e in by_weights.values()] + list(self.shared.values())

    def _compile(self, args: list, frozen: list[bool]) -> _Entry:
        tensors = [k for k, a in enumerate(args) if isinstance(a, torch.Tensor) and not frozen[k]]
        if _returns_view(self.gm):
            why = "the graph returns a view of its argument (eager's result shares its memory)"
        else:
            try:
                module = _Bound(self.gm, args, self.names, frozen, tensors)
                graph = import_program(self._program(module, args, frozen), state_dict=module.frozen_buffers(),
                                       name="dynamo_graph")
                return _Entry(compile_graph(graph, name="dynamo_graph", target=_target_of(args)), tensors, args,
                              frozen)
            except Exception as e:  # noqa: BLE001 (any failure: PyTorch runs the graph)
                why = f"{type(e).__name__}: {e}"
        warnings.warn(f"ember cannot compile a graph of torch.compile, PyTorch runs it instead: {why}",
                      EmberFallbackWarning, stacklevel=2)
        return _Entry(None, tensors, args, frozen, fallback=self.gm)

    def _program(self, module: _Bound, args: list, frozen: list[bool]) -> ExportedProgram:
        """The graph exported for these arguments' shapes, dtypes and strides (frozen tensors'
        too, their values aside: export traces them as fake tensors), exported on first sight."""
        key = tuple(_layout(a) for a in args), tuple(frozen)
        if key not in self.programs:
            self.programs[key] = export(module, tuple(args[k] for k in module.tensors))
        return self.programs[key]


class _Entry:
    """One compiled model and the argument positions it takes (or the PyTorch fallback)."""

    def __init__(self, model, tensors: list[int], args: list, frozen: list[bool], fallback=None):
        self.model, self.tensors, self.fallback = model, tensors, fallback
        # strong references: while this entry lives, the ids in its cache key stay unique
        self.frozen_refs = [a for a, f in zip(args, frozen) if f]

    def run(self, args):
        if self.fallback is not None:
            return self.fallback(*args)
        out = self.model(*(args[k] for k in self.tensors))  # the model reads tensors that need grad as they are
        return tuple(torch.as_tensor(o) for o in (out if isinstance(out, tuple) else (out,)))


class _Bound(torch.nn.Module):
    """The Dynamo graph as a module of its run-time tensors: frozen tensors are its buffers,
    Python numbers are bound to their values."""

    def __init__(self, gm, args, names, frozen, tensors):
        super().__init__()
        self.gm, self.args, self.tensors = gm, list(args), tensors
        self.frozen_names = {}
        for k, (a, name, f) in enumerate(zip(args, names, frozen)):
            if f:
                self.register_buffer(name, a.detach(), persistent=True)
                self.frozen_names[k] = name

    def frozen_buffers(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in self.frozen_names.values()}

    def forward(self, *tensors):
        args = list(self.args)
        for k, t in zip(self.tensors, tensors):
            args[k] = t
        for k, name in self.frozen_names.items():
            args[k] = getattr(self, name)
        return self.gm(*args)


def _target_of(args) -> str:
    """Where the graph runs: on the GPU ("cuda") when its tensors are CUDA tensors (the module's
    weights too), else on the CPU ("c"); tensors on both, or on two GPUs, are refused (PyTorch then
    runs the graph, as it does any graph ember cannot compile)."""
    devices = {a.device for a in args if isinstance(a, torch.Tensor)}
    if len(devices) > 1:
        raise ArgumentTypeError(f"the graph's tensors are on {len(devices)} devices "
                         f"({', '.join(sorted(map(str, devices)))}); ember runs a graph on one")
    return "cuda" if devices and next(iter(devices)).type == "cuda" else "c"


def _layout(a) -> tuple:
    """What an export of the graph may depend on in an argument: a tensor's shape, strides, dtype
    and device, a number's type and value."""
    if isinstance(a, torch.Tensor):
        return tuple(a.shape), a.stride(), a.dtype, a.device, a.layout
    return type(a), a


def _is_weight(node: torch.fx.Node) -> bool:
    """A parameter or buffer of a module, which Dynamo passes to its graph as an argument."""
    grapharg = node.meta.get("grapharg")
    if grapharg is not None and is_from_unspecialized_param_buffer_source(grapharg.source):
        return True
    return isinstance(node.meta.get("example_value"), torch.nn.Parameter)


def _returns_view(gm: torch.fx.GraphModule) -> bool:
    """Whether an output of the graph shares memory with one of its arguments, by the storages of
    the fake tensors Dynamo traced it with."""
    from torch.multiprocessing.reductions import StorageWeakRef

    def storage(node):
        value = node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None
        return StorageWeakRef(value.untyped_storage()) if isinstance(value, torch.Tensor) else None

    arguments = {storage(n) for n in gm.graph.nodes if n.op == "placeholder"} - {None}
    outputs: list[torch.fx.Node] = []
    torch.fx.node.map_arg(gm.graph.output_node().args, outputs.append)
    return any(storage(n) in arguments for n in outputs)


def _is_fake(x) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(x, FakeTensor)


def register() -> None:
    """Register ember_backend under NAME in torch's backend registry, so that registering it
    again succeeds (see the module's docstring); under trace_lock(), so that concurrent calls
    install the registry once."""
    from torch._dynamo.backends import registry

    with trace_lock():
        if not isinstance(registry._COMPILER_FNS, _Registry):
            registry._COMPILER_FNS = _Registry(registry._COMPILER_FNS)
        registry._COMPILER_FNS[NAME] = ember_backend
        ember_backend._tags = ()
        registry._BACKENDS.setdefault(NAME, None)


class _Registry(dict):
    """torch's table of registered backends (registry._COMPILER_FNS, which only that module
    reads), in which ember_backend under NAME reads as not registered yet: a thread of torch's
    lookup that loaded the entry point after another registered it registers it again (the same
    function) instead of failing, and lookups that find it so load the (imported) entry point
    again, which costs microseconds. Reading the entry itself is unchanged."""

    def __contains__(self, name) -> bool:
        return super().__contains__(name) and not (name == NAME and self[name] is ember_backend)


register()

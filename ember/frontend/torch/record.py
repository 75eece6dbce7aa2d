"""A module's trace by one eager run of its forward, without torch.export: the cheaper first trace.

    rec = record(model, example_inputs)    # a Recorded, or NotRecorded(reason)

torch.export's first call in a process imports Dynamo, sympy and FakeTensor's machinery (about
1,200 modules: 1.1 s of CPU on this project's 2-core AMD EPYC, more than ResNet-18's whole trace
and conversion); make_fx imports the same (its tracer reads Inductor's config). This module
records the ATen calls of one run of the forward on the example inputs (in eval mode, without
grad) where torch.export's trace records them: at torch's PreDispatch key, above autograd, so a
composite (conv2d, batch_norm, linear, layer_norm) is one call, as in the undecomposed trace, and
the importer and its converters take the graph as they take that trace (ember.frontend.torch.direct).

The run is torch's own kernels on the real tensors, on torch's threads (ResNet-18 at batch 1:
0.03 s of CPU on one thread; on two threads of the 2-core machine shared with other work, 0.2 to
0.9 s of CPU, the team's spin-waits). torch's thread count is left alone: once a process has set
it, torch's forward in a child forked after a parallel run hangs (libgomp's team is not reset).
What it records is what the forward computes for these inputs, which holds for every input of
these shapes where the forward's Python does not read a tensor's values. The recording refuses
(NotRecorded, with the reason; the caller traces with torch.export instead, as before):
- a call that reads values (item, bool(t), `t.tolist()`, `t.numpy()`: what a fake tensor cannot
  answer, where torch.export fails too) or whose result's shape depends on them (nonzero);
- a call that writes a parameter, buffer, input or constant in place (before it runs: the
  module is left as it was), or a higher-order operator (torch.cond), or any error of the run;
- an input that is not a tensor (torch.export specializes it; ember's inputs are tensors).
Dynamic shapes are torch.export's (the caller never records them).

A tensor the calls read that no recorded call made and that is no input, parameter or buffer (a
module's plain tensor attribute, `torch.tensor([..])` in the forward) is a constant of the graph,
as torch.export lifts it. Each node's meta["val"] is a meta tensor of its result's shape, dtype
and strides; nodes record no stack traces (an import that fails is traced again by torch.export,
whose error names the model's lines).

Private torch machinery, checked on torch 2.13: the pre-dispatch mode slot takes only torch's own
modes, so the recorder is a SchemaCheckMode (whose behaviour it replaces entirely) with the
PreDispatch key, under the Python dispatcher; its __torch_dispatch__ is not wrapped in Dynamo's
`disable` (`_should_skip_dynamo`), which would import Dynamo at the first call. A torch where any
of it fails refuses every recording (the reason names the error), and torch.export traces.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import operator
import sys
import threading

import torch
from torch._subclasses.schema_check_mode import SchemaCheckMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakTensorKeyDictionary

aten = torch.ops.aten
_READS = (aten.resolve_conj.default, aten.resolve_neg.default)  # what tolist() and numpy() call before reading
_TENSORS = {"Tensor", "Optional[Tensor]", "List[Tensor]", "List[Optional[Tensor]]"}  # results that are no values
_AS_TRACED = {aten.lift_fresh.default: aten.lift_fresh_copy.default}  # (`torch.tensor(..)`: as torch.export has it)
_LOCK = threading.RLock()  # ember's traces of either kind, one at a time (see ember.frontend.torch.module)


class NotRecorded(Exception):
    """The module's forward cannot be recorded (the message says why); torch.export traces it."""


@dataclasses.dataclass
class Recorded:
    """A recorded trace: its FX graph (parameters and buffers are placeholders, other constants
    attributes of `gm`), each parameter's and buffer's placeholder name -> (its name in the module,
    the tensor)."""

    gm: torch.fx.GraphModule
    weights: dict[str, tuple[str, torch.Tensor]]


@contextlib.contextmanager
def traces_lock():
    """The lock ember's traces hold: ember's own, then Dynamo's compile lock where Dynamo is loaded
    (torch.export and a Dynamo compile in another thread use the pre-dispatch mode slot too; where
    Dynamo is not loaded, no compile runs: loading it to take its lock is what the recording saves)."""
    dynamo = sys.modules.get("torch._dynamo.convert_frame")
    with _LOCK, dynamo.compile_lock if dynamo is not None else contextlib.nullcontext():
        yield


def record(model: torch.nn.Module, example_inputs: tuple) -> Recorded:
    """The ATen calls of one run of `model` on `example_inputs` (see the module's docstring)."""
    names = _input_names(model, example_inputs)
    with traces_lock():
        training = model.training
        try:
            return _record(model.eval(), example_inputs, names)
        except NotRecorded:
            raise
        except Exception as e:  # (the run's own error, a higher-order operator, torch's machinery)
            first = str(e).splitlines()[0] if str(e) else ""
            raise NotRecorded(f"the eager run failed: {type(e).__name__}: {first}") from e
        finally:
            model.train(training)


def _record(model: torch.nn.Module, example_inputs: tuple, names: list[str]) -> Recorded:
    from torch._dispatch.python import enable_python_dispatcher

    graph, root = torch.fx.Graph(), torch.nn.Module()
    recorder = _Recorder(graph, root)
    weights = {}
    for prefix, named in (("p_", model.named_parameters()), ("b_", model.named_buffers())):
        for name, t in named:
            node = graph.placeholder(prefix + name.replace(".", "_"))
            weights[node.name] = (name, t)
            recorder.add(t, node, protected=True)
    for name, x in zip(names, example_inputs):
        node = graph.placeholder(name)
        if node.name != name and all(n.name != name for n in graph.nodes):
            node.name = name  # (FX's names avoid Python's builtins, `input`; torch.export's keep the argument's)
        recorder.add(x, node, protected=True)
    with torch.no_grad(), enable_python_dispatcher(), recorder:
        out = model(*example_inputs)
    graph.output(tuple(recorder.arg(x) if isinstance(x, torch.Tensor) else x for x in pytree.tree_leaves(out)))
    return Recorded(torch.fx.GraphModule(root, graph), weights)


def _input_names(model: torch.nn.Module, example_inputs: tuple) -> list[str]:
    """The placeholders' names torch.export gives the inputs: the forward's arguments (`args_0`
    for the k-th of *args)."""
    if not all(isinstance(x, torch.Tensor) for x in example_inputs):
        raise NotRecorded("an example input is not a tensor")
    names = []
    for p in inspect.signature(model.forward).parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            names += [f"{p.name}_{k}" for k in range(len(example_inputs) - len(names))]
        elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        if len(names) >= len(example_inputs):
            return names[:len(example_inputs)]
    raise NotRecorded("more example inputs than the forward's positional arguments")


def _shape_read(func, args) -> bool:
    """Whether the call's result has a shape its inputs' values decide (nonzero; indexing by a
    mask, where indexing by integers has its index's shape)."""
    if func is aten.index.Tensor:
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1])
    return torch.Tag.dynamic_output_shape in func.tags


def _meta(x):
    """A result as meta tensors (its shape, dtype and strides: what the importer reads)."""
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, list | tuple):
        return type(x)(map(_meta, x))
    return x


class _Recorder(SchemaCheckMode):
    """The mode that records each call at the PreDispatch key into `graph` (see the module's doc)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # (else torch wraps __torch_dispatch__ in torch._dynamo.disable, importing Dynamo)

    def __init__(self, graph: torch.fx.Graph, root: torch.nn.Module):
        TorchDispatchMode.__init__(self, _dispatch_key=torch._C.DispatchKey.PreDispatch)
        self.graph, self.root = graph, root
        self.nodes = WeakTensorKeyDictionary()  # a tensor -> the node that holds its value now
        self.protected: set[int] = set()  # the storages of parameters, buffers, inputs and constants

    def add(self, t: torch.Tensor, node: torch.fx.Node, protected: bool = False) -> None:
        self.nodes[t] = node
        node.meta["val"] = _meta(t)
        if protected and t.untyped_storage().data_ptr():
            self.protected.add(t.untyped_storage().data_ptr())

    def arg(self, x):
        """An argument of a call as the graph has it: a tensor as its node (a constant's made on
        first sight), a list or tuple as one of those."""
        if isinstance(x, torch.Tensor):
            if x not in self.nodes:
                name = f"_tensor_constant{len(self.root._buffers)}"
                self.root.register_buffer(name, x)
                self.add(x, self.graph.get_attr(name), protected=True)
            return self.nodes[x]
        if isinstance(x, list | tuple):
            return type(x)(map(self.arg, x))
        return x

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self._check(func, args, kwargs)
        out = func(*args, **kwargs)
        node = self.graph.call_function(_AS_TRACED.get(func, func), self.arg(args),
                                        {k: self.arg(v) for k, v in kwargs.items()})
        node.meta["val"] = _meta(out)
        if isinstance(out, torch.Tensor):
            self.nodes[out] = node
        elif isinstance(out, list | tuple):
            for k, t in enumerate(out):
                if isinstance(t, torch.Tensor):
                    self.add(t, self.graph.call_function(operator.getitem, (node, k)))
        return out

    def _check(self, func, args, kwargs) -> None:
        """Refuse a call the recording cannot stand for (see the module's doc), before it runs."""
        schema = func._schema
        if func in _READS or any(str(r.type) not in _TENSORS for r in schema.returns) or \
                torch.Tag.data_dependent_output in func.tags or _shape_read(func, args):
            raise NotRecorded(f"the forward reads a tensor's values ({func})")
        for k, a in enumerate(schema.arguments):
            if a.alias_info is not None and a.alias_info.is_write and func is not aten.detach_.default:  # (no values)
                x = args[k] if k < len(args) and not a.kwarg_only else kwargs.get(a.name)
                for t in x if isinstance(x, list | tuple) else (x,):
                    if isinstance(t, torch.Tensor) and (t not in self.nodes or
                                                        t.untyped_storage().data_ptr() in self.protected):
                        raise NotRecorded(f"{func} writes a parameter, buffer, input or constant in place")

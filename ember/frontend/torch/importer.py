"""FX graphs of core ATen operators to ember graphs: the part of the PyTorch frontend that
torch.export (ember.frontend.torch.module) and the torch.compile backend share.

`import_fx(gm, constants)` walks the FX graph once, in order:
- a placeholder named in `constants` (weights, buffers, frozen tensors) is a `Const`; any other
  is a graph input whose type comes from torch's metadata (node.meta["val"]);
- a call whose static result is larger than the machine's memory is refused (CompileError);
- a call whose tensor arguments are all `Const` is folded and its result is a `Const` (so masks,
  position ids and arange/full arithmetic never reach ember's graph), unless it is random or its
  result is much larger than its inputs (an expand: ember expands at run time): its handler
  converts it into a scratch graph whose ember operators fold (ember.frontend.fold, their NumPy
  references), and torch runs it only where ember cannot (no handler, as for arange or zeros;
  a handler that refuses the call; an output ember does not compute);
- any other call goes to its handler (converters/), which appends ember nodes; the
  result's types are checked against torch's metadata, so a mapping mistake is caught at its node;
- the output node gives the graph's outputs (none when the model returns None, which the
  compiler refuses); a call no output depends on is not converted.
Every operator without a handler, and every use a handler refuses, is collected with the node's
name and source location; they are raised together as one UnsupportedOpError at the end. A node
that depends on a failed one is not converted, but listed too if it has no handler either.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Mapping

import numpy as np
import torch
from torch.fx.node import map_aggregate

from ...checks import check_fits
from ...graph.core import Graph, TensorType, Value
from ...ops.registry import UnsupportedOpError
from ..fold import GROWTH_LIMIT
from .node import TORCH_TO_EMBER, Builder, Const, FrontendError, Unsupported, value_name
from .registry import Unavailable, lookup

_TORCH_DIR = os.path.dirname(torch.__file__)

IGNORED = {  # calls that compute nothing at run time: assertions about shapes and metadata
    "aten._assert_tensor_metadata.default", "aten._assert_scalar.default", "aten.sym_constrain_range_for_size.default",
    "aten.sym_constrain_range.default", "aten._assert_async.msg", "aten._assert_async.default",
}


class _Failed:
    """The result of a node that could not be converted (already reported)."""


FAILED = _Failed()


def import_fx(gm: torch.fx.GraphModule, constants: Mapping[str, Const], *, name: str = "main",
              symbols: Mapping[str, str] | None = None) -> Graph:
    """Convert an FX graph of core ATen operators. `constants` maps placeholder names to the
    tensors they stand for (named as the graph's constants will be); `symbols` renames torch's
    size symbols (s0 -> "batch")."""
    graph = Graph(name=value_name(name))
    b = Builder(graph, dict(symbols or {}))
    env: dict[torch.fx.Node, object] = {}
    problems: list[tuple[str, str]] = []
    outputs: list = []
    live = _live(gm.graph)

    for node in gm.graph.nodes:
        b.node = node
        match node.op:
            case "placeholder":
                env[node] = _placeholder(b, node, constants)
            case "get_attr":  # a tensor, or the graph of a branch or loop body (converters/control.py)
                obj = _attr(gm, node.target)
                env[node] = obj if isinstance(obj, torch.fx.GraphModule) else Const(obj, node.target)
            case "call_function":
                env[node] = _call(b, node, env, problems) if node in live else None
            case "output":
                outputs = _flatten(map_aggregate(node.args[0], lambda n: env[n] if isinstance(n, torch.fx.Node) else n))
                if all(x is None for x in outputs):  # `return None`, exported as (None,)
                    outputs = []
            case _:
                problems.append((f"{node.op} {node.target}", origin(node)))
                env[node] = FAILED

    if not problems:
        values = []
        for x in outputs:
            if isinstance(x, Unavailable):
                problems.append((x.reason, "a graph output"))
            elif x is not FAILED:
                values.append(_output_value(b, x, values))
        graph.set_outputs(values)
    if problems:
        raise UnsupportedOpError(problems)
    return graph


def _live(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """The nodes the outputs depend on (a trace not yet decomposed still computes what the model
    discards: BERT's pooler)."""
    live: set[torch.fx.Node] = set()
    todo = [n for n in graph.nodes if n.op == "output"]
    while todo:
        node = todo.pop()
        if node not in live:
            live.add(node)
            todo += node.all_input_nodes
    return live


def _placeholder(b: Builder, node: torch.fx.Node, constants: Mapping[str, Const]):
    if node.name in constants:
        return constants[node.name]
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise FrontendError(f"input {node.name} is {type(val).__name__}, not a tensor; ember's graph inputs are "
                            "tensors (pass Python numbers as constants of the model)")
    return b.graph.add_input(value_name(node.name), b.tensor_type(val))


def _attr(gm: torch.fx.GraphModule, target: str) -> torch.Tensor:
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, torch.Tensor | torch.fx.GraphModule):
        raise FrontendError(f"attribute {target} is a {type(obj).__name__}, not a tensor")
    return obj


def _call(b: Builder, node: torch.fx.Node, env: dict, problems: list):
    target = node.target
    if str(target) in IGNORED:
        return None
    args = map_aggregate(node.args, lambda n: env[n] if isinstance(n, torch.fx.Node) else n)
    kwargs = map_aggregate(node.kwargs, lambda n: env[n] if isinstance(n, torch.fx.Node) else n)
    flat = _flatten((args, kwargs))
    if target is operator.getitem:
        return FAILED if args[0] is FAILED else args[0][args[1]]
    if any(a is FAILED for a in flat):  # after a failed node: only say whether this one is supported
        if isinstance(target, torch._ops.OpOverload) and lookup(target) is None:
            problems.append((str(target), origin(node)))
        return FAILED
    val = node.meta.get("val")
    if isinstance(val, torch.SymInt | int) and (str(target).startswith("aten.sym_") or
                                                 not isinstance(target, torch._ops.OpOverload)):
        return b.dim(val)  # arithmetic on sizes
    if isinstance(val, torch.SymBool) and all(str(u.target) in IGNORED for u in node.users):
        return None  # a condition on sizes that only run-time assertions read (a data-dependent size's bounds)
    unavailable = [a for a in flat if isinstance(a, Unavailable)]
    if unavailable:
        problems.append((f"{target} uses {unavailable[0].reason}", origin(node)))
        return FAILED
    _check_size(node, val)
    handler = lookup(target)
    if _foldable(target, [env[n] for n in node.all_input_nodes], val):
        return _fold(b, handler, node, args, kwargs)
    if handler is None:
        problems.append((str(target), origin(node)))
        return FAILED
    try:
        result = handler(b, *args, **kwargs)
    except Unsupported as e:
        problems.append((f"{target}: {e}", origin(node)))
        return FAILED
    except UnsupportedOpError as e:  # an ember operator the mapping needs is not in ember.ops
        problems += [(f"{target} needs ember operator {op}", origin(node)) for op, _ in e.missing]
        return FAILED
    except FrontendError as e:
        e.add_note(f"while converting {target} ({origin(node)})")
        raise
    _check(b, node, result)
    return result


def _check_size(node: torch.fx.Node, val) -> None:
    """Refuse a static result larger than the machine's memory before a fold or a handler (a
    torch.full made a constant) tries to build it."""
    for t in _flatten(val):
        if isinstance(t, torch.Tensor) and t.dtype in TORCH_TO_EMBER and all(isinstance(d, int) for d in t.shape):
            check_fits(TensorType(tuple(t.shape), TORCH_TO_EMBER[t.dtype]), f"{origin(node)}: {node.target}")


def _foldable(target, inputs: list, val) -> bool:
    """Whether the node is computed now (folded): every input is a Const, the operator is not
    random, and its results are static and not much larger than its inputs."""
    if not isinstance(target, torch._ops.OpOverload) or torch.Tag.nondeterministic_seeded in target.tags:
        return False
    if not all(isinstance(a, Const) or (isinstance(a, tuple) and all(isinstance(c, Const) for c in a))
               for a in inputs):
        return False
    results = [t for t in _flatten(val) if isinstance(t, torch.Tensor)]
    if not results or not all(isinstance(d, int) for t in results for d in t.shape):
        return False
    size_in = sum(c.tensor.numel() for c in _flatten(inputs))
    return sum(t.numel() for t in results) <= size_in + GROWTH_LIMIT


def _fold(b: Builder, handler, node: torch.fx.Node, args, kwargs):
    """The call's result, computed now: by its handler on a scratch builder whose operators fold
    (checked against torch's types like any conversion), else by torch."""
    if handler is not None:
        scratch = b.scratch()
        try:
            result = handler(scratch, *args, **kwargs)
        except (Unsupported, UnsupportedOpError, FrontendError):
            result = None
        folded = None if result is None else _constants(scratch, node, result)
        if folded is not None:
            return folded
    return _run_torch(node, args, kwargs)


def _constants(scratch: Builder, node: torch.fx.Node, result):
    """The handler's result as Consts (named as torch's fold names them), or None when a part of
    it is not a constant (an operator that did not fold, an output ember does not compute)."""
    results = list(result) if isinstance(result, tuple) else [result]
    if not all(isinstance(r, Const) or (isinstance(r, Value) and scratch.graph.is_constant(r)) for r in results):
        return None
    _check(scratch, node, result)
    names = [f"{node.name}_{k}" for k in range(len(results))] if isinstance(result, tuple) else [node.name]
    consts = tuple(r if isinstance(r, Const) else Const(torch.from_numpy(np.array(scratch.graph.constants[r.name])),
                                                        name) for r, name in zip(results, names))
    return consts if isinstance(result, tuple) else consts[0]


def _run_torch(node: torch.fx.Node, args, kwargs):
    """The call computed by torch: what ember cannot compute itself (see _fold)."""
    concrete = lambda x: x.tensor if isinstance(x, Const) else x
    with torch.no_grad():
        out = node.target(*map_aggregate(args, concrete), **map_aggregate(kwargs, concrete))
    if isinstance(out, list | tuple):
        return tuple(Const(t, f"{node.name}_{k}") for k, t in enumerate(out))
    return Const(out, node.name)


def _check(b: Builder, node: torch.fx.Node, result) -> None:
    """The handler's result must have the types torch says the node's outputs have."""
    results = list(result) if isinstance(result, tuple) else [result]
    expected = b.out_types
    if len(results) != len(expected):
        raise FrontendError(f"{node.target} at node {node.name} mapped to {len(results)} outputs; torch has "
                            f"{len(expected)}")
    for got, want in zip(results, expected):
        if isinstance(got, Unavailable) or want is None:
            continue
        t = got.type if isinstance(got, Value) else b.tensor_type(got.tensor)
        if t != want:
            raise FrontendError(f"{node.target} at node {node.name} mapped to {t}, but torch computes {want} "
                                "(a bug in ember's PyTorch frontend)")


def _output_value(b: Builder, x, taken: list[Value]) -> Value:
    """A graph output: its own value (an identity node when it would otherwise be an input, a
    constant or another output: each output gets its own buffer)."""
    if isinstance(x, Const | Value):
        v = b.v(x)
        if v in b.graph.inputs or b.graph.is_constant(v) or v in taken:
            v = b.op("identity", [v])
        return v
    raise FrontendError(f"an output of the model is {x!r}; ember's outputs are tensors")


def _flatten(x) -> list:
    if isinstance(x, list | tuple):
        return [y for item in x for y in _flatten(item)]
    if isinstance(x, dict):
        return [y for item in x.values() for y in _flatten(item)]
    return [x]


def origin(node: torch.fx.Node) -> str:
    """Where a node came from: its name, the module that made it, its line of source."""
    parts = [f"node {node.name}"]
    stack = node.meta.get("nn_module_stack")
    if stack:
        path, cls = list(stack.values())[-1]
        cls_name = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
        parts.append(f"in {path or 'the model'} ({cls_name.rsplit('.', 1)[-1]})")
    trace = node.meta.get("stack_trace")
    if trace:  # the innermost frame outside torch itself: the model's own line
        lines = [ln.strip() for ln in trace.strip().splitlines()]
        frames = [(ln[len("File "):].replace('"', ""), lines[k + 1] if k + 1 < len(lines) else "")
                  for k, ln in enumerate(lines) if ln.startswith("File ")]
        ours = [f for f in frames if not f[0].startswith(_TORCH_DIR)] or frames
        if ours:
            loc, code = ours[-1]
            parts.append(f"at {loc.replace(', line ', ':').split(', in ')[0]}" + (f": {code}" if code else ""))
    return ", ".join(parts)


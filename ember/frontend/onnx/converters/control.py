"""Control flow: If, Loop and Scan, as ember's `if` and `loop` (ember/ops/control.py).

A subgraph attribute becomes a region. Its formal inputs become region inputs; a name it reads
from an enclosing graph (ONNX subgraphs see every outer name) is a capture: a constant of the
outer graph is copied into the region as its own constant (so constant folding sees it there),
any other value becomes one more input of the node and of the region (`_Scope`). Subgraphs of
subgraphs capture through every level.

An If whose condition is a constant at import (shape arithmetic: `Size(x) == 4`) is its branch:
the selected subgraph's nodes are converted in place, in the enclosing scope, so constants stay
constants for what follows; the other branch, which may not even be valid for these shapes, is
never converted. `implicit_inputs` (convert.py) names the outer values a node's subgraphs read, so that the
importer skips the node when one of them could not be converted.

Scan becomes a loop over its scan inputs' first axis (a scan axis other than 0 is transposed there
first, and back after for scan outputs); Scan-8, whose states and inputs have a batch axis, a loop
over the batch entries around that loop (sequence_lens only as a constant of full lengths);
Loop's left-out trip count is the largest int64, its
left-out condition True. The stacked scan outputs have as many entries as the trip count when the
loop can stop no earlier (a constant trip count, a condition that is True and passed through the
body unchanged), else a symbol `<output>_iterations` known at run time only.

Regions hold tensors only, so an If or Loop whose subgraphs give or read a sequence or optional
(ember/frontend/onnx/structured.py) is resolved at import: an If's condition must then be known
(a graph input is specialized for), and the branch is inlined; a Loop is unrolled (`_unroll`),
its body inlined per iteration, for a trip count and condition known at import and at most
MAX_UNROLL iterations. `inline` converts a subgraph in place, its formal inputs bound to given
tensors (also SequenceMap's body, per element).
"""

from __future__ import annotations

import numpy as np
import onnx

from ....graph.core import Graph, TensorType, Value
from ....ops.nodes import add_op
from ..convert import convert_nodes, implicit_inputs
from ..node import Importer, NodeContext, OnnxImportError, Tensor, sanitize
from ..registry import converts
from ..structured import Structured, describe, is_structured

INT64_MAX = np.iinfo(np.int64).max
MAX_UNROLL = 4096  # iterations of a loop over sequences unrolled at import


class _Scope(dict):
    """The tensors by ONNX name inside a subgraph: its own, then on first use those of the outer
    scope (a graph value becomes a region input, and `captured` records the outer value)."""

    def __init__(self, outer, importer: Importer):
        super().__init__()
        self.outer, self.importer, self.captured = outer, importer, []

    def __missing__(self, name: str) -> Tensor:
        t = self.outer[name]
        if is_structured(t):  # (If and Loop resolve such subgraphs at import: _reads_structured)
            raise OnnxImportError(f"a subgraph reads {describe(t)} {name!r}; ember's regions take tensors only")
        if isinstance(t, Value):
            self.captured.append(t)
            region = self.importer.graph
            t = region.add_input(region.fresh_name(sanitize(name)), t.type)
        else:
            self.importer.name_array(t, name)
        self[name] = t
        return t


def _region(cx: NodeContext, attr: str, formals: list[tuple[str, TensorType]],
            extra: list[tuple[str, TensorType]] = ()) -> tuple[Graph, list[Value], list[Value]]:
    """The region of subgraph attribute `attr`: inputs `extra` (ember's, before the ONNX ones),
    then the subgraph's formal inputs with the given types, then its captures; its outputs. Also
    the captured outer values, in the order of their region inputs."""
    proto: onnx.GraphProto = cx.attr(attr)
    if proto is None:
        raise cx.error(f"attribute {attr} (a graph) is required")
    region = Graph(name=sanitize(proto.name or attr))
    sub = Importer(region, cx.importer.opset)
    scope = _Scope(cx.importer.scope, sub)
    for name, t in extra:
        region.add_input(region.fresh_name(name), t)
    if len(proto.input) != len(formals):
        raise cx.error(f"subgraph {attr} takes {len(proto.input)} inputs, ember expects {len(formals)}")
    for vi, (_, t) in zip(proto.input, formals):
        scope[vi.name] = region.add_input(region.fresh_name(sanitize(vi.name)), t)
    for init in proto.initializer:
        scope[init.name] = onnx.numpy_helper.to_array(init)
        sub.name_array(scope[init.name], init.name)
    convert_nodes(sub, proto.node, sub.opset, scope)
    region.set_outputs(sub.value(scope[vi.name], sanitize(vi.name)) for vi in proto.output)
    return region, scope.captured, list(region.outputs)


class _Inline(dict):
    """The tensors by ONNX name in a subgraph converted in place: its own, then the outer ones."""

    def __init__(self, outer):
        super().__init__()
        self.outer = outer

    def __missing__(self, name: str) -> Tensor:
        return self.outer[name]


def inline(cx: NodeContext, proto: onnx.GraphProto, inputs: list[Tensor | Structured]) -> list[Tensor | Structured]:
    """The outputs of subgraph `proto` converted in place, in the enclosing scope, its formal
    inputs bound to `inputs`: a branch chosen at import, a loop iteration unrolled, a
    SequenceMap body applied to one element."""
    outer = cx.importer.scope
    scope = _Inline(outer)
    for vi, t in zip(proto.input, inputs, strict=True):
        scope[vi.name] = t
    for init in proto.initializer:
        scope[init.name] = onnx.numpy_helper.to_array(init)
        cx.importer.name_array(scope[init.name], init.name)
    try:
        convert_nodes(cx.importer, proto.node, cx.importer.opset, scope)
    finally:
        cx.importer.scope = outer
    return [scope[vi.name] for vi in proto.output]


def _capture_all(regions: list[tuple[Graph, list[Value]]]) -> list[Value]:
    """The outer values any of the regions captures; each region then takes all of them, in that
    order, after its own inputs (if's branches must take the same inputs)."""
    union = list({id(v): v for _, captured in regions for v in captured}.values())
    for region, captured in regions:
        own = region.inputs[:len(region.inputs) - len(captured)]
        by_outer = {id(v): r for v, r in zip(captured, region.inputs[len(own):])}
        inputs = list(own)
        for v in union:
            inputs.append(by_outer.get(id(v)) or region.add_input(region.fresh_name(v.name), v.type))
        region.inputs = inputs
    return union


def _reads_structured(cx: NodeContext) -> bool:
    """The node's subgraphs read a sequence or optional of an enclosing scope, or give one (as
    their types declare): ember resolves it at import, as regions hold tensors only."""
    declared = [vi for attr in ("then_branch", "else_branch", "body") if cx.attr(attr) is not None
                for vi in cx.attr(attr).output]
    return any(vi.type.WhichOneof("value") not in (None, "tensor_type") for vi in declared) or \
        any(is_structured(_peek(cx.importer.scope, name)) for name in implicit_inputs(cx.node))


def _peek(scope, name: str):
    """What `name` is in `scope` or the scopes around it (None if nothing), without capturing it."""
    while scope is not None:
        if dict.__contains__(scope, name):
            return dict.__getitem__(scope, name)
        scope = getattr(scope, "outer", None)
    return None


@converts("If")
def _if(cx: NodeContext):
    cond = cx.input(0)
    if not isinstance(cond, np.ndarray) and _reads_structured(cx):
        cond = cx.const(0, "the condition of branches that give or read sequences or optionals, chosen at import")
    if isinstance(cond, np.ndarray):
        return inline(cx, cx.attr("then_branch" if bool(cond.reshape(())) else "else_branch"), [])
    then, then_captured, _ = _region(cx, "then_branch", [])
    other, else_captured, _ = _region(cx, "else_branch", [])
    captured = _capture_all([(then, then_captured), (other, else_captured)])
    a, b = [v.type for v in then.outputs], [v.type for v in other.outputs]
    if [(t.dtype, t.rank) for t in a] != [(t.dtype, t.rank) for t in b]:
        raise cx.error(f"the branches give different element types or ranks: {[str(t) for t in a]} and "
                       f"{[str(t) for t in b]}")
    if a != b:
        raise cx.unsupported(f"branches whose outputs differ in shape: {[str(t) for t in a]} and "
                             f"{[str(t) for t in b]}")
    return add_op(cx.importer.graph, "if", [cx.importer.value(cx.input(0), "cond"), *captured],
                  out_names=cx.out_names, regions=[then, other])


@converts("Loop")
def _loop(cx: NodeContext):
    trips = cx.optional(0)
    cond = cx.optional(1)
    carried = [cx.input(k) for k in range(2, len(cx.inputs))]
    if any(is_structured(t) for t in carried) or _reads_structured(cx):
        return _unroll(cx, carried)
    body, captured, outs = _region(cx, "body", [("iteration", TensorType((), "int64")),
                                               ("cond", TensorType((), "bool")),
                                               *[("carried", cx.type(t)) for t in carried]])
    _check_carried(cx, carried, outs[1:1 + len(carried)])
    scans = len(outs) - 1 - len(carried)
    starts = cond is None or (isinstance(cond, np.ndarray) and bool(cond.reshape(())))
    early = not (isinstance(trips, np.ndarray) and starts and outs[0] is body.inputs[1])
    length = f"{cx.out_names[-1]}_iterations" if early else int(trips.reshape(()))
    graph = cx.importer.graph
    inputs = [cx.importer.value(np.array(INT64_MAX) if trips is None else trips, "trip_count"),
              cx.importer.value(np.array(True) if cond is None else cond, "cond"),
              *(cx.importer.value(t, "carried") for t in carried), *captured]
    return add_op(graph, "loop", inputs, {"carried": len(carried), "length": length if scans else None},
                  out_names=cx.out_names, regions=[body])


def _unroll(cx: NodeContext, carried: list) -> list:
    """A Loop that carries (or reads) a sequence or optional, unrolled at import: each iteration
    the body converted in place, the carried values bound to the previous iteration's. Its trip
    count and condition must be known at import (a graph input is specialized for; a condition
    computed by the body must fold), and it runs at most MAX_UNROLL iterations."""
    trips = cx.const(0, "the trip count of a loop over sequences or optionals, unrolled at import")
    cond = cx.const(1, "the condition of a loop over sequences or optionals, unrolled at import")
    trips = INT64_MAX if trips is None else int(trips.reshape(()))
    go = True if cond is None else bool(cond.reshape(()))
    body = cx.attr("body")
    scans: list[list[Tensor]] = [[] for _ in range(len(body.output) - 1 - len(carried))]
    k = 0
    while go and k < trips:
        if k == MAX_UNROLL:
            raise cx.error(f"a loop over sequences or optionals is unrolled at import, and this one runs more than "
                           f"{MAX_UNROLL} iterations (trip count {trips}); ember does not unroll it")
        outs = inline(cx, body, [np.array(k, "int64"), np.array(go), *carried])
        if not isinstance(outs[0], np.ndarray):
            raise cx.error(f"a loop over sequences or optionals is unrolled at import, and the condition its body "
                           f"computes in iteration {k} is known at run time only; ember cannot unroll it")
        go, carried = bool(outs[0].reshape(())), outs[1:1 + len(carried)]
        for scan, t in zip(scans, outs[1 + len(carried):]):
            scan.append(cx.op("unsqueeze", [t], {"axes": (0,)}))
        k += 1
    if scans and not k:
        raise cx.unsupported("scan outputs of a loop over sequences that runs no iteration")
    return [*carried, *(scan[0] if len(scan) == 1 else cx.op("concat", scan, {"axis": 0}) for scan in scans)]


@converts("Scan", versions=range(9, 10**6))
def _scan(cx: NodeContext):
    n_scan = int(cx.attr("num_scan_inputs"))
    states = cx.inputs[:len(cx.inputs) - n_scan]
    scanned = list(cx.inputs[len(states):])
    in_axes = list(cx.attr("scan_input_axes") or [0] * n_scan)
    for k, (x, axis) in enumerate(zip(scanned, in_axes)):
        rank = cx.type(x).rank
        axis %= rank
        if axis:
            scanned[k] = cx.op("transpose", [x], {"perm": (axis, *(d for d in range(rank) if d != axis))})
    lengths = {cx.type(x).shape[0] for x in scanned}
    if len(lengths) != 1 or not isinstance(next(iter(lengths)), int):
        raise cx.unsupported(f"scan inputs of lengths {sorted(map(str, lengths))} (one static length needed)")
    (length,) = lengths
    slices = [TensorType(cx.type(x).shape[1:], cx.type(x).dtype) for x in scanned]
    body, captured, outs = _region(cx, "body", [("state", cx.type(t)) for t in states] +
                                   [("slice", t) for t in slices],
                                   extra=[("iteration", TensorType((), "int64")), ("cond", TensorType((), "bool"))])
    _check_carried(cx, states, outs[:len(states)])
    body.set_outputs([body.inputs[1], *outs])
    n_out = len(outs) - len(states)
    graph = cx.importer.graph
    inputs = [cx.importer.value(np.array(length, "int64"), "trip_count"), cx.importer.value(np.array(True), "cond"),
              *(cx.importer.value(t, "state") for t in states), *(cx.importer.value(t, "scanned") for t in scanned),
              *captured]
    attrs = {"carried": len(states), "scanned": n_scan, "length": length if n_out else None,
             "scan_reverse": tuple(int(d) for d in cx.attr("scan_input_directions") or ()),
             "out_reverse": tuple(int(d) for d in cx.attr("scan_output_directions") or ())}
    results = add_op(graph, "loop", inputs, attrs, out_names=cx.out_names, regions=[body])
    out_axes = list(cx.attr("scan_output_axes") or [0] * n_out)
    for k, axis in enumerate(out_axes):
        y = results[len(states) + k]
        axis %= y.type.rank
        if axis:
            perm = [d for d in range(1, y.type.rank)]
            perm.insert(axis, 0)
            results[len(states) + k] = cx.op("transpose", [y], {"perm": tuple(perm)})
    return results


@converts("Scan", versions=range(8, 9))
def _scan_8(cx: NodeContext):
    """Scan-8 scans axis 1 of inputs that have a batch axis 0, from states with one too: a loop over
    the batch entries whose body is Scan-9's loop over the sequence, the states and inputs
    scanned along the batch axis, the final states and outputs stacked along it."""
    n_scan = int(cx.attr("num_scan_inputs"))
    lens = cx.optional(0)
    states, scanned = cx.inputs[1:len(cx.inputs) - n_scan], cx.inputs[len(cx.inputs) - n_scan:]
    batch, length = (cx.type(scanned[0]).shape[:2] if scanned else (None, None))
    if not isinstance(batch, int) or any(cx.type(x).shape[:2] != (batch, length) for x in scanned) or \
            any(cx.type(t).shape[:1] != (batch,) for t in states):
        raise cx.unsupported(f"states and scan inputs of shapes {[cx.type(x).shape for x in cx.inputs[1:]]} (one "
                             "static batch and length needed)")
    if lens is not None:
        if not isinstance(lens, np.ndarray):
            raise cx.unsupported("sequence_lens given at run time")
        if (lens != length).any():
            raise cx.unsupported(f"sequence_lens {lens.tolist()} shorter than the inputs' {length}")
    entry = [TensorType(cx.type(t).shape[1:], cx.type(t).dtype) for t in [*states, *scanned]]
    body, captured, outs = _region(cx, "body", [("state", t) for t in entry[:len(states)]] +
                                   [("slice", TensorType(t.shape[1:], t.dtype)) for t in entry[len(states):]],
                                   extra=[("iteration", TensorType((), "int64")), ("cond", TensorType((), "bool"))])
    _check_carried(cx, [TensorType(t.shape, t.dtype) for t in entry[:len(states)]], outs[:len(states)])
    body.set_outputs([body.inputs[1], *outs])
    n_out = len(outs) - len(states)
    over_batch = Graph(name=f"{body.name}_batch")
    over_batch.add_input("entry", TensorType((), "int64"))
    cond = over_batch.add_input("cond", TensorType((), "bool"))
    ins = [over_batch.add_input(over_batch.fresh_name(kind), t)
           for kind, t in zip(["state"] * len(states) + ["scanned"] * n_scan, entry)]
    inner_captured = [over_batch.add_input(over_batch.fresh_name(v.name), v.type) for v in captured]
    attrs = {"carried": len(states), "scanned": n_scan, "length": length if n_out else None,
             "scan_reverse": tuple(int(d) for d in cx.attr("directions") or ())}
    trips = over_batch.add_constant(np.array(length, "int64"), name="length")
    always = over_batch.add_constant(np.array(True), name="always")
    over_batch.set_outputs([cond, *add_op(over_batch, "loop", [trips, always, *ins, *inner_captured], attrs,
                                          regions=[body])])
    importer = cx.importer
    inputs = [importer.value(np.array(batch, "int64"), "trip_count"), importer.value(np.array(True), "cond"),
              *(importer.value(t, "scanned") for t in [*states, *scanned]), *captured]
    attrs = {"carried": 0, "scanned": len(states) + n_scan, "length": batch}
    return add_op(importer.graph, "loop", inputs, attrs, out_names=cx.out_names, regions=[over_batch])


def _check_carried(cx: NodeContext, inits: list[Tensor | TensorType], outs: list[Value]) -> None:
    for k, (t, v) in enumerate(zip(inits, outs)):
        t = t if isinstance(t, TensorType) else cx.type(t)
        if t != v.type:
            raise cx.unsupported(f"loop-carried value {k} whose type changes per iteration: {t} in, {v.type} out")

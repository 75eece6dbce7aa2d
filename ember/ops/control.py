"""Control flow: operators that run graphs of their own (regions, ember/graph/core.py).

    if(cond, *captured) [then, else]
        cond: a bool tensor of one element. Both regions take the captured values as inputs and
        give the node's outputs; the one `cond` selects runs.
    loop(trip_count, cond, *carried, *scanned, *captured) [body] {carried=C, scanned=S, length,
         scan_reverse=(), out_reverse=()}
        Runs `body` while the iteration number is below `trip_count` (int64, one element) and
        `cond` (bool, one element) holds: ONNX's Loop and Scan in one operator.
        body(iteration: int64[], cond: bool[], *carried, *slices, *captured)
            -> (cond: bool[], *carried, *scan_outputs)
        The carried values go from one iteration's outputs to the next one's inputs (their types
        never change); slice k is scanned[k][i] at iteration i (scanned[k][n - 1 - i] where
        scan_reverse[k]); scan output k of every iteration is stacked along a new first axis of
        `length` entries (an int, or a symbol when the count is known at run time only; written
        from the end where out_reverse[k]). The node's outputs: the last carried values, then the
        stacked scan outputs.

Regions are isolated from above: every outer value a region reads is one of the node's inputs.
Neither operator has a compute: the compiler compiles each region to its kernels and runs the
branch choice and the iterations in the model's entry function (ember.codegen.entry); the
reference evaluator runs them with `run_regions`. `inline` copies a region's nodes into a graph
(an `if` on a constant condition, a torch.while_loop's condition).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..graph.core import Graph, TensorType, Value
from .registry import OpDef, OpTypeError, register

CONTROL_OPS = ("if", "loop")
Run = Callable[..., list]  # evaluate(graph, *inputs) -> outputs


def _one_element(t: TensorType, dtype: str, what: str) -> None:
    if t.dtype != dtype or t.numel != 1:
        raise OpTypeError(f"{what} must be a {dtype} tensor of one element, got {t}")


def _takes(region: Graph, types: Sequence[TensorType], what: str) -> None:
    got = [v.type for v in region.inputs]
    if got != list(types):
        raise OpTypeError(f"{what} ({region.name}) takes {[str(t) for t in got]}, but is given "
                          f"{[str(t) for t in types]}")


def _infer_if(types: list[TensorType], attrs, regions: tuple[Graph, ...] = ()) -> list[TensorType]:
    if len(regions) != 2:
        raise OpTypeError(f"if needs two regions (then, else), got {len(regions)}")
    _one_element(types[0], "bool", "if: the condition")
    then, other = regions
    for name, region in zip(("then", "else"), regions):
        _takes(region, types[1:], f"if: the {name} branch")
    a, b = [v.type for v in then.outputs], [v.type for v in other.outputs]
    if a != b:
        raise OpTypeError(f"if: the branches give different types: then {[str(t) for t in a]}, else "
                          f"{[str(t) for t in b]}")
    return a


def loop_parts(n: int, attrs) -> tuple[slice, slice, slice]:
    """Where a loop's carried, scanned and captured inputs are among its n inputs."""
    c, s = attrs["carried"], attrs["scanned"]
    return slice(2, 2 + c), slice(2 + c, 2 + c + s), slice(2 + c + s, n)


def _infer_loop(types: list[TensorType], attrs, regions: tuple[Graph, ...] = ()) -> list[TensorType]:
    if len(regions) != 1:
        raise OpTypeError(f"loop needs one region (its body), got {len(regions)}")
    (body,) = regions
    c, s, length = attrs["carried"], attrs["scanned"], attrs["length"]
    if not (isinstance(c, int) and isinstance(s, int) and c >= 0 and s >= 0 and 2 + c + s <= len(types)):
        raise OpTypeError(f"loop: carried={c!r} and scanned={s!r} do not fit its {len(types)} inputs")
    _one_element(types[0], "int64", "loop: the trip count")
    _one_element(types[1], "bool", "loop: the condition")
    carried, scanned, captured = (types[p] for p in loop_parts(len(types), attrs))
    for t in scanned:
        if t.rank == 0:
            raise OpTypeError("loop: a scanned input must have a first axis to scan, got a scalar")
    slices = [TensorType(t.shape[1:], t.dtype) for t in scanned]
    _takes(body, [TensorType((), "int64"), TensorType((), "bool"), *carried, *slices, *captured], "loop: the body")
    outs = [v.type for v in body.outputs]
    if len(outs) < 1 + c or outs[1:1 + c] != carried:
        raise OpTypeError(f"loop: the body must give the condition then the carried values {[str(t) for t in carried]}"
                          f", got {[str(t) for t in outs]} (a carried value's type never changes)")
    _one_element(outs[0], "bool", "loop: the body's condition")
    scans = outs[1 + c:]
    for name, n in (("scan_reverse", s), ("out_reverse", len(scans))):
        flags = attrs[name]
        if flags and len(flags) != n:
            raise OpTypeError(f"loop: {name} has {len(flags)} entries for {n} values")
    if scans and not (isinstance(length, str) or (isinstance(length, int) and length >= 0)):
        raise OpTypeError(f"loop: scan outputs need their length (an int or a symbol), got {length!r}")
    return [*carried, *(TensorType((length, *t.shape), t.dtype) for t in scans)]


def _no_reference(op: str):
    def run(*_):
        raise OpTypeError(f"{op} runs its regions: ember.ops.evaluate runs it (run_regions), the compiler "
                          "compiles them")
    return run


register(OpDef("if", _infer_if, _no_reference("if"), _no_reference("if"), "opaque", {}, (1, None),
               "if(cond, *captured) [then, else]: the outputs of the region cond selects"))
register(OpDef("loop", _infer_loop, _no_reference("loop"), _no_reference("loop"), "opaque",
               {"carried": 0, "scanned": 0, "length": None, "scan_reverse": (), "out_reverse": ()}, (2, None),
               "loop(trip_count, cond, *carried, *scanned, *captured) [body]: ONNX's Loop and Scan"))


def run_regions(op: str, inputs: list[np.ndarray], attrs, regions: tuple[Graph, ...], run: Run) -> list[np.ndarray]:
    """The outputs of a control-flow node, its regions run by `run` (the reference evaluator)."""
    if op == "if":
        return run(regions[0] if bool(np.asarray(inputs[0]).reshape(())) else regions[1], *inputs[1:])
    (body,) = regions
    carried, scanned, captured = (inputs[p] for p in loop_parts(len(inputs), attrs))
    trips = int(np.asarray(inputs[0]).reshape(()))
    cond = bool(np.asarray(inputs[1]).reshape(()))
    n = len(body.outputs) - 1 - len(carried)
    scans: list[list[np.ndarray]] = [[] for _ in range(n)]
    i = 0
    while i < trips and cond:
        slices = [x[len(x) - 1 - i if _flag(attrs["scan_reverse"], k) else i] for k, x in enumerate(scanned)]
        outs = run(body, np.array(i, "int64"), np.array(cond), *carried, *slices, *captured)
        cond = bool(outs[0].reshape(()))
        carried = outs[1:1 + len(carried)]
        for k, y in enumerate(outs[1 + len(carried):]):
            scans[k].append(y)
        i += 1
    stacked = []
    for k, ys in enumerate(scans):
        t = body.outputs[1 + len(carried) + k].type
        ys = ys[::-1] if _flag(attrs["out_reverse"], k) else ys
        stacked.append(np.stack(ys) if ys else np.zeros((0, *t.shape), t.dtype))
    return [*carried, *stacked]


def inline(graph: Graph, region: Graph, args: Sequence[Value],
           node_name: Callable[[str], str] = lambda _: "") -> list[Value]:
    """The region's nodes copied into `graph` on `args` (values of `graph`, one per region input;
    its constants become constants of `graph`, each node is named `node_name(its name)`); the
    values of its outputs."""
    env: dict[int, Value] = {id(v): a for v, a in zip(region.inputs, args, strict=True)}

    def of(v: Value) -> Value:
        if id(v) not in env:  # a constant of the region
            env[id(v)] = graph.add_constant(region.constants[v.name], v.name)
        return env[id(v)]

    for n in region.nodes:
        new = graph.add_node(n.op, [of(v) for v in n.inputs], n.attrs, [v.type for v in n.outputs],
                             name=node_name(n.name), out_names=[v.name for v in n.outputs], regions=n.regions)
        env.update((id(old), v) for old, v in zip(n.outputs, new.outputs))
    return [of(v) for v in region.outputs]


def _flag(flags: tuple, k: int) -> bool:
    return bool(flags[k]) if flags else False

"""The call program of a model (ember.program) from its kernel graph and memory plan.

`call_program(steps, plan, calls, kernels, symbols)` walks the kernel graph's steps in order: a
kernel step is a `Launch` of its kernel on the references of its inputs and outputs, a view makes
no statement (its readers get the reference of what it views), and a control-flow step is a
`Branch` or a `Loop` around the statements of its regions, each region walked with references of
its own (`_Refs.region`). Outputs no kernel writes (an input or a weight returned as is, an output
listed twice) are copied at the end of their level.

Where each value lives (`_Refs`): an input or an output of its level (a region's are the
references its control-flow node gives them), a weight (the constants in order of first use; one
weight per array, and one per content among arrays of one dtype, shape and bytes, so a weight the
regions share is stored once), or a tensor of the memory plan's workspace; a view outside the
workspace refers to what it views.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .. import dims
from ..graph.core import Dim, Value, region_key
from ..ops.control import loop_parts
from ..program import Arg, Branch, Carried, Copy, Launch, Loop, Program, Ref, SizeExpr, Slice, Stmt
from .plan_memory import KernelGraph, MemoryPlan, Step, next_name
from .same_bytes import SameBytes


def call_program(steps: KernelGraph, plan: MemoryPlan, calls: Iterable[tuple], kernels: Sequence,
                 symbols: Sequence[str]) -> Program:
    """The program that runs `steps` over `plan`: `calls` holds (group, its own lowered function,
    its kernel) for every kernel step, `kernels` the distinct kernels, `symbols` the model's
    symbols in the order of its sizes."""
    refs = _Refs(steps, plan, list(symbols))
    body = _Statements({id(g): (own, k) for g, own, k in calls}, list(symbols)).of(steps, refs)
    body += refs.copies()  # before the weights are listed: a copied output may be a weight
    return Program(tuple(kernels), tuple(body), tuple(refs.weights))


def _size_of(d: Dim, symbols: list[str]) -> int | Ref | SizeExpr:
    """A dimension as the program computes it from its sizes (the symbols' values)."""
    if dims.is_symbol(d):
        return Ref("size", symbols.index(d))
    if isinstance(d, str):
        return SizeExpr(tuple((tuple(symbols.index(s) for s in m), c) for m, c in dims.parse(d).terms))
    return int(d)


class _Refs:
    """The reference of each value of one level (the graph, or a region; see the module doc)."""

    def __init__(self, steps: KernelGraph, plan: MemoryPlan, symbols: list[str], inputs: list[Ref] | None = None,
                 outputs: list[Ref] | None = None, prefix: str = "", weights: dict[str, int] | None = None,
                 arrays: dict[int, int] | None = None, contents: SameBytes[int] | None = None):
        graph = steps.graph
        self.graph, self.plan, self.symbols, self.prefix = graph, plan, symbols, prefix
        self.viewed = {id(s.outputs[0]): s.inputs[0] for s in steps.steps if s.view}
        self.inputs = {id(v): Ref("input", k) if inputs is None else inputs[k] for k, v in enumerate(graph.inputs)}
        self.out_refs = [Ref("output", k) for k in range(len(graph.outputs))] if outputs is None else outputs
        self.outputs: dict[int, int] = {}
        for k, v in enumerate(graph.outputs):
            self.outputs.setdefault(id(v), k)
        for v, k in steps.written_as:  # written as the output that views it
            self.outputs[id(v)] = k
        self.workspace = {t.name: k for k, t in enumerate(plan.tensors)}
        self.weights: dict[str, int] = {} if weights is None else weights
        self.arrays: dict[int, int] = {} if arrays is None else arrays  # id(constant data) -> its weight
        self.contents: SameBytes[int] = SameBytes() if contents is None else contents  # a weight per content
        self.produced = {id(v) for n in graph.nodes for v in n.outputs}

    def region(self, steps: KernelGraph, prefix: str, inputs: list[Ref], outputs: list[Ref]) -> _Refs:
        return _Refs(steps, self.plan, self.symbols, inputs, outputs, prefix, self.weights, self.arrays, self.contents)

    def of(self, v: Value) -> Ref:
        if id(v) in self.inputs:
            return self.inputs[id(v)]
        if self.graph.is_constant(v):
            return Ref("weight", self.weight(v))
        if id(v) in self.outputs:
            return self.out_refs[self.outputs[id(v)]]
        if self.prefix + v.name in self.workspace:
            return Ref("workspace", self.workspace[self.prefix + v.name])
        return self.of(self.viewed[id(v)])

    def weight(self, v: Value) -> int:
        """The weight of a constant: one per array, and one per content (dtype, shape and bytes:
        same_bytes) among arrays (regions name their copies of an outer weight apart; cse merges
        equal constants within a graph only)."""
        data = self.graph.constants[v.name]
        if id(data) not in self.arrays:
            name = self.prefix + v.name
            self.arrays[id(data)] = self.contents.setdefault(
                data, lambda: self.weights.setdefault(name, len(self.weights)))
        return self.arrays[id(data)]

    def dims(self, shape: tuple[Dim, ...]) -> tuple[int | Ref | SizeExpr, ...]:
        return tuple(_size_of(d, self.symbols) for d in shape)

    def arg(self, v: Value) -> Arg:
        return Arg(self.of(v), self.dims(v.shape), v.dtype)

    def copies(self) -> list[Copy]:
        """Outputs no kernel writes: inputs and constants returned as they are, repeated outputs."""
        out = []
        for k, v in enumerate(self.graph.outputs):
            if self.outputs[id(v)] == k and id(v) in self.produced:
                continue
            out.append(Copy(self.out_refs[k], self.of(v), self.dims(v.shape), np.dtype(v.dtype).itemsize))
        return out


class _Statements:
    """The statements of each level in order, and a branch or a loop for each control-flow node,
    with the locals they use (numbered once over the whole program)."""

    def __init__(self, kernels: dict[int, tuple], symbols: list[str]):
        self.kernels, self.symbols = kernels, symbols  # id(group) -> (its own function, its kernel)
        self.locals = self.loops = 0

    def of(self, steps: KernelGraph, refs: _Refs) -> list[Stmt]:
        out: list[Stmt] = []
        for step in steps.steps:
            if step.regions:
                out.append(self.control(step, refs))
            elif not step.view:
                g = step.group
                own, k = self.kernels[id(g)]
                out.append(Launch(k.name, (), tuple(refs.arg(v) for v in (*g.inputs, *g.outputs)),
                                  tuple(Ref("size", self.symbols.index(s.name)) for s in own.size_vars),
                                  len(g.outputs), "; ".join(repr(n) for n in g.nodes)))
        return out

    def local(self) -> int:
        self.locals += 1
        return self.locals - 1

    def region(self, step: Step, k: int, refs: _Refs, inputs: list[Ref], outputs: list[Ref]) -> tuple[Stmt, ...]:
        sub = refs.region(step.regions[k], region_key(refs.prefix, step.control.name, k), inputs, outputs)
        return (*self.of(step.regions[k], sub), *sub.copies())

    def control(self, step: Step, refs: _Refs) -> Stmt:
        node = step.control
        outs = [refs.of(v) for v in node.outputs]
        if node.op == "if":
            ins = [refs.of(v) for v in node.inputs[1:]]
            return Branch(refs.of(node.inputs[0]), self.region(step, 0, refs, ins, outs),
                          self.region(step, 1, refs, ins, outs))
        c = node.attrs["carried"]
        carried, scanned, captured = (node.inputs[p] for p in loop_parts(len(node.inputs), node.attrs))
        index, iteration, cond = self.loops, self.local(), self.local()
        self.loops += 1
        init = tuple(Copy(outs[j], refs.of(x), refs.dims(x.shape), np.dtype(x.dtype).itemsize)
                     for j, x in enumerate(carried))
        slices = []
        for values, flags in ((scanned, node.attrs["scan_reverse"]), (node.outputs[c:], node.attrs["out_reverse"])):
            for j, v in enumerate(values):
                slices.append(Slice(self.local(), refs.of(v), refs.dims(v.shape[1:]), np.dtype(v.dtype).itemsize,
                                    refs.dims(v.shape[:1])[0], bool(flags[j]) if flags else False))
        local = [Ref("local", sl.local) for sl in slices]
        nexts = [Ref("workspace", refs.workspace[next_name(refs.prefix, node, j)]) for j in range(1 + c)]
        buffers = tuple(Carried(self.local(), self.local(), outs[j], nexts[1 + j], refs.dims(v.shape),
                                np.dtype(v.dtype).itemsize) for j, v in enumerate(node.outputs[:c]))
        body = self.region(step, 0, refs, [Ref("local", iteration), Ref("local", cond),
                                           *(Ref("local", b.current) for b in buffers), *local[:len(scanned)],
                                           *(refs.of(v) for v in captured)],
                           [nexts[0], *(Ref("local", b.new) for b in buffers), *local[len(scanned):]])
        return Loop(index, refs.of(node.inputs[0]), refs.of(node.inputs[1]), iteration, cond, init, tuple(slices),
                    body, nexts[0], buffers)

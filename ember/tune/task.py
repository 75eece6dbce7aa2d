"""Tuning tasks: one kernel's computation, unscheduled, with how often a model runs it.

A task holds the unscheduled loop-IR function of a computation (every stage a block, no loop
transformed), which is what the design-space rules (ember.tune.space) and every trace of the
search apply to, and what the tuning database keys records by (`task.key`, its structural
hash: renaming tensors or loops does not change it). `default_trace` is the hand-written
schedule's trace (ember.ops), when there is one: the baseline a tuned schedule must beat, and a
seed of the search.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property, reduce

import numpy as np

from ..errors import ScheduleError
from ..lowering import workload_key
from ..tir import dtype as dt
from ..tir.expr import Binary, BufferLoad, Call, PrimExpr, Select, as_int
from ..tir.expr_functor import expr_children
from ..tir.functor import collect
from ..tir.schedule import Schedule, Trace
from ..tir.stmt import Block, BlockRealize, BufferStore, PrimFunc

COUNTED_OPS = ("+", "-", "*", "/", "min", "max")


@dataclass(frozen=True, eq=False)
class Task:
    name: str
    func: PrimFunc  # unscheduled: inputs then outputs as parameters
    weight: int = 1  # how many kernels of a model run this computation
    default_trace: Trace | None = field(default=None, compare=False)

    @cached_property
    def key(self) -> str:
        """The workload key: the structural hash of the unscheduled function."""
        return workload_key(self.func)

    @cached_property
    def _ops(self) -> tuple[int, int]:
        return op_counts(self.func)

    @property
    def flops(self) -> int:
        """Operations the kernel performs: floating-point ones and integer ones on values (an int8
        product's multiply-adds), not on addresses."""
        return sum(self._ops)

    @property
    def integer(self) -> bool:
        """Whether most of its operations are on integers (an int8 product): its rate is in GOP/s."""
        return self._ops[1] > self._ops[0]

    @property
    def rate_unit(self) -> str:
        return "GOP/s" if self.integer else "GFLOP/s"

    @property
    def num_inputs(self) -> int:
        """Parameters the kernel reads; the rest (the last ones) it writes."""
        written = {id(b) for r in collect(self.func.body, lambda s: isinstance(s, BlockRealize))
                   for b in _written(r.block)}
        return sum(1 for p in self.func.params if id(p) not in written)

    def schedule(self, trace: Trace | None = None, seed: int | None = None) -> Schedule:
        """A fresh schedule of the task, with `trace` replayed on it."""
        sch = Schedule(self.func, seed=seed)
        if trace is not None:
            trace.apply_to(sch)
        return sch

    def build(self, trace: Trace | None = None, target: str = "c"):
        """The kernel that `trace` schedules (None: unscheduled), compiled."""
        from ..kernel import build

        return build(self.schedule(trace), target=target, name=self.name)

    def random_args(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Fresh random inputs and empty outputs, in parameter order."""
        args = []
        for k, p in enumerate(self.func.params):
            shape = tuple(as_int(d) for d in p.shape)
            if k < self.num_inputs:
                args.append(_random(rng, shape, p.dtype))
            else:
                args.append(np.empty(shape, dtype=_np_dtype(p.dtype)))
        return args


def _written(block: Block):
    return [w.buffer for w in block.writes]


def _np_dtype(dtype: str):
    return np.float16 if dtype == "float16" else dt.to_numpy(dtype)


def _random(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    if dt.is_float(dtype):
        return rng.standard_normal(shape).astype(_np_dtype(dtype))
    if dtype == "bool":
        return rng.random(shape) < 0.5
    return rng.integers(-8, 8, size=shape).astype(dtype) if dtype.startswith("int") else \
        rng.integers(0, 8, size=shape).astype(dtype)


def task_from_tensors(tensors: Sequence, name: str = "kernel") -> Task:
    """A task from te tensors (placeholders and computes, the arguments in call order)."""
    from ..te.to_tir import create_prim_func

    func = create_prim_func(list(tensors))
    _check_static(func)
    return Task(name, func)


def _check_static(func: PrimFunc) -> None:
    symbolic = [p.name for p in func.params if any(as_int(d) is None for d in p.shape)]
    if symbolic:
        raise ScheduleError(f"tuning needs static shapes; {', '.join(symbolic)} have symbolic dimensions")


def flop_count(func: PrimFunc) -> int:
    """Arithmetic operations the unscheduled function performs (see op_counts), both kinds."""
    return sum(op_counts(func))


def op_counts(func: PrimFunc) -> tuple[int, int]:
    """(floating-point, integer) operations the unscheduled function performs: for each block,
    the size of its iteration domain times the operations in what it stores (a math call or a
    select counts as one; a copy counts none). An integer operation counts where it computes on
    loaded values (an int8 product's widened multiply-add), not where it only computes an
    address or a condition from the loop variables; a load's indices count nothing."""
    floats = ints = 0
    for r in collect(func.body, lambda s: isinstance(s, BlockRealize)):
        block = r.block
        if not block.iter_vars:
            continue
        points = reduce(lambda a, b: a * b, (as_int(iv.dom.extent) or 1 for iv in block.iter_vars), 1)
        for store in collect(block.body, lambda s: isinstance(s, BufferStore)):
            counts = [0, 0]
            _count(store.value, counts)
            floats += points * counts[0]
            ints += points * counts[1]
    return floats, ints


def _count(e: PrimExpr, counts: list[int]) -> None:
    """Add e's operations to counts ([float, int]), children first (a stack, not recursion: a
    long chain of selects or sums is deep)."""
    reads: dict[int, bool] = {}  # id of a visited node -> whether it reads a buffer
    stack = [(e, False)]
    while stack:
        node, done = stack.pop()
        if isinstance(node, BufferLoad):  # (its indices are addresses: not counted)
            reads[id(node)] = True
            continue
        children = expr_children(node)
        if not done:
            stack.append((node, True))
            stack.extend((c, False) for c in children)
            continue
        loaded = any(reads[id(c)] for c in children)
        reads[id(node)] = loaded
        if isinstance(node, Call | Select):
            counts[0] += 1
        elif isinstance(node, Binary) and node.op in COUNTED_OPS:
            if dt.is_float(node.dtype):
                counts[0] += 1
            elif loaded:
                counts[1] += 1

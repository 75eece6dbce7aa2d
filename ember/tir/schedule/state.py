"""The Schedule: a loop-IR function being transformed, handles to its loops and blocks, and
the trace of every primitive applied so far.

Handles (`LoopRV`, `BlockRV`) are names ("l3", "b1"). A loop handle resolves to the loop's
variable, a block handle to the block's name; both are looked up in the current function on
every use, so a handle stays valid as long as its loop or block exists. A loop consumed by
`split` or `fuse` is remembered, so using it again says which primitive consumed it.

Primitives are plain functions registered with `@primitive`; calling `sch.split(...)` runs
the function and appends an instruction to the trace. Arguments that are handles (or lists of
handles) become the instruction's inputs, the others its attributes, so a primitive is defined
once: its function is how it applies, its signature is how it prints and serializes.
"""

from __future__ import annotations

import inspect
import random
from dataclasses import dataclass, replace

from ...errors import ArgumentTypeError, ScheduleError
from ..expr import Var
from ..functor import collect, mutate_stmt, stmt_children
from ..stmt import Block, BlockRealize, For, PrimFunc, Stmt
from .registry import PRIMITIVES
from .trace import Instruction, Trace


@dataclass(frozen=True)
class LoopRV:
    name: str

    def __str__(self):
        return self.name


@dataclass(frozen=True)
class BlockRV:
    name: str

    def __str__(self):
        return self.name


class ExprRV(int):
    """The integer a sampling primitive chose, with the name the trace gives it ("v3"): it is
    an int wherever a primitive takes one (split factors, an annotation's value), and a handle
    in the trace, so that replaying a trace with another decision changes what uses it."""

    def __new__(cls, value: int, name: str):
        obj = super().__new__(cls, value)
        obj.name = name
        return obj

    def __str__(self):
        return self.name

    def __reduce__(self):
        return (ExprRV, (int(self), self.name))


HANDLES = (LoopRV, BlockRV, ExprRV)


def _is_handle(v) -> bool:
    if isinstance(v, HANDLES):
        return True
    return isinstance(v, list | tuple) and len(v) > 0 and all(isinstance(x, HANDLES) for x in v)


class Schedule:
    """Transforms `func` primitive by primitive; `sch.mod` is the function now. `seed` fixes
    the choices of the sampling primitives (ember.tir.schedule.sampling)."""

    def __init__(self, func: PrimFunc, seed: int | None = None):
        if not isinstance(func, PrimFunc):
            raise ArgumentTypeError(f"Schedule takes a PrimFunc, got {type(func).__name__}")
        self.mod = func
        self.original = func  # what the trace replays on
        self.trace = Trace()
        self._loops: dict[LoopRV, Var] = {}
        self._blocks: dict[BlockRV, str] = {}
        self._consumed: dict[Var, str] = {}
        self._counter = {"l": 0, "b": 0, "v": 0}
        self._depth = 0
        self.rng = random.Random(seed)
        self._decision = None
        self.forced: list = []  # decisions for the next sampling primitives, in order (ember.tune)

    # -- dispatch --------------------------------------------------------------------------
    def __getattr__(self, name):
        if name in PRIMITIVES:
            return lambda *args, **kwargs: self._run(name, args, kwargs)
        raise AttributeError(f"Schedule has no primitive {name!r}")

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(PRIMITIVES))

    def apply(self, kind: str, inputs: list[tuple[str, object]], attrs: dict):
        """Apply one instruction (used by trace replay): inputs are (parameter, handle or list)."""
        if kind not in PRIMITIVES:
            raise ScheduleError(f"unknown schedule instruction {kind!r}")
        args: list = []
        kwargs = dict(attrs)
        for pname, value in inputs:
            if pname.startswith("*"):
                args.extend(value)
            else:
                kwargs[pname] = value
        return self._run(kind, tuple(args), kwargs)

    def _run(self, kind: str, args: tuple, kwargs: dict):
        prim = PRIMITIVES[kind]
        fn, sig = prim.fn, prim.signature
        try:
            bound = sig.bind(self, *args, **kwargs)
        except TypeError as e:
            raise ScheduleError(f"{kind}: {e}") from None
        bound.apply_defaults()
        inputs, attrs = [], []
        for pname, value in list(bound.arguments.items())[1:]:
            param = sig.parameters[pname]
            if param.kind == inspect.Parameter.VAR_POSITIONAL:
                flat = [x for v in value for x in (v if isinstance(v, list | tuple) else [v])]
                inputs.append(("*" + pname, tuple(h.name for h in flat)))
                continue
            if _is_handle(value):
                names = value.name if isinstance(value, HANDLES) else tuple(h.name for h in value)
                inputs.append((pname, names))
            elif not (value is None and param.default is None):  # an optional handle left out
                attrs.append((pname, _freeze(value)))
        saved = (self.mod, dict(self._consumed))
        self._depth += 1
        try:
            result = fn(self, *args, **kwargs)
        except Exception:
            self._decision = None
            if self._depth == 1:  # a rejected directive leaves the schedule as it was
                self.mod, self._consumed = saved
            raise
        finally:
            self._depth -= 1
        if self._depth == 0:
            outs = result if isinstance(result, list | tuple) else ([] if result is None else [result])
            if self._decision is not None:  # a sampling primitive: record what it chose
                attrs = [(k, v) for k, v in attrs if k != "decision"] + [("decision", _freeze(self._decision))]
                self._decision = None
            self.trace.append(Instruction(kind, tuple(inputs), tuple(attrs), tuple(o.name for o in outs)))
        return result

    def copy(self) -> Schedule:
        new = Schedule.__new__(Schedule)
        new.mod = self.mod
        new.original = self.original
        new.trace = Trace(list(self.trace.instructions))
        new._loops = dict(self._loops)
        new._blocks = dict(self._blocks)
        new._consumed = dict(self._consumed)
        new._counter = dict(self._counter)
        new._depth = 0
        new.rng = random.Random(self.rng.getrandbits(64))
        new._decision = None
        new.forced = list(self.forced)
        return new

    # -- handles ---------------------------------------------------------------------------
    def new_loop_rv(self, var: Var) -> LoopRV:
        rv = LoopRV(f"l{self._counter['l']}")
        self._counter["l"] += 1
        self._loops[rv] = var
        return rv

    def new_expr_rv(self, value: int) -> ExprRV:
        rv = ExprRV(value, f"v{self._counter['v']}")
        self._counter["v"] += 1
        return rv

    def forced_decision(self):
        """The next decision of `forced` (None when none is left): a program that samples (a
        sketch of ember.tune.space) re-run with the decisions of an earlier run, one changed."""
        return self.forced.pop(0) if self.forced else None

    def record_decision(self, decision) -> None:
        """What a sampling primitive chose; the trace stores it as the instruction's decision."""
        self._decision = decision

    def new_block_rv(self, name: str) -> BlockRV:
        rv = BlockRV(f"b{self._counter['b']}")
        self._counter["b"] += 1
        self._blocks[rv] = name
        return rv

    def loop_var(self, rv: LoopRV) -> Var:
        if not isinstance(rv, LoopRV):
            raise ScheduleError(f"expected a loop, got {rv!r}")
        var = self._loops.get(rv)
        if var is None:
            raise ScheduleError(f"loop handle {rv} does not belong to this schedule")
        return var

    def consume(self, var: Var, how: str) -> None:
        self._consumed[var] = how

    def get_for(self, rv: LoopRV) -> For:
        var = self.loop_var(rv)
        path = self.find_path(lambda s: isinstance(s, For) and s.loop_var is var)
        if path is None:
            how = self._consumed.get(var)
            why = f"it was consumed by {how}" if how else "it is no longer in the function"
            raise ScheduleError(f"loop {var.name} ({rv}) cannot be used: {why}")
        return path[-1]

    def block_name(self, rv: BlockRV) -> str:
        if not isinstance(rv, BlockRV):
            raise ScheduleError(f"expected a block, got {rv!r}")
        name = self._blocks.get(rv)
        if name is None:
            raise ScheduleError(f"block handle {rv} does not belong to this schedule")
        return name

    def get_realize(self, rv: BlockRV) -> BlockRealize:
        return self.block_path(rv)[-1]

    def block_path(self, rv: BlockRV) -> list[Stmt]:
        name = self.block_name(rv)
        path = self.find_path(lambda s: isinstance(s, BlockRealize) and s.block.name == name)
        if path is None:
            raise ScheduleError(f"block {name!r} ({rv}) is no longer in the function (inlined?)")
        return path

    def loops_of(self, rv: BlockRV) -> list[For]:
        return [s for s in self.block_path(rv) if isinstance(s, For)]

    # -- navigation and rewriting ----------------------------------------------------------
    def find_path(self, pred) -> list[Stmt] | None:
        """Ancestors (root first) of the first statement satisfying pred, ending with it."""
        stack: list[tuple[Stmt, int]] = [(self.mod.body, 0)]
        path: list[Stmt] = []
        while stack:
            node, depth = stack.pop()
            del path[depth:]
            path.append(node)
            if pred(node):
                return path
            for c in reversed(stmt_children(node)):
                stack.append((c, depth + 1))
        return None

    def root_block(self) -> Block:
        body = self.mod.body
        assert isinstance(body, BlockRealize)
        return body.block

    def replace(self, old: Stmt, new: Stmt) -> None:
        """Swap one statement (found by identity) for another."""
        self.mod = self.mod.with_body(replace_stmt(self.mod.body, old, new))

    def set_root(self, block: Block) -> None:
        body = self.mod.body
        assert isinstance(body, BlockRealize)
        self.mod = self.mod.with_body(replace(body, block=block))

    def all_realizes(self) -> list[BlockRealize]:
        """Every block, in the order the function runs them."""
        return collect(self.root_block().body, lambda s: isinstance(s, BlockRealize))


def replace_stmt(root: Stmt, old: Stmt, new: Stmt) -> Stmt:
    if root is old:
        return new
    return mutate_stmt(root, f_stmt=lambda s: new if s is old else None)


def _freeze(v):
    if isinstance(v, list | tuple):
        return tuple(_freeze(x) for x in v)
    return int(v) if isinstance(v, ExprRV) else v

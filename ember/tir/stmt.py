"""Statements of the loop IR, and the function that holds them.

The scheduled form is TensorIR's: loops (`For`) around **blocks**. A block computes one element
of one tensor: its iteration variables (`IterVar`, spatial or reduce) are bound by the
`BlockRealize` around it to expressions of the enclosing loop variables, and it declares the
regions it reads and writes. Schedules only move loops and rebind blocks; the block body is
never rewritten, which is what keeps each primitive easy to check.

Lowering (`tir.lower`) removes blocks: bindings are substituted into the body, reduction
`init`s become guarded or hoisted stores, and allocations are placed and shrunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .expr import Buffer, PrimExpr, Var, const, convert
from .expr_functor import visit_expr


class Stmt:
    """A statement; str() prints it (the printer, printer.py, attaches that)."""

    __slots__ = ()


@dataclass(frozen=True, eq=False)
class Range:
    min: PrimExpr
    extent: PrimExpr

    @staticmethod
    def from_extent(extent) -> Range:
        return Range(const(0), convert(extent))


def _on_var(name: str):
    """An IterVar's operator `name`: its variable's."""
    return lambda self, *args: getattr(self.var, name)(*args)


@dataclass(frozen=True, eq=False)
class IterVar:
    """A block iteration variable over `dom`; kind is "spatial" or "reduce".

    In an expression it stands for its variable (`A[i, k]`, `k + 1` with `k = te.reduce_axis(...)`),
    as TVM's IterVar does; `==` stays identity, so iteration variables work as dict keys."""

    var: Var
    dom: Range
    kind: str = "spatial"

    def as_prim_expr(self) -> Var:
        return self.var

    __add__, __radd__, __sub__, __rsub__ = map(_on_var, ("__add__", "__radd__", "__sub__", "__rsub__"))
    __mul__, __rmul__, __truediv__, __neg__ = map(_on_var, ("__mul__", "__rmul__", "__truediv__", "__neg__"))
    __floordiv__, __rfloordiv__, __mod__, __rmod__ = map(_on_var, ("__floordiv__", "__rfloordiv__", "__mod__",
                                                                   "__rmod__"))
    __lt__, __le__, __gt__, __ge__ = map(_on_var, ("__lt__", "__le__", "__gt__", "__ge__"))


@dataclass(frozen=True, eq=False)
class BufferRegion:
    buffer: Buffer
    region: tuple[Range, ...]


# A loop of kind "thread_binding" runs its iterations on GPU blocks or threads: its annotation
# "thread_tag" names which index it is (one of THREAD_TAGS). Two bound loops of one tag in a kernel
# are the same hardware index, as in TVM; the interpreter runs each thread (ember.cuda.simt).
THREAD_BINDING = "thread_binding"
BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
SYNC = "cuda.syncthreads"  # Evaluate(Call(SYNC)): a barrier of a GPU block's threads
THREAD_TAGS = (*BLOCK_TAGS, "threadIdx.x", "threadIdx.y", "threadIdx.z")


@dataclass(frozen=True, eq=False, repr=False)
class For(Stmt):
    loop_var: Var
    min: PrimExpr
    extent: PrimExpr
    kind: str
    body: Stmt
    annotations: tuple[tuple[str, object], ...] = ()

    def annotation(self, key, default=None):
        return dict(self.annotations).get(key, default)

    @property
    def thread_tag(self) -> str | None:
        """The GPU index a thread-bound loop runs over ("threadIdx.x"), else None."""
        return self.annotation("thread_tag") if self.kind == THREAD_BINDING else None

    def with_body(self, body: Stmt) -> For:
        return self if body is self.body else replace(self, body=body)


@dataclass(frozen=True, eq=False, repr=False)
class SeqStmt(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False, repr=False)
class BufferStore(Stmt):
    buffer: Buffer
    value: PrimExpr
    indices: tuple[PrimExpr, ...]


@dataclass(frozen=True, eq=False, repr=False)
class IfThenElse(Stmt):
    cond: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(frozen=True, eq=False, repr=False)
class While(Stmt):
    """`while cond: body`, the condition tested before each iteration (a tile kernel's spin
    lock); schedules and loop passes leave it as written."""

    cond: PrimExpr
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class Evaluate(Stmt):
    value: PrimExpr


@dataclass(frozen=True, eq=False, repr=False)
class Pointer:
    """The address of element `offset` (a flat, row-major offset) of `buffer`: an argument of a
    `CallRoutine`. `indices`: the same element as one index per dimension, where the call's maker
    knows them (tensorize does): a buffer of symbolic shape, whose offset cannot be split back into
    indices, is then still compacted around the call (ember.tir.intrin_regions)."""

    buffer: Buffer
    offset: PrimExpr
    indices: tuple[PrimExpr, ...] | None = None


@dataclass(frozen=True, eq=False, repr=False)
class CallRoutine(Stmt):
    """A call of a routine of the code generators (ember.codegen.routines): a micro-kernel that
    the loop IR cannot express well (fused attention's online softmax keeps running maxima and
    rescales its accumulators), written once per code generator. `params` are static (they pick
    a variant of the routine); `reads` and `writes` are the memory it touches, from the given
    addresses, with the strides among `scalars` (expressions: sizes, strides, offsets, scales).
    A loop of the IR around it (e.g. parallel over blocks) gives each call its part."""

    routine: str
    params: tuple[tuple[str, object], ...]
    reads: tuple[Pointer, ...]
    writes: tuple[Pointer, ...]
    scalars: tuple[PrimExpr, ...]


@dataclass(frozen=True, eq=False, repr=False)
class Allocate(Stmt):
    """Scratch memory for `buffer` (its shape already shrunk to what the body touches)."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class Block(Stmt):
    name: str
    iter_vars: tuple[IterVar, ...]
    reads: tuple[BufferRegion, ...]
    writes: tuple[BufferRegion, ...]
    body: Stmt
    init: Stmt | None = None
    alloc_buffers: tuple[Buffer, ...] = ()
    annotations: tuple[tuple[str, object], ...] = ()

    @property
    def is_reduction(self) -> bool:
        return any(iv.kind == "reduce" for iv in self.iter_vars)


@dataclass(frozen=True, eq=False, repr=False)
class BlockRealize(Stmt):
    iter_values: tuple[PrimExpr, ...]
    predicate: PrimExpr
    block: Block


@dataclass(frozen=True, eq=False, repr=False)
class PrimFunc:
    """A kernel: parameters (buffers, in call order) and a body.

    `body` is a BlockRealize of the root block, whose alloc_buffers are the intermediate tensors,
    until lowering flattens it into plain loops. `size_vars` are the symbolic sizes the kernel
    takes at run time, bound from the shapes of the arrays passed for `params`.
    """

    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    attrs: tuple[tuple[str, object], ...] = field(default=())

    @property
    def size_vars(self) -> tuple[Var, ...]:
        """Every variable of the parameter shapes (`n` of a dimension `n + 1` too), in order of
        first appearance: the run-time sizes of the kernel."""
        seen: dict[Var, None] = {}
        for buf in self.params:
            for d in buf.shape:
                visit_expr(d, lambda n: seen.setdefault(n) if isinstance(n, Var) else None)
        return tuple(seen)

    def attr(self, key, default=None):
        return dict(self.attrs).get(key, default)

    def with_body(self, body: Stmt) -> PrimFunc:
        return self if body is self.body else replace(self, body=body)



def seq(*stmts) -> Stmt:
    """A sequence, flattened, with a single statement returned as is."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))

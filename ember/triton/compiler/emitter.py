"""The Emitter: how a kernel's block operations become loop IR, behind one interface.

The frontend and the builtins say what a kernel computes (a block loaded, stored, reduced,
multiplied); an Emitter says how loops over blocks run on a machine. This base class keeps what
every machine shares: the statement lists being built, the kernel's local buffers, the masks of
the nest being built and the loads not yet read (Deferred). A subclass implements the rest: the
loop nests (`nest`, and `versioned` for masked nests), reductions and scans, `tl.dot`, the read
of a deferred load into memory, and the kernel's loop over its programs (`kernel`). vector.py is
the CPU's: SIMD loop nests under one OpenMP loop.

Local buffers are named `<hint><n>` with n counted per Emitter, that is per kernel: the code
generated for a kernel depends on the kernel alone, not on what the process compiled before.
"""

from __future__ import annotations

import contextlib
import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable

from ...tir.expr import Buffer, BufferLoad, PrimExpr, Var, const
from ...tir.stmt import Allocate, BufferStore, Stmt
from . import values as V

# a masked nest's body: body(index, full) -> its statement, `full` when built unmasked
Body = Callable[[tuple[PrimExpr, ...], bool], Stmt | None]


class Emitter(ABC):
    """Collects a kernel's statements and its local buffers; subclasses choose the loops."""

    scratch_scope = "local"  # the scope of `local`'s buffers

    def __init__(self, debug: bool):
        self.debug = debug
        self.lists: list[list[Stmt]] = [[]]
        self.allocs: list[Buffer] = []
        self.masks: list[PrimExpr] | None = None  # collected while a versioned nest is built
        self.full = False  # building the unmasked version of a versioned nest
        self.pending: list[Deferred] = []  # loads not yet read into memory
        self.tensors: set[Buffer] = set()  # the kernel's tensor arguments: memory others may write
        self.aligned: set[Buffer] = set()  # those whose address is 16-byte aligned (a GPU's specialization)
        self._names = itertools.count()

    # -- statements and buffers ----------------------------------------------------------------
    def emit(self, s: Stmt | None) -> None:
        if s is not None:
            self.lists[-1].append(s)

    @contextlib.contextmanager
    def capture(self):
        out: list[Stmt] = []
        self.lists.append(out)
        try:
            yield out
        finally:
            self.lists.pop()

    def name(self, hint: str) -> str:
        """A name for a buffer of this kernel, unique in it."""
        return f"{hint}{next(self._names)}"

    def local(self, hint: str, shape: tuple[int, ...], dtype: str) -> Buffer:
        """A buffer of the kernel's program (one per program), flat, of shape's size."""
        n = 1
        for d in shape:
            n *= d
        buf = Buffer(self.name(hint), (const(max(n, 1)),), dtype, scope=self.scratch_scope)
        self.allocs.append(buf)
        return buf

    def mask(self, m: PrimExpr) -> PrimExpr:
        """Record a mask of the nest being built (see versioned)."""
        if self.masks is not None:
            self.masks.append(m)
        return m

    # -- values in memory --------------------------------------------------------------------
    def materialize(self, v: V.Block, hint: str = "t") -> V.Block:
        """v kept in a local buffer (a Block reading it)."""
        if v.buffer is not None:
            return v
        buf = self.local(hint, v.shape, V.tir_dtype(v.dtype))
        self.store_block(buf, v)
        return buffer_block(buf, v.shape, v.dtype)

    def store_block(self, buf: Buffer, v: V.Block | V.Scalar, shape: tuple[int, ...] | None = None) -> None:
        shape = v.shape if shape is None else shape
        self.emit(self.nest(shape, lambda idx: BufferStore(buf, V.element(v, idx), (V.flat_index(shape, idx),)),
                            lanes=self.lanes(buf.dtype)))

    def allocated(self, body: Stmt) -> Stmt:
        """body inside the allocations of the kernel's local buffers (each program's own)."""
        for buf in reversed(self.allocs):
            body = Allocate(buf, body)
        return body

    def scalar(self, expr: PrimExpr, dtype, hint: str = "s") -> V.Scalar:
        """A scalar computed here, once (kept in a one-element local buffer)."""
        buf = self.local(hint, (), V.tir_dtype(dtype))
        self.emit(BufferStore(buf, expr, (const(0),)))
        return V.Scalar(BufferLoad(buf, (const(0),), buf.dtype), dtype)

    # -- what a machine implements -----------------------------------------------------------
    @abstractmethod
    def lanes(self, dtype: str) -> int:
        """How many elements of dtype one step of an innermost loop handles."""

    @abstractmethod
    def nest(self, shape: tuple[int, ...], body: Callable[[tuple[PrimExpr, ...]], Stmt | None], *,
             vector: bool = True, lanes: int = 16, inner: int | None = None) -> Stmt | None:
        """Loops over `shape` around body(index); the innermost runs over dimension `inner`
        (default: the last), in chunks of `lanes` when `vector`."""

    @abstractmethod
    def versioned(self, shape: tuple[int, ...], body: Body, lanes: int, inner: int | None = None,
                  fast_nest: Callable | None = None) -> None:
        """Emit the nest of body over shape, whose accesses may be masked (body's masks go
        through `mask`); `fast_nest()`: the unmasked nest, when it is not `nest`'s."""

    @abstractmethod
    def reduce(self, x: V.Block, axis: int, combine: Callable, init: PrimExpr, dtype) -> V.Block | V.Scalar:
        """x reduced along axis with combine(acc, value) from init; a Block of the other axes
        (a Scalar when none is left)."""

    @abstractmethod
    def arg_reduce(self, x: V.Block, axis: int, better: Callable, init: PrimExpr, index_dtype):
        """(the best value, its first index) along axis; better(a, b): a replaces b."""

    @abstractmethod
    def scan(self, x: V.Block, axis: int, combine: Callable, dtype, reverse: bool) -> V.Block:
        """The inclusive scan of x along axis (tl.cumsum, tl.cumprod)."""

    def barrier(self) -> None:  # noqa: B027 (a machine whose program is one thread needs none)
        """tl.debug_barrier: every thread of the program past this point before any goes on."""

    def dot_inputs(self, dtype, m: int, n: int, k: int, precision: str):
        """The type (ember.triton.language) in which `dot` takes operands of `dtype` for an
        (m, k) @ (k, n) product; None: c's type, to which they are converted (the default)."""
        return None

    @abstractmethod
    def dot(self, a: Buffer, b: Buffer, c: Buffer, m: int, n: int, k: int, precision: str = "ieee") -> None:
        """c[m, n] += a[m, k] @ b[k, n] (row-major local buffers of c's type, or of the type
        `dot_inputs` asked for); `precision`: Triton's input_precision, of float32 operands
        ("tf32": they may be rounded to TF32 first; "ieee", "tf32x3": not)."""

    @abstractmethod
    def read_in(self, d: Deferred) -> Buffer:
        """A local buffer holding the deferred load d, read now."""

    @abstractmethod
    def kernel(self, pid: Var, programs: PrimExpr) -> Stmt:
        """The kernel's body: every program `pid` in [0, programs) running what was emitted."""


class Deferred:
    """A block load read where it is consumed: inside a versioned nest (a store, another
    load) it is an access of the argument's memory, predicated like the nest; anywhere else
    (a reduction, tl.dot, a loop) it is first read into a local buffer, once. Before a
    statement that writes memory, the frontend reads in the deferred loads that values still
    use (`Frontend.flush`), so a load never sees a later store."""

    def __init__(self, em: Emitter, shape: tuple[int, ...], dtype: str, direct: Body, inner: int | None = None):
        self.em, self.shape, self.dtype, self.direct, self.inner = em, shape, dtype, direct, inner
        self.buffer: Buffer | None = None
        em.pending.append(self)

    def at(self, idx: tuple[PrimExpr, ...]) -> PrimExpr:
        if self.buffer is None and (self.em.masks is not None or self.em.full):
            return self.direct(idx, self.em.full)
        if self.buffer is None:
            self.read()
        return BufferLoad(self.buffer, (V.flat_index(self.shape, idx),), self.dtype)

    def read(self) -> None:
        if self.buffer is None:
            self.buffer = self.em.read_in(self)

    def into(self, buf: Buffer) -> Body:
        """The body of a nest reading the load into buf (its elements row-major): an Emitter's
        `read_in`."""
        return lambda idx, full: BufferStore(buf, self.direct(idx, full), (V.flat_index(self.shape, idx),))


def buffer_block(buf: Buffer, shape: tuple[int, ...], dtype) -> V.Block:
    return V.Block(shape, dtype, lambda idx: BufferLoad(buf, (V.flat_index(shape, idx),), buf.dtype), buffer=buf)


def buffer_value(buf: Buffer, shape: tuple[int, ...], dtype) -> V.Block | V.Scalar:
    """What `buf` holds: a block of `shape`, or the scalar in its one element when shape is ()."""
    return buffer_block(buf, shape, dtype) if shape else V.Scalar(BufferLoad(buf, (const(0),), buf.dtype), dtype)

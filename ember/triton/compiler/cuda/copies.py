"""Copies of a block read in from global memory: 16 bytes a thread at a time for a Tensor Core
dot's operands where they can be, each thread an element otherwise.

A load is read into a block (`read_in`: each thread its strided share of the elements, under its
masks). A block read in for a Tensor Core dot whose tensor is 16-byte aligned (the
specialization says so) and walked along the block's last dimension is copied 16 bytes a thread
at a time where a vector's offset allows and its masks hold, element by element elsewhere
(`_vector_read`); a dot's operand that only dots read has its rows padded by 16 bytes against
bank conflicts (`_vector_operands`).
"""

from __future__ import annotations

from dataclasses import replace

from ....tir import dtype as dt
from ....tir.arith import Analyzer
from ....tir.expr import Buffer, BufferLoad, Var, as_int, const
from ....tir.expr import binary as te_binary
from ....tir.expr_functor import substitute
from ....tir.functor import mutate_stmt, stmt_exprs, visit_expr, visit_stmt
from ....tir.stmt import BufferStore, CallRoutine, Evaluate, For, IfThenElse, Pointer, Stmt
from ....tir.structural import structural_key
from .. import values as V
from ..affine import all_true, drop_wraps, linear
from ..emitter import Deferred
from .dot import Dots
from .rewrite import replaced


def _padded(s: Stmt, buf: Buffer, into: Buffer, cols: int, pad: int) -> Stmt | None:
    """s reading or writing `into` where it read or wrote `buf` (rows of `cols`), whose rows are
    `cols + pad` apart: a store's index moved to its row's new start; a Tensor Core call's
    pointers too, and their row strides (the call's i-th scalar for its i-th pointer, as wmma's
    calls take lda and ldb, and the i-th pair of strides after them, which the interpreter reads)
    widened; None for any other statement."""
    if isinstance(s, BufferStore) and s.buffer is buf:
        i = s.indices[0]
        return BufferStore(into, s.value, (Analyzer().simplify(i + i // cols * pad),))
    if not isinstance(s, CallRoutine) or not any(q.buffer is buf for q in s.reads):
        return None
    reads, scalars = list(s.reads), list(s.scalars)
    first = dict(s.params)["c_scalars"]
    for i, q in enumerate(s.reads):
        if q.buffer is buf:
            reads[i] = Pointer(into, q.offset + q.offset // cols * pad)
            scalars[i] = scalars[first + 2 * i] = const(cols + pad)
    return replace(s, reads=tuple(reads), scalars=tuple(scalars))


class OperandCopies(Dots):
    """Blocks read in, and the rewrite of the kernel's body that copies a dot's operands 16 bytes
    at a time (the module doc)."""

    def __init__(self, debug: bool, num_warps: int):
        super().__init__(debug, num_warps)
        self._read_ins: dict[Buffer, tuple[Deferred, Stmt]] = {}  # each block read in: its load, its statement
        self._copied: dict[Buffer, Stmt] = {}  # each operand copied 16 bytes at a time: its statement (stages.py)
        self._swizzled: set[Buffer] = set()  # operands laid out swizzled instead of padded (ldmatrix.py)

    def read_in(self, d: Deferred) -> Buffer:
        buf = self.local("ld", d.shape, d.dtype)
        self.versioned(d.shape, d.into(buf), 1, d.inner)
        if self.lists[-1]:
            self._read_ins[buf] = (d, self.lists[-1][-1])
        return buf

    def _vector_operands(self, body: Stmt) -> Stmt:
        """body with each block read in for a Tensor Core dot copied 16 bytes at a time where it
        can be (`_vector_read`). An operand that only the dots read is padded too: 16 bytes after
        each row, its stores and the dots' pointers moved (`_padded`), so that the 8 rows of 16
        bytes a fragment load reads at once fall in different banks (rows of 64 or 256 bytes put
        4 or 8 of them in the same ones)."""
        cols: dict[Buffer, set[int]] = {}
        for a, b, _, _, n, k in self._dots:
            cols.setdefault(a, set()).add(k)
            cols.setdefault(b, set()).add(n)
        for buf, widths in cols.items():
            width = min(widths)
            pad = 128 // dt.bits(buf.dtype) if len(widths) == 1 and buf not in self._swizzled and \
                self._read_by_dots_alone(body, buf) else 0
            into = buf if not pad else Buffer(buf.name, (const(as_int(buf.shape[0]) // width * (width + pad)),),
                                              buf.dtype, scope=buf.scope)
            if buf in self._read_ins and (new := self._vector_read(buf, into, pad)) is not None:
                body = replaced(body, {self._read_ins[buf][1]: new})
                self._copied[into] = new
            if pad:
                body = mutate_stmt(body, f_stmt=lambda x, buf=buf, into=into, width=width, pad=pad: _padded(
                    x, buf, into, width, pad))
                self.allocs[self.allocs.index(buf)] = into
        return body

    def _read_by_dots_alone(self, body: Stmt, buf: Buffer) -> bool:
        """Whether only Tensor Core calls read buf (and none writes it): other statements only
        store to it."""
        found = []

        def on_stmt(x):
            if isinstance(x, CallRoutine) and any(q.buffer is buf for q in x.writes):
                found.append(x)
            if not isinstance(x, CallRoutine):
                for e in stmt_exprs(x):
                    visit_expr(e, lambda y: found.append(y) if isinstance(y, BufferLoad) and y.buffer is buf else None)

        visit_stmt(body, on_stmt)
        return not found

    def _vector_read(self, buf: Buffer, into: Buffer, pad: int) -> Stmt | None:
        """The read-in of `buf`, into `into` (its rows `pad` elements apart), with each thread
        copying 16 bytes at a time: consecutive threads
        take consecutive 16-byte vectors along its rows, and a vector whose masks all hold (one test at
        its worst lane where they are affine in it: affine.all_true) and
        whose offset is a multiple of the vector's elements is one 16-byte load and store (`uint4`,
        `float4`: ember.cuda.vectors), the others element by element under their masks. For a
        load whose argument is 16-byte aligned (the specialization says so) and walks memory
        along the block's last dimension (where its wraps `offs % N` are the identity:
        affine.drop_wraps); None otherwise."""
        d, _ = self._read_ins[buf]
        shape, lanes = d.shape, 128 // dt.bits(d.dtype)
        probe = tuple(Var(f"q{i}") for i in range(len(shape)))
        full = d.direct(probe, True)
        if d.inner not in (None, len(shape) - 1) or shape[-1] % lanes or not (
                isinstance(full, BufferLoad) and full.buffer in self.aligned and len(full.indices) == 1):
            return None
        last = probe[-1]
        g = drop_wraps(Evaluate(full), {last: shape[-1]})[0].value.indices[0]  # (`offs % N`: see below)
        if linear(g, {last: 1}) != {last: 1}:  # (the other dimensions' strides may be run-time values)
            return None
        total = 1
        for n in shape:
            total *= n
        vectors, per_row = total // lanes, shape[-1] // lanes
        steps = -(-vectors // self.threads)
        v, j = Var("v"), Var("j")

        def share(t):
            q = t if steps == 1 else j * self.threads + t
            outer, rest = [], q // per_row
            for k, n in enumerate(reversed(shape[:-1])):
                outer.insert(0, rest if k == len(shape) - 2 else rest % n)
                rest = rest // n
            idx = (*outer, q % per_row * lanes + v)
            at = (V.flat_index(shape, idx) if not pad else idx[0] * (shape[1] + pad) + idx[1],)
            saved, self.masks = self.masks, []
            try:
                masked, masks = d.direct(idx, False), self.masks
            finally:
                self.masks = saved
            # Triton's matmul wraps its offsets (`offs % N`) where a vector inside the matrix is contiguous
            unwrapped, inside = drop_wraps(Evaluate(d.direct(idx, True)), {v: lanes})
            g = unwrapped.value.indices[0]
            base = Analyzer().simplify(substitute(g, {v: const(0, v.dtype)}))
            guard = te_binary("==", base % lanes, const(0, base.dtype))
            if inside is not None:
                guard = te_binary("&&", guard, inside)
            # masks affine in the lane hold at all lanes where they hold at the worst one (the tutorial's
            # `offs_k < K - k * BK`: one test, not one a lane); else each distinct lane's mask is tested
            corner = all_true(masks, {v: lanes}) if masks else None
            held = [corner] if corner is not None else {structural_key(x): x for m in masks for x in (
                substitute(m, {v: const(i, v.dtype)}) for i in range(lanes))}.values()
            for m in held:
                guard = te_binary("&&", guard, m)
            vector = BufferStore(into, BufferLoad(full.buffer, (base // lanes * lanes + v,), full.dtype), at)
            s = IfThenElse(guard, For(v, const(0), const(lanes), "vectorized", vector),
                           For(v, const(0), const(lanes), "unrolled", BufferStore(into, masked, at)))
            if vectors % self.threads:
                s = IfThenElse(te_binary("<", q, const(vectors)), s)
            return s if steps == 1 else For(j, const(0), const(steps), "serial", s)

        return self.on_threads(min(vectors, self.threads), share)

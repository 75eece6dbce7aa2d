"""The loop-IR verifier: what the lowering passes and code generation rely on, checked over a
whole function. `lower` runs it on its input and after every pass in debug mode (EMBER_DEBUG=1),
naming the pass at fault, as the graph pipeline does with ember.graph.verify.

- Every variable is defined where it is used: a loop's variable inside its loop, a block's
  iteration variables inside the block, the size variables of the parameters' shapes anywhere.
- Every buffer accessed is declared: a parameter, or allocated by an enclosing block or Allocate.
- Dtypes agree: a load has its buffer's element type and a store stores it, both operands of a
  binary operation and both arms of a select have one element type, indices and loop bounds are
  integers, conditions are booleans.
"""

from __future__ import annotations

from ..errors import LowerError
from . import dtype as dt
from .expr import Binary, BufferLoad, PrimExpr, Select, Var
from .functor import free_vars, visit_expr
from .stmt import (
    Allocate,
    Block,
    BlockRealize,
    BufferStore,
    CallRoutine,
    Evaluate,
    For,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
    While,
)


def verify(func: PrimFunc, after: str = "") -> None:
    """Raise LowerError listing what is wrong with `func` (`after`: the pass that made it)."""
    found = problems(func)
    if found:
        head = f"after {after}: " if after else ""
        raise LowerError(f"{head}kernel {func.name}: {len(found)} problem(s):\n  " + "\n  ".join(found))


def problems(func: PrimFunc) -> list[str]:
    """What is wrong with `func`, one line each (empty: nothing)."""
    checker = _Checker()
    for b in func.params:
        checker.buffers.add(b)
        for d in b.shape:
            checker.vars |= free_vars(d)
    checker.stmt(func.body)
    return checker.found


class _Checker:
    def __init__(self):
        self.vars: set[Var] = set()
        self.buffers: set = set()
        self.found: list[str] = []

    def _problem(self, text: str) -> None:
        if text not in self.found:
            self.found.append(text)

    # -- expressions -----------------------------------------------------------------------
    def expr(self, e: PrimExpr, where: str) -> None:
        def on(n):
            if isinstance(n, Var) and n not in self.vars:
                self._problem(f"{where}: variable {n.name} is used where it is not defined")
            elif isinstance(n, BufferLoad):
                self._buffer(n.buffer, where)
                if dt.element_of(n.dtype) != dt.element_of(n.buffer.dtype):
                    self._problem(f"{where}: a load of {n.buffer.name} ({n.buffer.dtype}) has dtype {n.dtype}")
                self._indices(n.indices, n.buffer, where)
            elif isinstance(n, Binary) and dt.element_of(n.a.dtype) != dt.element_of(n.b.dtype):
                self._problem(f"{where}: operands of `{n.op}` have dtypes {n.a.dtype} and {n.b.dtype}")
            elif isinstance(n, Select) and dt.element_of(n.t.dtype) != dt.element_of(n.f.dtype):
                self._problem(f"{where}: arms of a select have dtypes {n.t.dtype} and {n.f.dtype}")

        visit_expr(e, on)

    def _integer(self, e: PrimExpr, what: str, where: str) -> None:
        self.expr(e, where)
        if not dt.is_int(e.dtype):
            self._problem(f"{where}: {what} {e} is {e.dtype}, not an integer")

    def _condition(self, e: PrimExpr, where: str) -> None:
        self.expr(e, where)
        if not dt.is_bool(e.dtype):
            self._problem(f"{where}: condition {e} is {e.dtype}, not bool")

    def _indices(self, indices, buf, where: str) -> None:
        if len(indices) != buf.ndim and len(indices) != 1:  # one flat index after `flatten`
            self._problem(f"{where}: {buf.name} has {buf.ndim} dimensions, accessed with {len(indices)} indices")
        for i in indices:
            if not dt.is_int(i.dtype):
                self._problem(f"{where}: index {i} of {buf.name} is {i.dtype}, not an integer")

    def _buffer(self, buf, where: str) -> None:
        if buf not in self.buffers:
            self._problem(f"{where}: buffer {buf.name} is neither a parameter nor allocated around its use")

    # -- statements ------------------------------------------------------------------------
    def stmt(self, s: Stmt | None) -> None:
        match s:
            case None:
                return
            case SeqStmt(stmts):
                for x in stmts:
                    self.stmt(x)
            case For(var, lo, extent, _, body):
                where = f"loop {var.name}"
                self._integer(lo, "start", where)
                self._integer(extent, "extent", where)
                self._scoped(body, vars_=(var,))
            case BufferStore(buf, value, indices):
                where = f"store to {buf.name}"
                self._buffer(buf, where)
                self.expr(value, where)
                for i in indices:
                    self.expr(i, where)
                self._indices(indices, buf, where)
                if dt.element_of(value.dtype) != dt.element_of(buf.dtype):
                    self._problem(f"{where}: stores a {value.dtype} value into a {buf.dtype} buffer")
            case IfThenElse(cond, then_case, else_case):
                self._condition(cond, "if")
                self.stmt(then_case)
                self.stmt(else_case)
            case While(cond, body):
                self._condition(cond, "while")
                self.stmt(body)
            case Evaluate(value):
                self.expr(value, "evaluate")
            case CallRoutine(routine, _, reads, writes, scalars):
                where = f"call of routine {routine}"
                for p in reads + writes:
                    self._buffer(p.buffer, where)
                    self.expr(p.offset, where)
                    self._integer(p.offset, f"offset into {p.buffer.name}", where)
                for x in scalars:
                    self.expr(x, where)
            case Allocate():
                self._scoped(s.body, buffers=(s.buffer,))
            case BlockRealize(values, predicate, block):
                where = f"block {block.name}"
                for v in values:
                    self.expr(v, where)
                self._condition(predicate, where)
                if len(values) != len(block.iter_vars) and values:
                    self._problem(f"{where}: {len(block.iter_vars)} iteration variables bound to {len(values)} values")
                self.stmt(block)
            case Block():
                self._block(s)
            case _:
                self._problem(f"unknown statement {type(s).__name__}")

    def _block(self, block: Block) -> None:
        where = f"block {block.name}"
        for iv in block.iter_vars:
            self._integer(iv.dom.min, "domain start", where)
            self._integer(iv.dom.extent, "domain extent", where)
        saved = set(self.vars), set(self.buffers)
        self.vars |= {iv.var for iv in block.iter_vars}
        self.buffers |= set(block.alloc_buffers)
        for region in (*block.reads, *block.writes):  # their buffers may be the ones compact_buffers replaced
            for r in region.region:
                self.expr(r.min, where)
                self.expr(r.extent, where)
        self.stmt(block.init)
        self.stmt(block.body)
        self.vars, self.buffers = saved

    def _scoped(self, body: Stmt, vars_=(), buffers=()) -> None:
        saved = set(self.vars), set(self.buffers)
        self.vars |= set(vars_)
        self.buffers |= set(buffers)
        self.stmt(body)
        self.vars, self.buffers = saved

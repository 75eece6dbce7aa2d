"""Statements: assignments (a costly block or a computed scalar kept in memory, so that its uses
read it), `if` on a constexpr condition evaluated in Python, on a run-time scalar an `if` of the
loop IR whose branches' assignments merge through local buffers, `assert`, and the early-return
idiom `if c: return` (the rest of the body its `else`)."""

from __future__ import annotations

import ast

from ....errors import TileError
from ....tir.expr import BufferLoad, Const, Var
from ....tir.stmt import IfThenElse, seq
from ...language import dtypes as tld
from .. import ops
from .. import values as V
from ..emitter import buffer_value
from .expressions import BINOPS
from .walker import Return, Walker, no_return


class Statements(Walker):
    """block, stmt, assign and if_ (the module doc); loops are loops.py's, expressions
    expressions.py's."""

    def block(self, stmts: list[ast.stmt]) -> None:
        for i, s in enumerate(stmts):
            self.node = s
            last = i == len(stmts) - 1
            if _returns_early(s) and not last:
                # `if c: ...; return` then the rest: the rest is the `else` of that if
                rest = [*s.orelse, *stmts[i + 1:]]
                s = ast.copy_location(ast.If(test=s.test, body=s.body[:-1] or [ast.Pass()], orelse=rest), s)
                last = True
            if isinstance(s, ast.Return) and s.value is None and last:
                return  # nothing follows it
            if isinstance(s, ast.Return):
                value = None if s.value is None else self.expr(s.value)
                if i != len(stmts) - 1:
                    raise self.error("an early `return` is not supported by the compiler: return at the end "
                                     "of the function, or guard the rest with `if`")
                raise Return(value)
            try:
                self.stmt(s)
                if last:
                    return
            except (TileError, Return):
                raise
            except V.TileTypeError as e:
                self.node = s if self.node is None else self.node
                raise self.error(str(e)) from None
            except Exception as e:  # noqa: BLE001 - any failure is reported with the kernel's line
                raise self.error(f"{type(e).__name__}: {e}") from e

    def stmt(self, s: ast.stmt) -> None:
        match s:
            case ast.Expr(value=v):
                if isinstance(v, ast.Constant) and isinstance(v.value, str):
                    return  # a docstring
                self.expr(v)
            case ast.Assign(targets=targets, value=v):
                value = self.expr(v)
                for t in targets:
                    self.assign(t, value)
            case ast.AnnAssign(target=t, value=v) if v is not None:
                self.assign(t, self.expr(v))
            case ast.AugAssign(target=t, op=op, value=v):
                self.assign(t, self.binop(BINOPS[type(op)], self.expr(t), self.expr(v)))
            case ast.If():
                self.if_(s)
            case ast.For():
                self.for_(s)
            case ast.While():
                self.while_(s)
            case ast.Pass():
                pass
            case ast.Assert(test=test, msg=msg):
                cond = self.expr(test)
                if V.is_runtime(cond):
                    self.builtins.device_assert(cond, "" if msg is None else self.expr(msg))
                elif not cond:
                    raise self.error(f"assertion failed: {'' if msg is None else self.expr(msg)}")
            case ast.Return():
                raise self.error("`return` inside a loop or a branch is not supported by the compiler")
            case _:
                raise self.error(f"{type(s).__name__} statements are not supported by the compiler")

    def assign(self, target: ast.expr, value) -> None:
        match target:
            case ast.Name(id=name):
                if isinstance(value, V.Block) and value.buffer is None and value.cost >= 8 \
                        and not value.dtype.is_pointer:
                    value = self.em.materialize(value, name[:8])  # computed once, read by each use
                elif isinstance(value, V.Scalar) and not isinstance(value.expr, Const | Var | BufferLoad):
                    # a named scalar (pid_m, an offset) is computed once, not in every loop that reads it
                    value = V.Scalar(self.em.scalar(value.expr, value.dtype, name[:8]).expr, value.dtype,
                                     value.base)
                self.env[name] = value
            case ast.Tuple(elts=elts) | ast.List(elts=elts):
                if not isinstance(value, tuple | list) or len(value) != len(elts):
                    raise self.error(f"cannot unpack {type(value).__name__} into {len(elts)} names")
                for t, v in zip(elts, value):
                    self.assign(t, v)
            case _:
                raise self.error(f"assignment to {type(target).__name__} is not supported by the compiler")

    def if_(self, s: ast.If) -> None:
        cond = self.expr(s.test)
        if not V.is_runtime(cond):
            self.block(s.body if cond else s.orelse)
            return
        if cond.shape:
            raise self.error("`if` on a block: use tl.where, or a mask")
        test = V.convert(cond.expr, cond.dtype, tld.int1)
        self.flush()
        before = dict(self.env)
        with self.em.capture() as then_stmts, no_return(self):
            self.block(s.body)
        then_env = dict(self.env)
        self.env.clear()
        self.env.update(before)
        with self.em.capture() as else_stmts, no_return(self):
            self.block(s.orelse)
        else_env = dict(self.env)
        merged = dict(else_env)
        # in order of definition, not of a set of names: a str's hash differs between processes
        changed = [k for k in dict.fromkeys([*then_env, *else_env])
                   if then_env.get(k, _MISSING) is not else_env.get(k, _MISSING)]
        for name in changed:
            a, b = then_env.get(name, _MISSING), else_env.get(name, _MISSING)
            if a is _MISSING or b is _MISSING:
                merged.pop(name, None)  # defined on one side only: not usable after the if
                continue
            if not V.is_runtime(a) and not V.is_runtime(b) and a == b:
                continue
            a, b = runtime_value(a), runtime_value(b)
            dtype = V.promote(a.dtype, b.dtype) if a.dtype != b.dtype else a.dtype
            shape = V.broadcast_shapes(a.shape, b.shape)
            buf = self.em.local(name[:8], shape, V.tir_dtype(dtype))
            for side, stmts in ((a, then_stmts), (b, else_stmts)):
                with self.em.capture() as extra:
                    self.em.store_block(buf, ops.cast_to(side, dtype), shape)
                stmts.extend(extra)
            merged[name] = buffer_value(buf, shape, dtype)
        self.env.clear()
        self.env.update(merged)
        self.em.emit(IfThenElse(test, seq(*then_stmts) if then_stmts else seq(),
                                seq(*else_stmts) if else_stmts else None))


_MISSING = object()


def runtime_value(v):
    """v as a value that may change at run time: a number as a Scalar."""
    if V.is_runtime(v):
        return v
    if isinstance(v, int | float | bool):
        return V.as_scalar(v)
    raise V.TileTypeError(f"{v!r} cannot change at run time (only numbers and blocks can)")


def _returns_early(s: ast.stmt) -> bool:
    """An `if` whose body ends with a bare `return` and whose `else` does not return."""
    return (isinstance(s, ast.If) and isinstance(s.body[-1], ast.Return) and s.body[-1].value is None
            and not any(isinstance(x, ast.Return) for x in s.orelse))

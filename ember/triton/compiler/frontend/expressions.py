"""Expressions: Python values evaluated in Python as the walk meets them (constants, names, calls
of plain Python functions on constants), run-time values through ops.py's typed arithmetic, a
`tl.<name>` call through the builtins, a call of a @jit function inlined."""

from __future__ import annotations

import ast
import builtins as py

from ....errors import TileError
from ...function import KernelFunction
from ...language import core as tlcore
from ...language import dtypes as tld
from ...language.dtypes import unwrap
from .. import ops
from .. import values as V
from .walker import Walker

BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
           ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
           ast.Pow: "**"}

_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}

_UNOPS = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~", ast.Not: "not"}


class Expressions(Walker):
    """expr and what it dispatches to (the module doc)."""

    def expr(self, e: ast.expr):
        match e:
            case ast.Constant(value=v):
                return v
            case ast.Name(id=name):
                return self.lookup(name)
            case ast.Attribute(value=obj, attr=attr):
                return self.attribute(self.expr(obj), attr)
            case ast.Call():
                return self.call(e)
            case ast.BinOp(left=a, op=op, right=b):
                return self.binop(BINOPS[type(op)], self.expr(a), self.expr(b))
            case ast.UnaryOp(op=op, operand=a):
                return self.unop(_UNOPS[type(op)], self.expr(a))
            case ast.Compare(left=a, ops=cops, comparators=rest):
                left = self.expr(a)
                out = None
                for op, r in zip(cops, rest):
                    right = self.expr(r)
                    if type(op) in (ast.Is, ast.IsNot, ast.In, ast.NotIn):
                        res = _py_compare(op, left, right)
                    else:
                        res = self.binop(_CMPOPS[type(op)], left, right)
                    out = res if out is None else self.binop("&", out, res)
                    left = right
                return out
            case ast.BoolOp(op=op, values=vals):
                return self.boolop(isinstance(op, ast.And), vals)
            case ast.IfExp(test=t, body=b, orelse=o):
                c = self.expr(t)
                if not V.is_runtime(c):
                    return self.expr(b) if c else self.expr(o)
                return ops.where(c, self.expr(b), self.expr(o))
            case ast.Subscript(value=v, slice=sl):
                return self.subscript(self.expr(v), sl)
            case ast.Tuple(elts=elts):
                return tuple(self.expr(x) for x in elts)
            case ast.List(elts=elts):
                return [self.expr(x) for x in elts]
            case ast.JoinedStr():
                return "".join(str(self.expr(x.value)) if isinstance(x, ast.FormattedValue) else x.value
                               for x in e.values)
        raise self.error(f"{type(e).__name__} expressions are not supported by the compiler")

    def lookup(self, name: str):
        if name in self.env:
            return self.env[name]
        g = self.frames[-1].fn.__globals__
        if name in g:
            return unwrap(g[name])
        if hasattr(py, name):
            return getattr(py, name)
        raise self.error(f"name {name!r} is not defined")

    def attribute(self, obj, attr: str):
        if V.is_runtime(obj):
            return self.builtins.method(obj, attr)
        try:
            return unwrap(getattr(obj, attr))
        except AttributeError:
            raise self.error(f"{obj!r} has no attribute {attr!r}") from None

    def call(self, e: ast.Call):
        fn = self.expr(e.func)
        args = []
        for a in e.args:
            if isinstance(a, ast.Starred):
                args.extend(self.expr(a.value))
            else:
                args.append(self.expr(a))
        kwargs = {k.arg: self.expr(k.value) for k in e.keywords}
        name = getattr(fn, "__triton_builtin__", None)
        if name is not None:
            return self.builtins.call(name, fn, args, kwargs)
        if isinstance(fn, KernelFunction):
            return self.inline(fn, tuple(args), kwargs)
        if fn is tld.constexpr:
            return unwrap(args[0])
        if isinstance(fn, tld.dtype):
            raise self.error("dtype objects are not callable")
        if any(V.is_runtime(a) for a in [*args, *kwargs.values()]):
            if fn is py.print:
                return self.builtins.call("device_print", tlcore.device_print,
                                          ["" if not args or V.is_runtime(args[0]) else args[0],
                                           *[a for a in args if V.is_runtime(a)]], {})
            if fn in (py.min, py.max) and len(args) == 2:
                return ops.minmax("min" if fn is py.min else "max", args[0], args[1])
            if fn in (py.float, py.int, py.bool):
                return ops.cast_to(args[0], {py.float: tld.float32, py.int: tld.int32, py.bool: tld.int1}[fn])
            raise self.error(f"{getattr(fn, '__name__', fn)!r} is a Python function: it can only take constants, "
                             f"not run-time values (make it a @triton.jit function)")
        if fn is py.breakpoint:
            return None
        try:
            return unwrap(fn(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in kwargs.items()}))
        except TileError:
            raise
        except Exception as e2:
            raise self.error(f"{getattr(fn, '__name__', fn)}(...) raised {type(e2).__name__}: {e2}") from None

    def binop(self, op: str, a, b):
        return ops.binary(op, a, b)

    def unop(self, op: str, a):
        if not V.is_runtime(a):
            return {"-": lambda x: -x, "+": lambda x: +x, "~": lambda x: ~x, "not": lambda x: not x}[op](a)
        return ops.unary(op, a)

    def boolop(self, is_and: bool, vals: list[ast.expr]):
        out = None
        for node in vals:
            v = self.expr(node)
            if out is None:
                out = v
            elif not V.is_runtime(out) and not V.is_runtime(v):
                out = (out and v) if is_and else (out or v)
            else:
                out = ops.binary("&" if is_and else "|", ops.cast_to(out, tld.int1) if V.is_runtime(out) else bool(out),
                                 ops.cast_to(v, tld.int1) if V.is_runtime(v) else bool(v))
            if not V.is_runtime(out) and (not out if is_and else out):
                return out  # short-circuit on a constant
        return out

    def subscript(self, v, sl: ast.expr):
        if not V.is_runtime(v):
            index = self.expr(sl)
            return unwrap(v[index])
        items = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        return self.builtins.index(v, [self._slice_item(x) for x in items])

    def _slice_item(self, x: ast.expr):
        if isinstance(x, ast.Slice):
            if x.lower or x.upper or x.step:
                raise self.error("slices of blocks are `:` (whole dimension) or None (a new one)")
            return slice(None)
        v = self.expr(x)
        if v is None:
            return None
        raise self.error("a block is indexed with `:` and None only")


def _py_compare(op, a, b):
    if isinstance(op, ast.Is):
        return a is b
    if isinstance(op, ast.IsNot):
        return a is not b
    if isinstance(op, ast.In):
        return a in b
    return a not in b

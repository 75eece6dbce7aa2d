"""The kernel's Python AST walked into loop IR, one program's worth (the grid loop is launch's).

Python values are evaluated in Python as the walk meets them (constexpr parameters, `if` on
constexpr conditions, `tl.static_range` loops unrolled, calls of plain Python functions on
constants); run-time values are the compile-time values of values.py. A nested @jit function is
inlined (its parameters bound to the call's values, its final `return` the call's value).
`for` over `range`/`tl.range` is a loop of the loop IR, whose bounds may be run-time scalars; a
name the body reassigns that lives before the loop is loop-carried: kept in a local buffer,
written back at the end of each iteration. `if` on a run-time scalar is an `if` of the loop IR;
a name either branch assigns is merged through a local buffer. `while` on a run-time condition
is a loop of the loop IR that tests the condition before each iteration. Anything else is a
TileError naming the kernel's file and line.
"""

from __future__ import annotations

import ast
import builtins as py
import contextlib
import inspect
from dataclasses import dataclass

from ...errors import TileError
from ...tir.arith import Analyzer
from ...tir.expr import BufferLoad, Const, Var, cast, const
from ...tir.functor import uses_var, visit_expr
from ...tir.stmt import BufferStore, For, IfThenElse, While, seq
from ...tir.structural import structural_equal
from ..function import KernelFunction
from ..language import core as tlcore
from ..language import dtypes as tld
from ..language.dtypes import unwrap
from . import ops
from . import values as V
from .emitter import Emitter, buffer_block, buffer_value

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
           ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
           ast.Pow: "**"}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_UNOPS = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~", ast.Not: "not"}


class _Return(Exception):
    def __init__(self, value):
        self.value = value


@dataclass
class Frame:
    """One function being walked: its source (for error lines), globals and variables."""

    fn: KernelFunction
    env: dict


class Frontend:
    def __init__(self, emitter: Emitter, builtins):
        self.em = emitter
        self.builtins = builtins
        self.frames: list[Frame] = []
        self.node: ast.AST | None = None
        self.carried: set = set()  # buffers of loop-carried values (tl.dot may accumulate in place)

    # -- errors ----------------------------------------------------------------------------------
    def where(self) -> str:
        if not self.frames or self.node is None or not hasattr(self.node, "lineno"):
            return "the kernel"
        fn = self.frames[-1].fn
        line = fn.starting_line_number + self.node.lineno - 1
        text = fn.src.splitlines()[self.node.lineno - 1].strip() if self.node.lineno <= len(fn.src.splitlines()) else ""
        return f"{fn.file}:{line} (in {fn.__name__}): {text}"

    def error(self, msg: str) -> TileError:
        return TileError(f"{self.where()}\n  {msg}")

    # -- functions ----------------------------------------------------------------------------------
    def run(self, fn: KernelFunction, args: dict) -> object:
        """Walk fn's body with its parameters bound to args; the returned value."""
        tree = ast.parse(fn.src)
        fdef = tree.body[0]
        if not isinstance(fdef, ast.FunctionDef):
            raise TileError(f"{fn.file}: {fn.__name__} is not a function definition")
        self.frames.append(Frame(fn, dict(args)))
        try:
            self.block(fdef.body)
        except _Return as r:
            return r.value
        finally:
            self.frames.pop()
        return None

    def inline(self, fn: KernelFunction, args: tuple, kwargs: dict):
        try:
            bound = fn.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise self.error(f"call of {fn.__name__}: {e}") from None
        bound.apply_defaults()
        values = {k: unwrap(v) for k, v in bound.arguments.items()}
        saved = self.node
        try:
            return self.run(fn, values)
        finally:
            self.node = saved

    def flush(self) -> None:
        """Read in the deferred loads that values still in use read (emitter.Deferred): a
        statement that writes memory follows."""
        live: set = set()

        def visit(v):
            if isinstance(v, V.Block):
                live.update(v.deps)
            elif isinstance(v, tuple | list):
                for x in v:
                    visit(x)

        for frame in self.frames:
            for v in frame.env.values():
                visit(v)
        for d in self.em.pending:
            if d.buffer is None and d in live:
                d.read()
        self.em.pending = []

    # -- statements ------------------------------------------------------------------------------
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
                raise _Return(value)
            try:
                self.stmt(s)
                if last:
                    return
            except (TileError, _Return):
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
                self.assign(t, self.binop(_BINOPS[type(op)], self.expr(t), self.expr(v)))
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

    @property
    def env(self) -> dict:
        return self.frames[-1].env

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
        with self.em.capture() as then_stmts, _no_return(self):
            self.block(s.body)
        then_env = dict(self.env)
        self.env.clear()
        self.env.update(before)
        with self.em.capture() as else_stmts, _no_return(self):
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
            a, b = _runtime(a), _runtime(b)
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

    def _loop_range(self, it: ast.expr):
        if not (isinstance(it, ast.Call)):
            raise self.error("a kernel loops over range(...), tl.range(...) or tl.static_range(...)")
        fn = self.expr(it.func)
        args = [self.expr(a) for a in it.args]
        kwargs = {k.arg: self.expr(k.value) for k in it.keywords}
        if fn is py.range:
            r = tlcore.range(*args)
            return r, False
        if inspect.isclass(fn) and issubclass(fn, tlcore.range):
            return fn(*args, **kwargs), fn is tlcore.static_range or issubclass(fn, tlcore.static_range)
        raise self.error("a kernel loops over range(...), tl.range(...) or tl.static_range(...)")

    def for_(self, s: ast.For) -> None:
        if s.orelse:
            raise self.error("`for ... else` is not supported by the compiler")
        r, static = self._loop_range(s.iter)
        start, end, step = (unwrap(x) for x in (r.start, r.end, r.step))
        if static:
            if not all(isinstance(x, int) for x in (start, end, step)):
                raise self.error("tl.static_range needs constexpr bounds")
            for i in py.range(start, end, step):
                self.assign(s.target, i)
                self.block(s.body)
            return
        if not isinstance(s.target, ast.Name):
            raise self.error("a loop variable is one name")
        if isinstance(step, int) and step == 0:
            raise self.error("a loop step of 0")
        typed = [V.as_scalar(x) if not V.is_runtime(x) else x for x in (start, end, step)]
        if any(t.shape or not t.dtype.is_int() for t in typed):
            raise self.error("loop bounds are integer scalars")
        idx_dtype = tld.int64 if any(t.dtype == tld.int64 for t in typed) else tld.int32
        lo, hi, st = (cast("int64", t.expr) for t in typed)
        if isinstance(step, int) and step > 0:
            count = (hi - lo + (step - 1)) // step
        elif isinstance(step, int):
            count = (lo - hi + (-step - 1)) // (-step)
        else:
            raise self.error("a run-time loop step: give the step as a constexpr")
        self.flush()
        carried = self._carried(s, s.target.id)
        # pointer blocks are first tried as their value before the loop plus a stepped offset
        stepping = {n for n in carried if isinstance(self.env[n], V.Block) and self.env[n].dtype.is_pointer
                    and self.env[n].buffer is None and not self.env[n].deps}
        k = Var("k")
        env, emitted = dict(self.env), len(self.em.lists[-1])
        while True:
            try:
                bufs = self._enter_carried(carried, stepping)
                with self.em.capture() as body, _no_return(self):
                    i = lo + k * st
                    self.env[s.target.id] = V.Scalar(cast(V.tir_dtype(idx_dtype), i)
                                                     if idx_dtype != tld.int64 else i, idx_dtype)
                    self.block(s.body)
                    self._write_back(carried, bufs)
                break
            except _NotStepped as e:  # its update is not a step: kept in memory instead
                stepping.discard(e.name)
                self.env.clear()
                self.env.update(env)
                del self.em.lists[-1][emitted:]
        self.em.emit(For(k, const(0), _max0(count), "serial", seq(*body)))
        self._after_loop(s, carried, bufs)

    def while_(self, s: ast.While) -> None:
        if s.orelse:
            raise self.error("`while ... else` is not supported by the compiler")
        self.flush()
        carried = self._carried(s, None)
        bufs = self._enter_carried(carried)
        with self.em.capture() as pre:
            cond = self.expr(s.test)
        if not V.is_runtime(cond):
            if cond:
                raise self.error("`while` on a constant true condition never ends")
            self._after_loop(s, carried, bufs)
            return
        test = self.em.local("w", (), "bool")
        with self.em.capture() as body, _no_return(self):
            self.block(s.body)
            self._write_back(carried, bufs)
            again = self.expr(s.test)
            self.em.emit(BufferStore(test, V.convert(again.expr, again.dtype, tld.int1), (const(0),)))
        self.em.lists[-1].extend(pre)
        self.em.emit(BufferStore(test, V.convert(cond.expr, cond.dtype, tld.int1), (const(0),)))
        self.em.emit(While(BufferLoad(test, (const(0),), "bool"), seq(*body)))
        self._after_loop(s, carried, bufs)

    @staticmethod
    def _assigned(s) -> set[str]:
        nodes = [*s.body, s.target] if isinstance(s, ast.For) else s.body
        return {node.id for node in ast.walk(ast.Module(body=nodes, type_ignores=[]))
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}

    def _carried(self, s, target: str | None) -> list[str]:
        assigned = self._assigned(s)
        return sorted(n for n in assigned if n in self.env and n != target
                      and (V.is_runtime(self.env[n]) or type(self.env[n]) in (int, float)))

    def _enter_carried(self, carried: list[str], stepping: set[str] = frozenset()) -> dict:
        bufs = {}
        for name in carried:
            v = _runtime(self.env[name])
            if name in stepping:
                step = self.em.local(name[:8], (), "int64")
                self.em.emit(BufferStore(step, const(0), (const(0),)))
                bufs[name] = (step, "step", v, v.base)
                self.env[name] = _stepped(v, step)
                continue
            if isinstance(v, V.BlockPtr):  # its offsets change
                buf = self.em.local(name[:8], (len(v.offsets),), "int64")
                for d, o in enumerate(v.offsets):
                    self.em.emit(BufferStore(buf, o, (const(d),)))
                bufs[name] = (buf, None, v, None)
                self.env[name] = _read_block_ptr(buf, v)
                continue
            if v.dtype.is_pointer:
                buf = self.em.local(name[:8], v.shape, "int64")
                self.em.store_block(buf, _offsets(v), v.shape)
            else:
                buf = self.em.local(name[:8], v.shape, V.tir_dtype(v.dtype))
                self.em.store_block(buf, v, v.shape)
            self.carried.add(buf)
            bufs[name] = (buf, v.shape, v.dtype, v.base)
            self.env[name] = _read(buf, v.shape, v.dtype, v.base)
        return bufs

    def _write_back(self, carried: list[str], bufs: dict) -> None:
        """Store the carried names' new values into their buffers: a value that reads its own
        buffer only at the element it replaces (acc = acc * a + b) is stored in place; any other
        is computed into a temporary first, so that no value reads a buffer already updated."""
        staged, in_place = [], []
        own = {b[0] for b in bufs.values()}
        for name in carried:
            buf, shape, dtype, base = bufs[name]
            new = self.env.get(name)
            if new is None:
                raise self.error(f"{name} is undefined at the end of the loop body")
            new = _runtime(new)
            if shape == "step":
                staged.append((buf, self._step(name, dtype, buf, new), ()))
                continue
            if shape is None:
                if not isinstance(new, V.BlockPtr) or new.base is not dtype.base:
                    raise self.error(f"block pointer {name} becomes another pointer in the loop body")
                tmp = self.em.local("n", (len(new.offsets),), "int64")
                for d, o in enumerate(new.offsets):
                    self.em.emit(BufferStore(tmp, o, (const(d),)))
                staged.append((buf, buffer_block(tmp, (len(new.offsets),), tld.int64), (len(new.offsets),)))
                continue
            if V.broadcast_shapes(new.shape, shape) != shape:
                raise self.error(f"{name} changes shape in the loop: {list(shape)} to {list(new.shape)}")
            if new.base is not base:
                raise self.error(f"pointer {name} points into another argument after the loop body")
            if isinstance(new, V.Block) and new.buffer is buf:
                continue  # updated in place
            if dtype.is_pointer:
                new = _offsets(new)
            else:
                new = ops.cast_to(new, dtype)
            if isinstance(new, V.Block) and new.buffer is None and _elementwise_on(new, buf, own):
                in_place.append((buf, new, shape))
            elif isinstance(new, V.Block) and new.buffer is not None and new.buffer not in own:
                staged.append((buf, new, shape))
            elif isinstance(new, V.Block):  # (another carried buffer is copied too: a, b = b, a)
                staged.append((buf, self.em.materialize(V.Block(new.shape, new.dtype, new.at, cost=new.cost), "n"),
                               shape))
            else:
                staged.append((buf, self.em.scalar(new.expr, new.dtype, "n"), shape))
        for buf, new, shape in in_place + staged:
            self.em.store_block(buf, new, shape)

    def _step(self, name: str, start: V.Block, step, new) -> V.Scalar:
        """The new offset of a stepped pointer block (the same step for every element), or
        _NotStepped."""
        if not isinstance(new, V.Block) or new.shape != start.shape or new.base is not start.base:
            raise _NotStepped(name)
        idx = tuple(Var(f"q{d}") for d in range(len(start.shape)))
        diff = Analyzer().simplify(new.at(idx) - _stepped(start, step).at(idx))
        if uses_var(diff, list(idx)):
            raise _NotStepped(name)
        return self.em.scalar(BufferLoad(step, (const(0),), "int64") + diff, tld.int64, "n")

    def _after_loop(self, s, carried: list[str], bufs: dict) -> None:
        """Carried names read their buffers; the others the body assigned (and the loop
        variable) are gone: their values belong to one iteration."""
        for name in self._assigned(s) - set(carried):
            self.env.pop(name, None)
        for name in carried:
            buf, shape, dtype, base = bufs[name]
            if shape == "step":
                self.env[name] = _stepped(dtype, buf)
            else:
                self.env[name] = _read_block_ptr(buf, dtype) if shape is None else _read(buf, shape, dtype, base)

    # -- expressions -----------------------------------------------------------------------------
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
                return self.binop(_BINOPS[type(op)], self.expr(a), self.expr(b))
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


_MISSING = object()


def _max0(e):
    from ...tir.expr import max_

    return max_(e, const(0))


def _runtime(v):
    if V.is_runtime(v):
        return v
    if isinstance(v, int | float | bool):
        return V.as_scalar(v)
    raise V.TileTypeError(f"{v!r} cannot change at run time (only numbers and blocks can)")


def _offsets(v):
    """A pointer value as its element offsets (int64)."""
    if isinstance(v, V.Scalar):
        return V.Scalar(v.expr, tld.int64)
    return V.Block(v.shape, tld.int64, v.at, cost=v.cost, deps=v.deps)


@contextlib.contextmanager
def _no_return(frontend: Frontend):
    """A value returned under a run-time condition or in a run-time loop is an error."""
    try:
        yield
    except _Return:
        raise frontend.error("`return` of a value under a run-time condition is not supported by the compiler: "
                             "assign it, and return it at the end of the function") from None


def _returns_early(s: ast.stmt) -> bool:
    """An `if` whose body ends with a bare `return` and whose `else` does not return."""
    return (isinstance(s, ast.If) and isinstance(s.body[-1], ast.Return) and s.body[-1].value is None
            and not any(isinstance(x, ast.Return) for x in s.orelse))


def _elementwise_on(v: V.Block, buf, carried: set) -> bool:
    """Whether v reads the loop-carried buffers only as buf at v's own element."""
    idx = tuple(Var(f"q{d}") for d in range(len(v.shape)))
    here = V.flat_index(v.shape, idx)
    ok = [True]

    def check(e):
        if isinstance(e, BufferLoad) and e.buffer in carried:
            ok[0] &= e.buffer is buf and structural_equal(e.indices[0], here)

    visit_expr(v.at(idx), check)
    return ok[0]


class _NotStepped(Exception):
    def __init__(self, name: str):
        self.name = name


def _stepped(start: V.Block, step) -> V.Block:
    """A pointer block advanced by the offset in `step` (a one-element buffer) from `start`."""
    return V.Block(start.shape, start.dtype, lambda idx: start.at(idx) + BufferLoad(step, (const(0),), "int64"),
                   base=start.base, cost=start.cost + 1)


def _read_block_ptr(buf, p: V.BlockPtr) -> V.BlockPtr:
    offsets = tuple(BufferLoad(buf, (const(d),), "int64") for d in range(len(p.offsets)))
    return V.BlockPtr(p.base, p.offset, p.shape, p.strides, offsets, p.block_shape, p.order)


def _read(buf, shape, dtype, base):
    if shape:
        b = buffer_block(buf, shape, dtype)
        return V.Block(shape, dtype, b.at, base=base, buffer=buf) if base is not None else b
    return V.Scalar(BufferLoad(buf, (const(0),), buf.dtype), dtype, base)


def _py_compare(op, a, b):
    if isinstance(op, ast.Is):
        return a is b
    if isinstance(op, ast.IsNot):
        return a is not b
    if isinstance(op, ast.In):
        return a in b
    return a not in b

"""Loops: `for` over `tl.static_range` unrolled in Python; over `range`/`tl.range` a loop of the
loop IR, whose bounds may be run-time scalars; `while` on a run-time condition a loop that tests
it before each iteration. A name the body reassigns that lives before the loop is loop-carried:
kept in a local buffer, written back at the end of each iteration (in place where the new value
reads only its own element), a pointer block first tried as its value before the loop plus a
stepped offset."""

from __future__ import annotations

import ast
import builtins as py
import inspect

from ....tir.arith import Analyzer
from ....tir.expr import BufferLoad, Var, cast, const, max_
from ....tir.functor import uses_var, visit_expr
from ....tir.stmt import BufferStore, For, While, seq
from ....tir.structural import structural_equal
from ...language import core as tlcore
from ...language import dtypes as tld
from ...language.dtypes import unwrap
from .. import ops
from .. import values as V
from ..emitter import buffer_block
from .statements import Statements, runtime_value
from .walker import no_return


class Loops(Statements):
    """for_ and while_, and the loop-carried names (the module doc)."""

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
                with self.em.capture() as body, no_return(self):
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
        with self.em.capture() as body, no_return(self):
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
            v = runtime_value(self.env[name])
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
            new = runtime_value(new)
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


def _max0(e):
    return max_(e, const(0))


def _offsets(v):
    """A pointer value as its element offsets (int64)."""
    if isinstance(v, V.Scalar):
        return V.Scalar(v.expr, tld.int64)
    return V.Block(v.shape, tld.int64, v.at, cost=v.cost, deps=v.deps)


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

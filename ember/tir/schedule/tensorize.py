"""tensorize(loop, intrin): replace the loop nest under `loop` by calls of a tensor intrinsic
(ember.tir.tensor_intrin), after checking that the nest computes what the intrinsic describes.

The check pairs the loops under `loop` with the description's loops, in order (their extents
must be equal), then each iteration variable of the block with the description's one bound to
the paired loop (their kinds must be equal: a reduction maps onto a reduction). A binding is
split into its base (the loops outside, `k_0 * 4`) and its part inside (`k_1`). The block's body
and init, with each iteration variable replaced by base + the description's variable, must be
the description's expression for expression, with the dtypes the intrinsic takes; in each access
`A[.., base + i, ..]` a dimension either stays put inside (part of the address) or walks one of
the description's dimensions (`a[i]`), or several (`A[i, k_0 * 4 + k_1]` walks a[i, kg, g]: a row
of K values in groups of 4, with strides K, 4 and 1), in any order, with the stride the intrinsic
takes (a transposed read walks with the row stride).

    for i_1 in range(4):                   if k_0 == 0:
      for j in range(4):                      routine.mm4_reset(C + i_0*64 + j_0*4, 16)
        for k_1 in range(4):         ->     routine.mm4_update(A + i_0*64 + k_0*4, B + .., C + .., 16, 16, 16)
          C[i, j] += A[i, k] * B[k, j]

A reduction wholly inside is one call of the intrinsic's body; one that also runs over loops
outside is its reset at the first iteration of those (the base at its minimum) then its update
(TVM's semantics); a reduction whose init decompose_reduction made a block of its own is the
update alone (the init stays loop IR, before the reduction's loops, where the accumulators of an
update inside them can live in registers). The calls carry every argument's address and strides, so that the loop-IR
interpreter can run the description in their place.
"""

from __future__ import annotations

import dataclasses

from ...errors import ScheduleError
from ..arith import Analyzer
from ..expr import Buffer, BufferLoad, Const, PrimExpr, Var, all_, as_int, const, is_const
from ..expr_functor import substitute
from ..functor import substitute_stmt
from ..stmt import BlockRealize, BufferStore, CallRoutine, For, IfThenElse, Pointer, Stmt, seq
from ..tensor_intrin import TensorIntrin, get_intrin
from .registry import primitive
from .state import LoopRV, Schedule


@primitive
def tensorize(sch: Schedule, loop: LoopRV, intrin: str) -> None:
    """Map the loop nest under `loop` onto the tensor intrinsic named `intrin`."""
    it = get_intrin(intrin)
    top = sch.get_for(loop)
    loops, realize = _perfect_nest(top, f"loop {top.loop_var.name}")
    d_loops, d_realize = it.desc_nest()
    where = f"tensorize {top.loop_var.name} onto {it.name}"
    if len(loops) != len(d_loops):
        raise ScheduleError(f"{where}: the nest under the loop has {len(loops)} loops, the intrinsic "
                            f"{len(d_loops)} ({', '.join(f.loop_var.name for f in d_loops)})")
    for a, d in zip(loops, d_loops):
        if as_int(a.extent) is None or as_int(a.extent) != as_int(d.extent):
            raise ScheduleError(f"{where}: loop {a.loop_var.name} has extent {a.extent}, the intrinsic's loop "
                                f"{d.loop_var.name} {d.extent}")
    if not is_const(realize.predicate, True):
        raise ScheduleError(f"{where}: block {realize.block.name} has the predicate {realize.predicate} "
                            f"(a split that does not divide); the intrinsic computes whole tiles")
    m = _Matcher(it, where, {a.loop_var: d.loop_var for a, d in zip(loops, d_loops)})
    first = m.bind_iters(realize, d_realize)
    m.stmt(substitute_stmt(realize.block.body, m.ivmap), d_realize.block.body)
    block, d_block = realize.block, d_realize.block
    decomposed = block.init is None and block.is_reduction  # its init is a block of its own
    if (block.init is None) != (d_block.init is None) and not decomposed:
        raise ScheduleError(f"{where}: block {block.name} {'is not' if block.init is None else 'is'} a reduction "
                            f"and the intrinsic {'is' if block.init is None else 'is not'}")
    if block.init is not None:
        m.stmt(substitute_stmt(block.init, m.ivmap), d_block.init)
    sch.replace(top, m.call("update") if decomposed else m.calls(first))
    for f in loops:
        sch.consume(f.loop_var, "tensorize")


def _perfect_nest(s: Stmt, what: str) -> tuple[list[For], BlockRealize]:
    loops = []
    while isinstance(s, For):
        loops.append(s)
        s = s.body
    if not isinstance(s, BlockRealize):
        raise ScheduleError(f"tensorize: {what} must hold a perfect nest of loops around one block, "
                            f"found {type(s).__name__}")
    return loops, s


class _Matcher:
    def __init__(self, it: TensorIntrin, where: str, loop_map: dict[Var, Var]):
        self.it, self.where, self.loop_map = it, where, loop_map
        self.ana = Analyzer()
        self.dvars: set[Var] = set()
        self.ivmap: dict[Var, PrimExpr] = {}
        self.args: dict[Buffer, tuple[Buffer, PrimExpr, tuple[PrimExpr, ...]]] = {}  # desc buffer -> actual

    def fail(self, what: str):
        raise ScheduleError(f"{self.where}: {what}")

    def bind_iters(self, realize: BlockRealize, d_realize: BlockRealize) -> PrimExpr | None:
        """Map each iteration variable to base + the description's; the condition of the first
        iteration of a reduction partly outside (None when it is wholly inside)."""
        d_of_loop = {}
        for div, dval in zip(d_realize.block.iter_vars, d_realize.iter_values):
            if not isinstance(dval, Var):
                self.fail(f"the description's {div.var.name} is bound to {dval}, not to a loop")
            d_of_loop[dval] = div
            self.dvars.add(div.var)
        zero = {v: const(0, v.dtype) for v in self.loop_map}
        matched, outside = set(), []
        for iv, value in zip(realize.block.iter_vars, realize.iter_values):
            base = self.ana.simplify(substitute(value, zero))
            part = self.ana.simplify(substitute(value - base, self.loop_map))
            if is_const(part, 0):
                self.ivmap[iv.var] = base
                if iv.kind == "reduce":
                    outside.append((iv, base))
                continue
            div = d_of_loop.get(part) if isinstance(part, Var) else None
            if div is None:
                self.fail(f"{iv.var.name} is bound to {value}: its part inside the loop, {part}, is not one "
                          f"loop of the intrinsic")
            if div.kind != iv.kind:
                self.fail(f"{iv.var.name} is a {iv.kind} axis where the intrinsic's {div.var.name} is a {div.kind} "
                          f"axis")
            matched.add(div)
            self.ivmap[iv.var] = base + div.var
            if iv.kind == "reduce" and as_int(iv.dom.extent) != as_int(div.dom.extent):
                outside.append((iv, base))
        missing = [d.var.name for d in d_realize.block.iter_vars if d not in matched]
        if missing:
            self.fail(f"no iteration of the block runs over the intrinsic's {', '.join(missing)}")
        return self.ana.simplify(all_(*(base == iv.dom.min for iv, base in outside))) if outside else None

    # -- structure -------------------------------------------------------------------------
    def stmt(self, a: Stmt, d: Stmt) -> None:
        if not (isinstance(a, BufferStore) and isinstance(d, BufferStore)):
            self.fail(f"the block computes {type(a).__name__}, the intrinsic {type(d).__name__}")
        self.access(a.buffer, a.indices, d.buffer, d.indices)
        self.expr(a.value, d.value)

    def expr(self, a, d) -> None:
        if isinstance(a, BufferLoad) and isinstance(d, BufferLoad):
            self.access(a.buffer, a.indices, d.buffer, d.indices)
        elif isinstance(a, Var) or isinstance(d, Var):
            if a is not d:
                self.fail(f"{a} where the intrinsic has {d}")
        elif isinstance(a, Const) and isinstance(d, Const):
            if a.value != d.value or a.dtype != d.dtype:
                self.fail(f"the constant {a} ({a.dtype}) where the intrinsic has {d} ({d.dtype})")
        elif type(a) is not type(d) or not dataclasses.is_dataclass(a):
            self.fail(f"{a} where the intrinsic computes {d}")
        else:
            for f in dataclasses.fields(a):
                x, y = getattr(a, f.name), getattr(d, f.name)
                if isinstance(x, PrimExpr):
                    self.expr(x, y)
                elif isinstance(x, tuple):
                    if len(x) != len(y):
                        self.fail(f"{a} where the intrinsic computes {d}")
                    for xi, yi in zip(x, y):
                        self.expr(xi, yi)
                elif x != y:
                    what = "dtype" if f.name == "dtype" else f.name
                    self.fail(f"{a} has {what} {x} where the intrinsic's {d} has {y}")

    def access(self, buf: Buffer, idx, dbuf: Buffer, didx) -> None:
        if buf.dtype != dbuf.dtype:
            self.fail(f"{buf.name} is {buf.dtype}, the intrinsic's {dbuf.name} is {dbuf.dtype}")
        zero = {v: const(0, v.dtype) for v in self.dvars}
        offsets, dim_of = [], {}  # desc dimension -> (the buffer's dimension it walks, its step there)
        for i, e in enumerate(idx):
            off = self.ana.simplify(substitute(e, zero))
            offsets.append(off)
            part = self.ana.simplify(e - off)
            if is_const(part, 0):
                continue
            j = next((j for j, de in enumerate(didx) if j not in dim_of and self.ana.can_prove_equal(part, de)), None)
            if j is not None:
                dim_of[j] = (i, 1)
                continue
            split = self._split(part, [(j, de) for j, de in enumerate(didx) if j not in dim_of], zero)
            if split is None:
                break
            dim_of.update((j, (i, c)) for j, c in split.items())
        if len(dim_of) != len(didx):
            self.fail(f"the access {buf.name}[{', '.join(map(str, idx))}] does not follow the intrinsic's "
                      f"{dbuf.name}[{', '.join(map(str, didx))}]")
        strides = tuple(self.ana.simplify(x) for x in _row_major(buf.shape))
        flat = self.ana.simplify(sum((i * s for i, s in zip(offsets, strides)), const(0)))
        walked = tuple(self.ana.simplify(strides[dim_of[j][0]] * dim_of[j][1]) for j in range(len(didx)))
        old = self.args.get(dbuf)
        if old is not None:
            if old[0] is not buf or not self.ana.can_prove_equal(old[1], flat):
                self.fail(f"the intrinsic's {dbuf.name} is {old[0].name} at {old[1]} and {buf.name} at {flat}")
            return
        i = self.it.desc.params.index(dbuf)
        for j, (s, want) in enumerate(zip(walked, self.it.strides[i])):
            if not isinstance(want, Var) and not self.ana.can_prove_equal(s, want):
                self.fail(f"{buf.name} has stride {s} in dimension {dim_of[j][0]}, the intrinsic's "
                          f"{dbuf.name} takes stride {want}")
        self.args[dbuf] = (buf, flat, walked, tuple(offsets))

    def _split(self, part: PrimExpr, free: list[tuple[int, PrimExpr]], zero) -> dict[int, int] | None:
        """`part` (one dimension's index inside the loop) as a sum of constant multiples of two or
        more of the description's free dimensions that are its iteration variables, {dimension:
        multiple}, else None: a dimension the nest walks as several of the description's, as
        A[i, k_0 * 4 + k_1] walks a[i, kg, g] (a row of K values as K / 4 groups of 4)."""
        steps = {}
        for j, de in free:
            if not isinstance(de, Var) or de not in self.dvars:
                continue
            step = as_int(self.ana.simplify(substitute(part, {**zero, de: const(1, de.dtype)})))
            if step is None:
                return None
            if step:
                steps[j] = step
        total = sum((const(c) * dict(free)[j] for j, c in steps.items()), const(0))
        return steps if len(steps) > 1 and self.ana.can_prove_equal(part, total) else None

    # -- the calls -------------------------------------------------------------------------
    def calls(self, first: PrimExpr | None) -> Stmt:
        it = self.it
        if first is None:
            if it.call("body") is not None:
                return self.call("body")
            if it.call("reset") is None:
                self.fail("the intrinsic has no body, and no reset and update")
            return seq(self.call("reset"), self.call("update"))
        if it.call("reset") is None or it.call("update") is None:
            self.fail("the reduction also runs over loops outside, so the intrinsic needs a reset and an update; "
                      "it has only a body")
        return seq(IfThenElse(first, self.call("reset")), self.call("update"))

    def call(self, role: str) -> CallRoutine:
        it, c = self.it, self.it.call(role)
        if c is None:
            self.fail(f"the reduction's init is a block of its own (decompose_reduction), so the intrinsic "
                      f"needs an update; it has {', '.join(r for r, _ in it.calls)}")
        params = it.desc.params
        missing = [p.name for p in params if p not in self.args]
        if missing:
            self.fail(f"the block does not access the intrinsic's {', '.join(missing)}")
        smap = {v: s for p, st in zip(params, it.strides) for v, s in zip(st, self.args[p][2]) if isinstance(v, Var)}
        n_in = it.n_inputs
        ptrs = [Pointer(self.args[p][0], self.args[p][1], self.args[p][3]) for p in params]
        scalars = tuple(self.ana.simplify(substitute(x, smap)) for x in c.scalars)
        strides = tuple(s for p in params for s in self.args[p][2])
        order = {p: i for i, p in enumerate(params)}
        return CallRoutine(c.routine, (("intrin", it.name), ("role", role),
                                       ("c_reads", tuple(order[p.buffer] for p in c.reads)),
                                       ("c_writes", tuple(order[p.buffer] for p in c.writes)),
                                       ("c_scalars", len(scalars))),
                           tuple(ptrs[:n_in]), tuple(ptrs[n_in:]), scalars + strides)


def _row_major(shape) -> tuple[PrimExpr, ...]:
    out, acc = [], const(1)
    for d in reversed(shape):
        out.append(acc)
        acc = acc * d
    return tuple(reversed(out))

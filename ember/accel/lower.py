"""The tensorized loop IR as device instructions: the accelerator's loop pass (the last of its
backend's, after flattening), which leaves the host's loops as they are and turns

- each copy nest between DRAM and an accelerator memory (a cache stage's copy) into one
  `dma_copy2d` (a 2-D DMA: rows of consecutive elements, a row stride on each side);
- each tensorized call of the accelerator's GEMM intrinsic into a device GEMM (its `update` or
  `body`) or an accumulator reset (its `reset`), named as the intrinsic's declaration calls them;
- a reset done on the first iteration of a loop (`if ko == 0: fill_zero(CL)`) into one reset
  before that loop, as the instruction stream does it.

Every call carries `accel` (the device's name) and `op` ("load", "store", "gemm", "reset"); the
renderer (ember.accel.codegen) calls the simulator's instruction for it. What the device cannot
do is an error here, naming what and why: a tile larger than its memory, a DMA of a region whose
rows are not contiguous, an element type the memory does not hold, the host reading a device
memory, an intrinsic the device does not have.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import LowerError, ScheduleError
from ..tir import dtype as dt
from ..tir.arith import Analyzer, simplify
from ..tir.expr import Binary, Buffer, BufferLoad, Const, PrimExpr, Var, as_int, const
from ..tir.expr_functor import free_vars, substitute, visit_expr
from ..tir.functor import collect, mutate_stmt, stmt_exprs, visit_stmt
from ..tir.stmt import Allocate, BufferStore, CallRoutine, For, IfThenElse, Pointer, PrimFunc, SeqStmt, Stmt, seq
from ..tir.tensor_intrin import get_intrin
from .spec import ACCELERATORS, ALU_OPS, Accelerator, memory_of


def to_instructions(func: PrimFunc) -> PrimFunc:
    """The loop pass (see the module doc); a function that uses no accelerator memory is left alone."""
    allocs = [s.buffer for s in collect(func.body, lambda s: isinstance(s, Allocate)) if memory_of(s.buffer.scope)]
    if not allocs:
        return func
    accels = {memory_of(b.scope).accel for b in allocs}
    if len(accels) > 1:
        raise ScheduleError(f"one kernel runs on one accelerator; {func.name} stages tiles in {sorted(accels)}")
    accel = ACCELERATORS[accels.pop()]
    check_capacity(accel, allocs)
    body = _Rewriter(accel).stmt(func.body)
    body = _hoist_resets(body)
    _check_host_access(body)
    doubled: list[Buffer] = []
    body = _double_buffer(body, doubled)
    if doubled:
        check_capacity(accel, [s.buffer for s in collect(body, lambda s: isinstance(s, Allocate))
                               if memory_of(s.buffer.scope)])
    return replace(func, body=body, attrs=(*func.attrs, (DOUBLED, tuple(doubled))))


DOUBLE_BUFFER = "pragma_double_buffer"  # s[CL].pragma(ko, "double_buffer"): ko's input tiles, twice
DOUBLED = "accel_doubled"  # the function's attribute: its device tiles held twice


def _double_buffer(s: Stmt, doubled: list) -> Stmt:
    """The device tiles a loop marked double_buffer allocates, twice: iteration i uses half i % 2,
    so the DMA fills one half while the GEMMs read the other (VTA's virtual threads do this by
    interleaving two threads' instructions). Each half is a slot of its own (ember.accel.codegen)."""
    match s:
        case For() if dict(s.annotations).get(DOUBLE_BUFFER):
            allocs, inner = [], s.body
            while isinstance(inner, Allocate):
                allocs.append(inner.buffer)
                inner = inner.body
            half = {b: Buffer(b.name, (const(2), *b.shape), b.dtype, b.scope) for b in allocs if memory_of(b.scope)}
            doubled.extend(half.values())
            if not half:
                raise ScheduleError(f"loop {s.loop_var.name} is marked double_buffer but stages no device tile; "
                                    f"compute the cache_read stages at it")
            which = (s.loop_var - s.min) % 2

            def moved(p: Pointer) -> Pointer:
                b = half.get(p.buffer)
                return p if b is None else Pointer(b, simplify(p.offset + which * elements(p.buffer)))

            def on_stmt(x):
                if isinstance(x, CallRoutine):
                    return replace(x, reads=tuple(map(moved, x.reads)), writes=tuple(map(moved, x.writes)))
                return None

            body = mutate_stmt(_double_buffer(inner, doubled), f_stmt=on_stmt)
            for b in reversed(allocs):
                body = Allocate(half.get(b, b), body)
            return For(s.loop_var, s.min, s.extent, s.kind, body, s.annotations)
        case For():
            return replace(s, body=_double_buffer(s.body, doubled))
        case SeqStmt(stmts):
            return seq(*(_double_buffer(x, doubled) for x in stmts))
        case Allocate(buf, body):
            return Allocate(buf, _double_buffer(body, doubled))
        case IfThenElse(c, t, e):
            return IfThenElse(c, _double_buffer(t, doubled), None if e is None else _double_buffer(e, doubled))
    return s



def layout(accel: Accelerator, buffers) -> dict[Buffer, int]:
    """Each device buffer's first element in its memory: the buffers of one memory side by side,
    in the order given (no two of a kernel share space)."""
    used: dict[str, int] = {}
    out = {}
    for b in buffers:
        m = memory_of(b.scope)
        out[b] = used.get(m.role, 0)
        used[m.role] = out[b] + elements(b)
    return out


def check_capacity(accel: Accelerator, buffers) -> None:
    """A ScheduleError naming the memory, the tiles in it and both sizes when they do not fit."""
    for m in accel.memories:
        mine = [b for b in buffers if b.scope == m.scope]
        need = sum(elements(b) for b in mine) * dt.bits(m.dtype) // 8
        if need > m.bytes:
            tiles = ", ".join(f"{b.name} ({'x'.join(str(as_int(d)) for d in b.shape)} {b.dtype}, "
                              f"{elements(b) * dt.bits(b.dtype) // 8} bytes)" for b in mine)
            raise ScheduleError(f"{m.scope} holds {m.bytes} bytes; the tiles staged in it need {need}: {tiles}. "
                                f"Tile smaller, or compute the stage at an inner loop")


def elements(b: Buffer) -> int:
    """The elements of a device tile (its shape is constant, or a ScheduleError says why not)."""
    n = 1
    for d in b.shape:
        v = as_int(d)
        if v is None:
            raise ScheduleError(f"{b.name} in {b.scope} has a symbolic shape {b.shape}: a device memory holds "
                                f"tiles of constant size")
        n *= v
    return n


class _Rewriter:
    def __init__(self, accel: Accelerator):
        self.accel = accel
        self.intrinsics = {it.name for it in accel.intrinsics}

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, For | BufferStore) and (made := self._dma(s) or self._alu(s)) is not None:
            return made
        match s:
            case For():
                body = self.stmt(s.body)
                return s if body is s.body else For(s.loop_var, s.min, s.extent, s.kind, body, s.annotations)
            case SeqStmt(stmts):
                return seq(*(self.stmt(x) for x in stmts))
            case IfThenElse(c, t, e):
                return IfThenElse(c, self.stmt(t), None if e is None else self.stmt(e))
            case Allocate(buf, body):
                return Allocate(buf, self.stmt(body))
            case CallRoutine() if "intrin" in dict(s.params):
                return self._gemm(s)
        return s

    # -- DMA ----------------------------------------------------------------------------------
    def _dma(self, s: Stmt) -> CallRoutine | None:
        loops: list[For] = []
        while isinstance(s, For):
            loops.append(s)
            s = s.body
        if not isinstance(s, BufferStore) or not isinstance(s.value, BufferLoad):
            return None
        dst, src = s.buffer, s.value.buffer
        mem_d, mem_s = memory_of(dst.scope), memory_of(src.scope)
        if (mem_d is None) == (mem_s is None):
            return None  # host to host, or (below) device to device, which no copy stage makes
        mem, dram = (mem_d, src) if mem_d is not None else (mem_s, dst)
        op = "load" if mem_d is not None else "store"
        where = f"the copy of {src.name} into {dst.name}"
        if op == "store" and mem.role != "acc":
            raise ScheduleError(f"{where}: {self.accel.name} stores from {self.accel.acc_buffer.scope} only")
        if dram.dtype != mem.dtype or src.dtype != dst.dtype:
            raise ScheduleError(f"{where}: the DMA moves {mem.dtype} elements as they are; {dram.name} is "
                                f"{dram.dtype} (convert on the host, or stage a tensor of {mem.dtype})")
        if any(lp.kind not in ("serial", "unrolled", "vectorized") for lp in loops):
            return None
        rows, cols, (base_s, base_d), (stride_s, stride_d) = self._rows(
            loops, [(src, s.value.indices[0]), (dst, s.indices[0])], where, "DMA")
        return CallRoutine("dma_copy2d", (("accel", self.accel.name), ("op", op), ("memory", mem.role)),
                           (Pointer(src, base_s),), (Pointer(dst, base_d),), (rows, cols, stride_s, stride_d))

    def _rows(self, loops: list[For], sides: list, where: str, unit: str):
        """(rows, cols, each side's first element, each side's row stride) of a nest that walks
        rows of consecutive elements on every side (buffer, flat index); else a ScheduleError."""
        ana = Analyzer()
        for lp in loops:
            ana.bind_range(lp.loop_var, lp.min, lp.extent)
        dims = []  # (extent, each side's coefficient), outermost first
        for lp in loops:
            cs = tuple(_coeff(idx, lp.loop_var, ana) for _, idx in sides)
            if None in cs:
                bad = next(idx for (_, idx), c in zip(sides, cs) if c is None)
                raise ScheduleError(f"{where}: {self.accel.name}'s {unit} walks affine regions; the index {bad} is "
                                    f"not affine in {lp.loop_var.name}")
            dims.append((lp.extent, cs))
        dims = _merge(dims, ana)
        if len(dims) > 2 or (dims and not all(_is(c, 1, ana) for c in dims[-1][1])):
            shape = " x ".join(f"{ext} (stride {', '.join(f'{c} in {b.name}' for (b, _), c in zip(sides, cs))})"
                               for ext, cs in dims)
            raise ScheduleError(f"{where} is not a 2-D {unit}: {self.accel.name} walks rows of consecutive "
                                f"elements, with one row stride on each side; this region is {shape}. Stage a "
                                f"tile whose innermost axis is the tensor's last one")
        zero = {lp.loop_var: lp.min for lp in loops}
        bases = tuple(ana.simplify(substitute(idx, zero)) for _, idx in sides)
        if len(dims) == 2:
            return dims[0][0], dims[1][0], bases, tuple(ana.simplify(c) for c in dims[0][1])
        cols = dims[0][0] if dims else const(1)
        return const(1), cols, bases, (cols,) * len(sides)

    # -- ALU ----------------------------------------------------------------------------------
    def _alu(self, s: Stmt) -> Stmt | None:
        """A nest computing an accumulator tile elementwise from accumulator tiles and constants:
        one ALU instruction per operation of its expression, in place in the tile it writes."""
        loops: list[For] = []
        while isinstance(s, For):
            loops.append(s)
            s = s.body
        if not isinstance(s, BufferStore) or memory_of(s.buffer.scope) is None or isinstance(s.value, BufferLoad):
            return None
        dst, where = s.buffer, f"the computation of {s.buffer.name}"
        if memory_of(dst.scope).role != "acc":
            return None  # (the host check names it)
        steps: list = []  # (op, a, b): operands ("mem", load) | ("imm", value) | ("dst",)
        self._alu_steps(s.value, steps, where)
        if any(o[0] == "mem" and o[1].buffer is dst for _, a, b in steps[1:] for o in (a, b)):
            raise ScheduleError(f"{where} reads {dst.name} after its first ALU step overwrote it; compute it in "
                                f"a tile of its own (cache_write)")
        loads = [o[1] for _, a, b in steps for o in (a, b) if o[0] == "mem"]
        sides = [(dst, s.indices[0]), *((ld.buffer, ld.indices[0]) for ld in loads)]
        rows, cols, bases, strides = self._rows(loops, sides, where, "ALU operation")
        at = {id(ld): (Pointer(ld.buffer, base), stride) for ld, base, stride in zip(loads, bases[1:], strides[1:])}
        out = Pointer(dst, bases[0])
        calls = []
        for op, a, b in steps:
            ins = [at[id(o[1])] if o[0] == "mem" else (out, strides[0]) for o in (a, b) if o[0] != "imm"]
            imm = b[1] if b[0] == "imm" else 0
            calls.append(CallRoutine("alu", (("accel", self.accel.name), ("op", "alu"), ("alu", op)),
                                     tuple(p for p, _ in ins), (out,),
                                     (rows, cols, strides[0], *(st for _, st in ins), const(imm))))
        return seq(*calls)

    def _alu_steps(self, e: PrimExpr, steps: list, where: str):
        """The operand holding `e`, appending the operations that compute it into the tile written."""
        acc = self.accel.acc_buffer
        if isinstance(e, BufferLoad) and e.buffer.scope == acc.scope:
            return ("mem", e)
        if isinstance(e, Const) and isinstance(e.value, int | float) and not isinstance(e.value, bool):
            return ("imm", e.value)
        if not isinstance(e, Binary) or e.dtype != acc.dtype:
            raise ScheduleError(f"{where}: {self.accel.name}'s ALU computes {', '.join(ALU_OPS)} of {acc.dtype} "
                                f"accumulator tiles and constants; {e} is not one")
        op = {"+": "add", "max": "max", "min": "min", "*": "mul", "-": "add", "//": "shr"}.get(e.op)
        a, b = self._alu_steps(e.a, steps, where), self._alu_steps(e.b, steps, where)
        if a[0] == "imm" and op in ("add", "max", "min", "mul") and e.op != "-":
            a, b = b, a
        if e.op == "-" and b[0] == "imm":
            b = ("imm", -b[1])
        elif op == "shr":
            if b[0] != "imm" or not isinstance(b[1], int) or b[1] < 1 or b[1] & (b[1] - 1) or "int" not in acc.dtype:
                op = None
            else:
                b = ("imm", b[1].bit_length() - 1)
        elif e.op == "-":
            op = None
        if op is None or a[0] == "imm" or a[0] == b[0] == "dst":
            raise ScheduleError(f"{where}: {self.accel.name}'s ALU computes {', '.join(ALU_OPS)} (shr: // by a power "
                                f"of two) of an accumulator tile and a tile or a constant, one operation at a time "
                                f"in the tile written; {e} is not such a step")
        steps.append((op, a, b))
        return ("dst",)

    # -- GEMM ---------------------------------------------------------------------------------
    def _gemm(self, call: CallRoutine) -> CallRoutine:
        params = dict(call.params)
        it = get_intrin(params["intrin"])
        if it.name not in self.intrinsics:
            raise ScheduleError(f"{it.name} is not an intrinsic of {self.accel.name} (its GEMM core's are "
                                f"{sorted(self.intrinsics)}); the tiles in its memories are read by its own")
        ptrs = call.reads + call.writes
        walked = call.scalars[params["c_scalars"]:]
        per = []
        at = 0
        for p, d in zip(ptrs, it.desc.params):
            per.append((p, walked[at:at + len(d.shape)]))
            at += len(d.shape)
        (pi, si), (pw, sw), (pa, sa) = per
        core = self.accel.core
        for (p, _), m in zip(per, self.accel.memories):
            if p.buffer.scope != m.scope:
                raise ScheduleError(f"{call.routine} of {it.name} takes its {m.role} operand from {m.scope}; "
                                    f"{p.buffer.name} is in {p.buffer.scope!r} (cache_read/cache_write it there)")
        m_, n_ = it.desc.params[2].shape
        k_ = it.desc.params[0].shape[core.inp_layout.index("k")]
        inp_s, wgt_s = dict(zip(core.inp_layout, si)), dict(zip(core.wgt_layout, sw))
        acc_s = {"i": sa[0], "j": sa[1]}
        op = "reset" if params["role"] == "reset" else "gemm"
        scalars = (m_, n_, k_) if op == "gemm" else (m_, n_)
        scalars += ((inp_s["i"], inp_s["k"], wgt_s["j"], wgt_s["k"]) if op == "gemm" else ()) + (acc_s["i"], acc_s["j"])
        reads = (pi, pw, pa) if op == "gemm" else ()
        flags = (("reset", params["role"] == "body"),) if op == "gemm" else ()
        return CallRoutine(call.routine, (("accel", self.accel.name), ("op", op), *flags), reads, (pa,), scalars)


def _coeff(index: PrimExpr, v: Var, ana: Analyzer) -> PrimExpr | None:
    """The constant step of `index` per step of `v`, or None where it is not affine in v."""
    step = ana.simplify(substitute(index, {v: v + 1}) - index)
    if v in free_vars(step):
        return None
    return step


def _is(e: PrimExpr, value: int, ana: Analyzer) -> bool:
    return ana.can_prove_equal(e, value)


def _merge(dims: list, ana: Analyzer) -> list:
    """Drop loops of one iteration and fuse an outer loop into the next where every side is
    contiguous across them (a tile that is one run of memory on each side)."""
    out: list = []
    for ext, cs in (d for d in dims if not _is(d[0], 1, ana)):
        if out and all(_is(oc, ext * c, ana) for oc, c in zip(out[-1][1], cs)):
            out[-1] = (ana.simplify(out[-1][0] * ext), cs)
        else:
            out.append((ext, cs))
    return out


def _hoist_resets(s: Stmt) -> Stmt:
    """`for ko: ...; if <ko is its first value>: reset(acc); ...` -> `reset(acc); for ko: ...`
    where nothing before the reset in the loop body touches what it writes (the buffers the body
    allocates are looked through)."""
    match s:
        case For():
            body = _hoist_resets(s.body)
            allocs, inner = [], body
            while isinstance(inner, Allocate):
                allocs.append(inner.buffer)
                inner = inner.body
            stmts = list(inner.stmts) if isinstance(inner, SeqStmt) else [inner]
            for k, x in enumerate(stmts):
                if (isinstance(x, IfThenElse) and x.else_case is None and isinstance(x.then_case, CallRoutine)
                        and dict(x.then_case.params).get("op") == "reset" and _first_iteration(x.cond, s)
                        and x.then_case.writes[0].buffer not in allocs
                        and not _touches(stmts[:k], x.then_case.writes[0].buffer)
                        and s.loop_var not in free_vars_of(x.then_case)):
                    rest = seq(*stmts[:k], *stmts[k + 1:])
                    for buf in reversed(allocs):
                        rest = Allocate(buf, rest)
                    return seq(x.then_case, For(s.loop_var, s.min, s.extent, s.kind, rest, s.annotations))
            return s if body is s.body else For(s.loop_var, s.min, s.extent, s.kind, body, s.annotations)
        case SeqStmt(stmts):
            return seq(*(_hoist_resets(x) for x in stmts))
        case Allocate(buf, body):
            return Allocate(buf, _hoist_resets(body))
        case IfThenElse(c, t, e):
            return IfThenElse(c, _hoist_resets(t), None if e is None else _hoist_resets(e))
    return s


def _first_iteration(cond: PrimExpr, loop: For) -> bool:
    """Whether `cond` holds on the loop's first iteration and on no other."""
    if free_vars(cond) != {loop.loop_var}:
        return False
    ana = Analyzer()
    if not isinstance(first := ana.simplify(substitute(cond, {loop.loop_var: loop.min})), Const) or not first.value:
        return False
    ana.bind_range(loop.loop_var, loop.min + 1, loop.extent - 1)
    return ana.can_prove(~cond)


def free_vars_of(s: Stmt) -> set:
    out: set = set()
    visit_stmt(s, lambda x: [out.update(free_vars(e)) for e in stmt_exprs(x)])
    return out


def _touches(stmts, buf: Buffer) -> bool:
    hit = []

    def on_stmt(x):
        if isinstance(x, BufferStore) and x.buffer is buf or isinstance(x, CallRoutine) and any(
                p.buffer is buf for p in x.reads + x.writes):
            hit.append(x)
        for e in stmt_exprs(x):
            visit_expr(e, lambda n: hit.append(n) if isinstance(n, BufferLoad) and n.buffer is buf else None)

    for x in stmts:
        visit_stmt(x, on_stmt)
    return bool(hit)


def _check_host_access(body: Stmt) -> None:
    """The host's code (what is left after the rewrite) reads and writes no device memory."""
    def on_expr(n):
        if isinstance(n, BufferLoad):
            _no_host_access(n.buffer, "reads")

    def on_stmt(x):
        if isinstance(x, BufferStore):
            _no_host_access(x.buffer, "writes")
        for e in stmt_exprs(x):
            visit_expr(e, on_expr)

    visit_stmt(body, on_stmt)


def _no_host_access(buf: Buffer, what: str) -> None:
    if (m := memory_of(buf.scope)) is not None:
        raise LowerError(f"the host {what} {buf.name} in {m.scope}, which only the device's DMA and GEMM core "
                         f"reach: stage it with cache_read/cache_write copies and tensorize its compute")

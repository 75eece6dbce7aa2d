"""The tensorized loop IR as device instructions: the accelerator's loop pass (the last of its
backend's, after flattening), which leaves the host's loops as they are and turns

- each copy nest between DRAM and an accelerator memory (a cache stage's copy) into one
  `dma_copy2d` (a 2-D DMA: rows of consecutive elements, a row stride on each side);
- each tensorized call of the accelerator's GEMM intrinsic into a device GEMM (its `update` or
  `body`) or an accumulator reset (its `reset`), named as the intrinsic's declaration calls them;
- each nest computing an accumulator tile elementwise (an epilogue) into ALU instructions;
- a reset done on the first iteration of a loop into one reset before it (ember.accel.hoist);
- the tiles of a loop marked double_buffer into two halves (ember.accel.double_buffer).

Every call carries `accel` (the device's name) and `op` ("load", "store", "gemm", "reset",
"alu"); the
renderer (ember.accel.codegen) calls the simulator's instruction for it. What the device cannot
do is an error here, naming what and why: a tile larger than its memory, a DMA of a region whose
rows are not contiguous, an element type the memory does not hold, the host reading a device
memory, an intrinsic the device does not have.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import LowerError, ScheduleError
from ..tir import dtype as dt
from ..tir.expr import Binary, Buffer, BufferLoad, Cast, Const, PrimExpr, const
from ..tir.expr_functor import visit_expr
from ..tir.functor import collect, stmt_exprs, visit_stmt
from ..tir.stmt import Allocate, BufferStore, CallRoutine, For, IfThenElse, Pointer, PrimFunc, SeqStmt, Stmt, seq
from ..tir.tensor_intrin import get_intrin
from .double_buffer import DOUBLED, double_buffer
from .hoist import hoist_resets
from .memories import check_capacity
from .regions import rows_of
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
    body = hoist_resets(body)
    _check_host_access(body)
    doubled: list[Buffer] = []
    body = double_buffer(body, doubled)
    if doubled:
        check_capacity(accel, [s.buffer for s in collect(body, lambda s: isinstance(s, Allocate))
                               if memory_of(s.buffer.scope)])
    return replace(func, body=body, attrs=(*func.attrs, (DOUBLED, tuple(doubled))))


def _narrower_int(narrow: str, wide: str) -> bool:
    return narrow.startswith("int") and wide.startswith("int") and dt.bits(narrow) < dt.bits(wide)


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
        narrowing = op == "store" and _narrower_int(dram.dtype, mem.dtype)
        if src.dtype != dst.dtype or dram.dtype != mem.dtype and not narrowing:
            raise ScheduleError(f"{where}: the DMA moves {mem.dtype} elements as they are (a store may narrow "
                                f"them to a smaller integer); {dram.name} is {dram.dtype} (convert on the host, or "
                                f"stage a tensor of {mem.dtype})")
        if any(lp.kind not in ("serial", "unrolled", "vectorized") for lp in loops):
            return None
        rows, cols, (base_s, base_d), (stride_s, stride_d) = rows_of(
            self.accel.name, loops, [(src, s.value.indices[0]), (dst, s.indices[0])], where, "DMA")
        return CallRoutine("dma_copy2d", (("accel", self.accel.name), ("op", op), ("memory", mem.role)),
                           (Pointer(src, base_s),), (Pointer(dst, base_d),), (rows, cols, stride_s, stride_d))

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
        value, acc = s.value, self.accel.acc_buffer.dtype
        if dst.dtype != acc:  # a tile the store narrows, computed in the accumulator's type
            cast = isinstance(value, Cast) and value.dtype == dst.dtype
            if not (cast and _narrower_int(dst.dtype, value.value.dtype)):
                raise ScheduleError(f"{where}: a {dst.dtype} tile in {dst.scope} holds {acc} values that the store "
                                    f"narrows; compute it as a cast of {acc} values")
            value = value.value
        steps: list = []  # (op, a, b): operands ("mem", load) | ("imm", value) | ("dst",)
        self._alu_steps(value, steps, where)
        if any(o[0] == "mem" and o[1].buffer is dst for _, a, b in steps[1:] for o in (a, b)):
            raise ScheduleError(f"{where} reads {dst.name} after its first ALU step overwrote it; compute it in "
                                f"a tile of its own (cache_write)")
        loads = [o[1] for _, a, b in steps for o in (a, b) if o[0] == "mem"]
        sides = [(dst, s.indices[0]), *((ld.buffer, ld.indices[0]) for ld in loads)]
        rows, cols, bases, strides = rows_of(self.accel.name, loops, sides, where, "ALU operation")
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
        if isinstance(e, BufferLoad) and e.buffer.scope == acc.scope and e.dtype == acc.dtype:
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

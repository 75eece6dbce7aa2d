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

from ..errors import LowerError, ScheduleError
from ..tir import dtype as dt
from ..tir.arith import Analyzer
from ..tir.expr import Buffer, BufferLoad, Const, PrimExpr, Var, as_int, const
from ..tir.expr_functor import free_vars, substitute, visit_expr
from ..tir.functor import collect, stmt_exprs, visit_stmt
from ..tir.stmt import Allocate, BufferStore, CallRoutine, For, IfThenElse, Pointer, PrimFunc, SeqStmt, Stmt, seq
from ..tir.tensor_intrin import get_intrin
from .spec import ACCELERATORS, Accelerator, memory_of


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
    return func.with_body(body)


def layout(accel: Accelerator, buffers) -> dict[Buffer, int]:
    """Each device buffer's first element in its memory: the buffers of one memory side by side,
    in the order given (no two of a kernel share space)."""
    used: dict[str, int] = {}
    out = {}
    for b in buffers:
        m = memory_of(b.scope)
        out[b] = used.get(m.role, 0)
        used[m.role] = out[b] + _elements(b)
    return out


def check_capacity(accel: Accelerator, buffers) -> None:
    """A ScheduleError naming the memory, the tiles in it and both sizes when they do not fit."""
    for m in accel.memories:
        mine = [b for b in buffers if b.scope == m.scope]
        need = sum(_elements(b) for b in mine) * dt.bits(m.dtype) // 8
        if need > m.bytes:
            tiles = ", ".join(f"{b.name} ({'x'.join(str(as_int(d)) for d in b.shape)} {b.dtype}, "
                              f"{_elements(b) * dt.bits(b.dtype) // 8} bytes)" for b in mine)
            raise ScheduleError(f"{m.scope} holds {m.bytes} bytes; the tiles staged in it need {need}: {tiles}. "
                                f"Tile smaller, or compute the stage at an inner loop")


def _elements(b: Buffer) -> int:
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
        if isinstance(s, For | BufferStore) and (dma := self._dma(s)) is not None:
            return dma
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
        if op == "load" and mem.role == "acc" or op == "store" and mem.role != "acc":
            raise ScheduleError(f"{where}: {self.accel.name} loads into {self.accel.inp_buffer.scope} and "
                                f"{self.accel.wgt_buffer.scope} and stores from {self.accel.acc_buffer.scope}")
        if dram.dtype != mem.dtype or src.dtype != dst.dtype:
            raise ScheduleError(f"{where}: the DMA moves {mem.dtype} elements as they are; {dram.name} is "
                                f"{dram.dtype} (convert on the host, or stage a tensor of {mem.dtype})")
        if any(lp.kind not in ("serial", "unrolled", "vectorized") for lp in loops):
            return None
        ana = Analyzer()
        for lp in loops:
            ana.bind_range(lp.loop_var, lp.min, lp.extent)
        (d_idx,), (s_idx,) = s.indices, s.value.indices
        lvars = [lp.loop_var for lp in loops]
        dims = []  # (extent, dst coefficient, src coefficient), outermost first
        for lp in loops:
            cd, cs = _coeff(d_idx, lp.loop_var, ana), _coeff(s_idx, lp.loop_var, ana)
            if cd is None or cs is None:
                raise ScheduleError(f"{where}: {self.accel.name}'s DMA copies affine regions; the index "
                                    f"{d_idx if cd is None else s_idx} is not affine in {lp.loop_var.name}")
            dims.append((lp.extent, cd, cs, lp.loop_var.name))
        dims = _merge(dims, ana)
        if len(dims) > 2 or (dims and not (_is(dims[-1][1], 1, ana) and _is(dims[-1][2], 1, ana))):
            shape = " x ".join(f"{ext} (stride {cs} in {src.name}, {cd} in {dst.name})" for ext, cd, cs, _ in dims)
            raise ScheduleError(f"{where} is not a 2-D DMA: {self.accel.name} copies rows of consecutive "
                                f"elements, with one row stride on each side; this region is {shape}. Stage a "
                                f"tile whose innermost axis is the tensor's last one")
        zero = {v: lp.min for v, lp in zip(lvars, loops)}
        base_d, base_s = ana.simplify(substitute(d_idx, zero)), ana.simplify(substitute(s_idx, zero))
        rows, cols = (dims[0][0], dims[1][0]) if len(dims) == 2 else (const(1), dims[0][0] if dims else const(1))
        stride_d, stride_s = (dims[0][1], dims[0][2]) if len(dims) == 2 else (cols, cols)
        return CallRoutine("dma_copy2d", (("accel", self.accel.name), ("op", op), ("memory", mem.role)),
                           (Pointer(src, base_s),), (Pointer(dst, base_d),),
                           (rows, cols, ana.simplify(stride_s), ana.simplify(stride_d)))

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
    """Drop loops of one iteration and fuse an outer loop into the next where both sides are
    contiguous across them (a tile that is one run of memory on both sides)."""
    dims = [d for d in dims if not _is(d[0], 1, ana)]
    out: list = []
    for ext, cd, cs, name in dims:
        if out:
            o_ext, o_cd, o_cs, o_name = out[-1]
            if _is(o_cd, ext * cd, ana) and _is(o_cs, ext * cs, ana):
                out[-1] = (ana.simplify(o_ext * ext), cd, cs, name)
                continue
        out.append((ext, cd, cs, name))
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

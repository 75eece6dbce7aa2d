"""The host's C for an accelerator kernel: the C renderer's loops, with each device buffer placed
in its memory (ember.accel.lower.layout: an offset, no host array) and each device call
(ember.accel.lower) one call of the simulator's instruction (ember.accel.simulator), whose
source the unit holds once."""

from __future__ import annotations

from ..codegen.c import CRenderer
from ..errors import LowerError
from ..tir import dtype as dt
from ..tir.functor import collect
from ..tir.stmt import Allocate, CallRoutine, PrimFunc, Stmt
from .double_buffer import DOUBLED
from .memories import elements, layout
from .simulator import SLOTS, simulator_source
from .spec import ALU_OPS, Accelerator, memory_of

MEMORY_INDEX = {"inp": 0, "wgt": 1, "acc": 2}


class AccelRenderer(CRenderer):
    def __init__(self, accel: Accelerator, align: int):
        super().__init__(False, align)
        self.accel = accel

    def _begin_kernel(self, func: PrimFunc) -> None:
        super()._begin_kernel(func)
        bufs = [s.buffer for s in collect(func.body, lambda s: isinstance(s, Allocate)) if memory_of(s.buffer.scope)]
        self._doubled = set(func.attr(DOUBLED, ()))
        self._sram = layout(self.accel, bufs)
        self._slot, used = {}, 0
        for b in bufs:  # a double-buffered tile's halves are a slot each
            self._slot[b], used = used, used + (2 if b in self._doubled else 1)
        if used > SLOTS:
            raise LowerError(f"{func.name} stages {used} device tiles; the simulator tracks {SLOTS}")
        self.lib.source(f"accel {self.accel.name}", simulator_source(self.accel))

    def _allocate(self, buf, body: Stmt, depth: int, out: list[str]) -> None:
        m = memory_of(buf.scope)
        if m is None:
            super()._allocate(buf, body, depth, out)
            return
        out.append(f"{'  ' * depth}/* {buf.name}: {m.scope} from element {self._sram[buf]}, slot {self._slot[buf]} */")
        self._stmt(body, depth, out)

    def _other_stmt(self, s: Stmt, depth: int, out: list[str]) -> None:
        params = dict(s.params) if isinstance(s, CallRoutine) else {}
        if "accel" not in params:
            super()._other_stmt(s, depth, out)
            return
        op, pad = params["op"], "  " * depth
        scalars = [self._e(x) for x in s.scalars]
        if op == "load":
            (src,), (dst,) = s.reads, s.writes
            rows, cols, ss, ds = scalars
            args = [str(MEMORY_INDEX[params["memory"]]), *self._device(dst), self._host(src), rows, cols, ss, ds]
        elif op == "store":
            (src,), (dst,) = s.reads, s.writes
            rows, cols, ss, ds = scalars
            args = [*self._device(src), self._host(dst), rows, cols, ds, ss, str(dt.bits(dst.buffer.dtype) // 8)]
        elif op == "alu":
            (d,) = s.writes
            (ds, do), ins = self._device(d), [self._device(p) for p in s.reads]
            (as_, ao), (bs, bo) = ins[0], ins[1] if len(ins) == 2 else ("-1", "0")
            rows, cols, drs, ars, *rest = scalars
            brs, imm = rest if len(ins) == 2 else ("0", rest[0])
            code = ALU_OPS.index(params["alu"])
            args = [str(code), ds, as_, bs, do, ao, bo, imm, rows, cols, drs, ars, brs]
        elif op == "reset":
            (acc,) = s.writes
            slot, at = self._device(acc)
            args = [slot, at, *scalars]
        else:
            pi, pw, pa = s.reads
            (si, oi), (sw, ow), (sa, oa) = self._device(pi), self._device(pw), self._device(pa)
            args = [str(int(params["reset"])), si, sw, sa, oi, ow, oa, *scalars]
        out.append(f"{pad}ember_accel_{op}({', '.join(args)});  /* {s.routine} */")

    def _device(self, p) -> tuple[str, str]:
        """(slot, element offset in its memory) of a device buffer's pointer."""
        off, slot = self._e(p.offset), str(self._slot[p.buffer])
        if p.buffer in self._doubled:
            slot = f"{slot} + (int)(({off}) / {elements(p.buffer) // 2})"
        return slot, f"{self._sram[p.buffer]} + {off}"

    def _host(self, p) -> str:
        return f"({self._buffer(p.buffer)} + {self._e(p.offset)})"

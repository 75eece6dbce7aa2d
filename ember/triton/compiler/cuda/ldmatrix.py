"""`tl.dot` on mma.sync through ldmatrix (the TE GEMM's intrinsic, ember.intrinsics.mma) unless the
`tile_mma` option is off (EMBER_TILE_MMA=0: wmma, the fallback) or the target GPU has no mma.sync of
m16n8k16 (GPU.has("mma"): before sm_80), rewritten once the kernel is emitted.

A Tensor Core dot of fp16 or bf16 blocks on a grid of warps (dot.py's `warp_mma` calls) whose
operands are read in 16 bytes at a time from 16-byte aligned tensors along their rows (the
tutorial's a_ptrs and b_ptrs: copies.py's `_vector_read`), read by such dots alone, with rows of a
power of two bytes (mma_lanes.swizzles), has its warp's step of k made by ldmatrix and
mma.sync.m16n8k16: its operand tiles are laid out unpadded, and ember.cuda.swizzle swizzles them
(the copies' 16-byte chunks where ldmatrix reads them without bank conflicts), its accumulator
fragments are in mma's lane layout (ember.intrinsics.mma_lanes) from their start at zero to their
store to the block after the loop (mma's STORE). Every other dot keeps wmma: odd shapes and
fp32/TF32 (no grid call), operands computed in the kernel (attention's tl.trans(k), its p), an
accumulator loaded from shared memory into fragments (mma has no such load: a dot from a carried-in
value, not zeroed).
A tile that a wmma call reads too stays wmma's, and so do the dots that read it with it.
"""

from __future__ import annotations

import re
from dataclasses import replace

from .... import config
from ....intrinsics import mma, mma_lanes
from ....intrinsics.wmma import STORE as WMMA_STORE
from ....tir import dtype as dt
from ....tir.expr import Buffer, as_int
from ....tir.functor import collect, mutate_stmt
from ....tir.stmt import CallRoutine, Stmt
from .copies import OperandCopies

_WARP = re.compile(r"wmma_warp_mma_(\d+)x(\d+)x16_(f16|bf16)_f32")


def _intrin(call: CallRoutine) -> str:
    return dict(call.params).get("intrin", "")


def _renamed(call: CallRoutine, intrin, role: str) -> CallRoutine:
    """call as the `role` call of `intrin` (its pointers and scalars as they were)."""
    params = tuple((p, intrin.name if p == "intrin" else v) for p, v in call.params)
    return replace(call, routine=intrin.call(role).routine, params=params)


class SyncDots(OperandCopies):
    """The rewrite of the kernel's body that moves eligible dots onto mma.sync (the module doc)."""

    def __init__(self, debug: bool, num_warps: int):
        super().__init__(debug, num_warps)
        self.mma = bool(config.get("tile_mma")) and self.gpu.has("mma")

    def _vector_operands(self, body: Stmt) -> Stmt:
        calls = self._mma_calls(body) if self.mma else []
        self._swizzled = {p.buffer for c in calls for p in c.reads}  # (copies.py does not pad them)
        body = super()._vector_operands(body)
        return self._on_mma(body, calls) if calls else body

    def _mma_calls(self, body: Stmt) -> list[CallRoutine]:
        """The warp calls of the dots that go onto mma.sync (the module doc)."""
        calls = collect(body, lambda x: isinstance(x, CallRoutine))
        ok = [c for c in calls if _WARP.fullmatch(_intrin(c)) and all(self._swizzles(body, p.buffer, s) for p, s in zip(
            c.reads, c.scalars))]
        rows: dict[Buffer, set[int]] = {}
        for c in ok:
            for p, s in zip(c.reads, c.scalars):
                rows.setdefault(p.buffer, set()).add(as_int(s))
        ok = [c for c in ok if all(len(rows[p.buffer]) == 1 for p in c.reads)]  # (one swizzle a tile)
        while True:  # (a tile or an accumulator's fragments touched by a call that stays wmma's: its dots too)
            kept = {id(c) for c in ok}
            others = [c for c in calls if id(c) not in kept and not self._follows(c)]
            touched = {p.buffer for c in others for p in (*c.reads, *c.writes)}
            now = [c for c in ok if not touched & {p.buffer for p in (*c.reads, *c.writes)}]
            if len(now) == len(ok):
                return ok
            ok = now

    def _follows(self, call: CallRoutine) -> bool:
        """Whether call follows its fragments onto mma: their reset or their store."""
        return dict(call.params).get("role") == "reset" or _intrin(call) == WMMA_STORE.name

    def _swizzles(self, body: Stmt, buf: Buffer, row: object) -> bool:
        """Whether buf, read in rows of `row` elements, can be a swizzled tile: a block copied in
        16 bytes at a time, read by Tensor Core calls alone."""
        n = as_int(row)
        return (buf in self._read_ins and n is not None and mma_lanes.swizzles(n * dt.bits(buf.dtype) // 8)
                and self._read_by_dots_alone(body, buf) and self._vector_read(buf, buf, 0) is not None)

    def _on_mma(self, body: Stmt, calls: list[CallRoutine]) -> Stmt:
        """body with `calls` made by ldmatrix and mma.sync, and their fragments' resets and stores
        in mma's lane layout."""
        frags: dict[Buffer, str] = {}
        table: dict[int, CallRoutine] = {}
        for c in calls:
            wm, wn, _ = _WARP.fullmatch(_intrin(c)).groups()
            frags[c.writes[0].buffer] = c.reads[0].buffer.dtype
            table[id(c)] = _renamed(c, mma.warp_mma(c.reads[0].buffer.dtype, int(wm), int(wn)), "update")

        def on_stmt(x):
            if not isinstance(x, CallRoutine):
                return None
            if id(x) in table:
                return table[id(x)]
            frag = next((p.buffer for p in (*x.reads, *x.writes) if p.buffer in frags), None)
            if frag is None:
                return None
            if _intrin(x) == WMMA_STORE.name:
                return _renamed(x, mma.STORE, "body")
            return _renamed(x, mma.warp_mma(frags[frag], 16, 16), "reset")  # (a tile's 8 floats a lane zeroed)

        return mutate_stmt(body, f_stmt=on_stmt)
